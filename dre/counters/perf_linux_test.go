//go:build linux

package counters

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	perf "github.com/hodgesds/perf-utils"
	"golang.org/x/sys/unix"
)

// perfUtilsErr builds an error the way perf-utils does when one event
// fails: the errno quoted (%q) inside NewProfiler's message, which is
// quoted again inside the profiler set's message and joined to the
// others. perf-utils joins with multierr.Append, whose errors (multierr
// v1.11, as go.mod selects) unwrap to their parts as errors.Join's do.
func perfUtilsErr(what string, errno unix.Errno) error {
	inner := fmt.Errorf("Failed to open perf event for PerfEventAttr &{Type:0 Size:128 Config:0}: %q", errno)
	return errors.Join(fmt.Errorf("Failed to setup %s profiler: pid (0) cpu (-1) %q", what, inner))
}

// fakeValue is what a fake profiler reports for one event.
type fakeValue struct {
	value, enabled, running uint64
	missing                 bool // the profile lacks the field
}

// fakePerf plays perf-utils: per event, the error its constructor
// returns (with the profiler, as perf-utils does) and what its profile
// then holds.
type fakePerf struct {
	errs   map[Event]error
	values map[Event]fakeValue
	opened []Event
	closed int
}

func specOf(hw perf.HardwareProfilerType, cache perf.CacheProfilerType) Event {
	for _, s := range coreSpecs {
		if s.hw == hw && s.cache == cache {
			return s.event
		}
	}
	panic("no such spec")
}

type fakeProf struct {
	f     *fakePerf
	event Event
	ok    bool // the constructor succeeded for the event
	on    bool
}

func (p *fakeProf) Start() error { p.on = true; return nil }
func (p *fakeProf) Reset() error { return nil }
func (p *fakeProf) Stop() error  { p.on = false; return nil }
func (p *fakeProf) Close() error { p.f.closed++; return nil }

// field is the value the profile carries for p's event, nil when the
// constructor failed for it or the fake says it is missing.
func (p *fakeProf) field() (v, en, run *uint64) {
	fv := p.f.values[p.event]
	if !p.ok || fv.missing {
		return nil, nil, nil
	}
	return &fv.value, &fv.enabled, &fv.running
}

type fakeHW struct{ fakeProf }

func (p *fakeHW) Profile(out *perf.HardwareProfile) error {
	out.Reset()
	v, en, run := p.field()
	if v == nil {
		return nil
	}
	out.TimeEnabled, out.TimeRunning = en, run
	switch p.event {
	case Cycles:
		out.CPUCycles = v
	case Instructions:
		out.Instructions = v
	case CacheReferences:
		out.CacheRefs = v
	case CacheMisses:
		out.CacheMisses = v
	}
	return nil
}

func (p *fakeHW) HasProfilers() bool { return true } // as perf-utils: even when empty

type fakeCache struct{ fakeProf }

func (p *fakeCache) Profile(out *perf.CacheProfile) error {
	out.Reset()
	v, en, run := p.field()
	if v == nil {
		return nil
	}
	out.TimeEnabled, out.TimeRunning = en, run
	switch p.event {
	case LLCLoads:
		out.LastLevelReadHit = v
	case LLCLoadMisses:
		out.LastLevelReadMiss = v
	case LLCStores:
		out.LastLevelWriteHit = v
	case LLCStoreMisses:
		out.LastLevelWriteMiss = v
	}
	return nil
}

func (p *fakeCache) HasProfilers() bool { return true }

func (f *fakePerf) Hardware(pid, cpu int, set perf.HardwareProfilerType) (perf.HardwareProfiler, error) {
	e := specOf(set, 0)
	f.opened = append(f.opened, e)
	err := f.errs[e]
	return &fakeHW{fakeProf{f: f, event: e, ok: err == nil}}, err
}

func (f *fakePerf) Cache(pid, cpu int, set perf.CacheProfilerType) (perf.CacheProfiler, error) {
	e := specOf(0, set)
	f.opened = append(f.opened, e)
	err := f.errs[e]
	return &fakeCache{fakeProf{f: f, event: e, ok: err == nil}}, err
}

// fakeRoot makes a sysfs/procfs tree listing pmus, with paranoid.
func fakeRoot(t *testing.T, paranoid string, pmus ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range pmus {
		if err := os.MkdirAll(filepath.Join(root, devicesDir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if paranoid != "" {
		writeFile(t, filepath.Join(root, paranoidFile), paranoid)
	}
	return root
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func allCore(err error) map[Event]error {
	m := map[Event]error{}
	for _, s := range coreSpecs {
		m[s.event] = perfUtilsErr(s.event.String(), err.(unix.Errno))
	}
	return m
}

// TestDetectFake checks the reason Detection gives for each way opening
// can fail, from errors formatted as perf-utils formats them.
func TestDetectFake(t *testing.T) {
	vm := []string{"breakpoint", "msr", "software", "tracepoint", "uprobe"}
	for _, c := range []struct {
		name     string
		pmus     []string
		paranoid string
		errno    unix.Errno
		cause    error
		detail   string
	}{
		{"virtual machine", vm, "2", unix.ENOENT, ErrNoPMU, "has no core PMU (it lists breakpoint, msr, software, tracepoint, uprobe)"},
		{"unknown event", append([]string{"cpu"}, vm...), "2", unix.ENOENT, ErrUnknownEvent, "perf_event_open: no such file or directory"},
		{"not supported", append([]string{"cpu"}, vm...), "2", unix.EOPNOTSUPP, ErrUnknownEvent, "operation not supported"},
		{"paranoid", []string{"cpu"}, "4", unix.EACCES, ErrPermission, "perf_event_paranoid is 4 (above 2 forbids every unprivileged perf event)"},
		{"not permitted", []string{"cpu"}, "1", unix.EPERM, ErrPermission, "perf_event_paranoid is 1"},
		{"busy", []string{"cpu"}, "0", unix.EBUSY, ErrBusy, "NMI watchdog"},
		{"other errno", []string{"cpu"}, "0", unix.EMFILE, ErrOpen, "too many open files"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fp := &fakePerf{errs: allCore(c.errno)}
			opt := Options{Source: Perf, Root: fakeRoot(t, c.paranoid, c.pmus...), perf: fp}
			cnt, d, err := Open(opt)
			if cnt != nil {
				t.Fatal("a counter although every event failed")
			}
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, c.cause) {
				t.Fatalf("Open: %v, want ErrUnavailable and %v", err, c.cause)
			}
			if len(d.Events) != len(CoreEvents) || len(d.Available()) != 0 {
				t.Fatalf("detection %+v", d.Events)
			}
			for _, s := range d.Events {
				var ue *UnavailableError
				if !errors.As(s.Err, &ue) || ue.Cause != c.cause || ue.Event != s.Event.String() || !strings.Contains(ue.Detail, c.detail) {
					t.Errorf("%s: %v, want cause %v and %q", s.Event, s.Err, c.cause, c.detail)
				}
			}
			if fp.closed != len(CoreEvents) {
				t.Errorf("closed %d of the %d empty profilers perf-utils returned", fp.closed, len(CoreEvents))
			}
			var b strings.Builder
			d.Write(&b)
			if !strings.Contains(b.String(), c.detail) || !strings.Contains(d.Summary(), c.cause.Error()) {
				t.Errorf("report lacks the reason:\n%s\nsummary %s", b.String(), d.Summary())
			}
		})
	}
}

// TestPerfPartial: some events open, some fail, some open without a
// value; the values read are scaled for multiplexing, and an event that
// never ran is absent, not zero.
func TestPerfPartial(t *testing.T) {
	fp := &fakePerf{
		errs: map[Event]error{
			Cycles:    perfUtilsErr("CPU cycle", unix.ENOENT),
			LLCStores: perfUtilsErr("last level write hit", unix.ENOENT),
		},
		values: map[Event]fakeValue{
			Instructions:    {value: 1000, enabled: 10, running: 10},
			CacheReferences: {value: 300, enabled: 100, running: 50}, // multiplexed: half the time
			CacheMisses:     {value: 0, enabled: 100, running: 0},    // never ran
			LLCLoads:        {missing: true},                         // opened without error, no value
			LLCLoadMisses:   {value: 40, enabled: 7, running: 7},
			LLCStoreMisses:  {value: 2, enabled: 7, running: 7},
		},
	}
	opt := Options{Source: Perf, Root: fakeRoot(t, "2", "cpu"), perf: fp}
	c, d, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := map[Event]error{Cycles: ErrUnknownEvent, LLCStores: ErrUnknownEvent, LLCLoads: ErrNoValue}
	for _, s := range d.Events {
		if w := want[s.Event]; (w == nil) != (s.Err == nil) || w != nil && !errors.Is(s.Err, w) {
			t.Errorf("%s: %v, want %v", s.Event, s.Err, w)
		}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	v, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	for e, w := range map[Event]float64{Instructions: 1000, CacheReferences: 600, LLCLoadMisses: 40, LLCStoreMisses: 2} {
		if got, ok := v.Get(e); !ok || got != w {
			t.Errorf("%s = %v, %v; want %v", e, got, ok, w)
		}
	}
	for _, e := range []Event{Cycles, CacheMisses, LLCLoads, LLCStores, DRAMReadBytes} {
		if v.Has(e) {
			t.Errorf("%s has a value although it was not measured", e)
		}
	}
	if m, ok := v.LLCMisses(); !ok || m != 42 {
		t.Errorf("LLC misses %v, %v; want 42 (load + store)", m, ok)
	}
	if _, ok := v.DRAMBytes(); ok {
		t.Error("DRAM bytes without uncore events")
	}
}

// TestPerfProfilerWithError: perf-utils may return a profiler that has the
// event together with an error about another; the event is used.
func TestPerfProfilerWithError(t *testing.T) {
	fp := &fakePerf{values: map[Event]fakeValue{Cycles: {value: 5, enabled: 1, running: 1}}}
	withErr := &errPerf{fakePerf: fp, err: perfUtilsErr("bus cycles", unix.ENOENT)}
	c, err := openCore(withErr, 0, 0, -1, &Detection{PMUs: []string{"cpu"}})
	if err != nil || c == nil {
		t.Fatalf("openCore: %v", err)
	}
	v, _ := c.Read()
	if got, ok := v.Get(Cycles); !ok || got != 5 {
		t.Errorf("cycles %v, %v", got, ok)
	}
}

// errPerf returns working profilers together with an error.
type errPerf struct {
	*fakePerf
	err error
}

func (e *errPerf) Hardware(pid, cpu int, set perf.HardwareProfilerType) (perf.HardwareProfiler, error) {
	p, _ := e.fakePerf.Hardware(pid, cpu, set)
	p.(*fakeHW).ok = true
	return p, e.err
}

func TestFindErrno(t *testing.T) {
	for _, en := range errnos {
		got, ok := findErrno(perfUtilsErr("x", en))
		if !ok || got != en {
			t.Errorf("%v: found %v, %v", en, got, ok)
		}
		// multierr.Append(nil, err) is err itself: one failure is not joined.
		got, ok = findErrno(perfUtilsErr("x", en).(interface{ Unwrap() []error }).Unwrap()[0])
		if !ok || got != en {
			t.Errorf("%v unjoined: found %v, %v", en, got, ok)
		}
		got, ok = findErrno(fmt.Errorf("open: %w", en))
		if !ok || got != en {
			t.Errorf("wrapped %v: found %v, %v", en, got, ok)
		}
	}
	if _, ok := findErrno(errors.New("something else")); ok {
		t.Error("found an errno in an error without one")
	}
	ue := classify(Perf, "cycles", "", errors.New("something else"), &Detection{})
	if !errors.Is(ue, ErrOpen) || !strings.Contains(ue.Error(), "something else") {
		t.Errorf("unrecognised error: %v", ue)
	}
}

// fakeRaw plays perf_event_open for uncore events: every event opened on
// cpu counts count[cpu].
type fakeRaw struct {
	count  map[int]uint64
	err    error
	opened []string
}

func (f *fakeRaw) Open(typ uint32, config uint64, cpu int) (perf.Profiler, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.opened = append(f.opened, fmt.Sprintf("type %d config %#x cpu %d", typ, config, cpu))
	return &rawFake{v: f.count[cpu]}, nil
}

type rawFake struct{ v uint64 }

func (r *rawFake) Start() error { return nil }
func (r *rawFake) Reset() error { return nil }
func (r *rawFake) Stop() error  { return nil }
func (r *rawFake) Close() error { return nil }
func (r *rawFake) Profile(v *perf.ProfileValue) error {
	v.Value, v.TimeEnabled, v.TimeRunning = r.v, 10, 10
	return nil
}

// intelIMC writes an uncore_imc PMU as the kernel describes one.
func intelIMC(t *testing.T, root, name, cpumask string) {
	dir := filepath.Join(root, devicesDir, name)
	writeFile(t, filepath.Join(dir, "type"), "14")
	writeFile(t, filepath.Join(dir, "cpumask"), cpumask)
	writeFile(t, filepath.Join(dir, "format", "event"), "config:0-7")
	writeFile(t, filepath.Join(dir, "format", "umask"), "config:8-15")
	writeFile(t, filepath.Join(dir, "events", "cas_count_read"), "event=0x04,umask=0x03")
	writeFile(t, filepath.Join(dir, "events", "cas_count_read.scale"), "6.103515625e-5")
	writeFile(t, filepath.Join(dir, "events", "cas_count_read.unit"), "MiB")
	writeFile(t, filepath.Join(dir, "events", "cas_count_write"), "event=0x04,umask=0x0c")
	writeFile(t, filepath.Join(dir, "events", "cas_count_write.scale"), "6.103515625e-5")
	writeFile(t, filepath.Join(dir, "events", "cas_count_write.unit"), "MiB")
}

func TestUncoreIntel(t *testing.T) {
	root := fakeRoot(t, "0", "cpu", "uncore_imc_0", "uncore_imc_1")
	intelIMC(t, root, "uncore_imc_0", "0,18")
	intelIMC(t, root, "uncore_imc_1", "0,18")
	raw := &fakeRaw{count: map[int]uint64{0: 1000, 18: 10}}
	c, d, err := Open(Options{Source: Uncore, Root: root, uncore: raw})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !d.Has(DRAMReadBytes) || !d.Has(DRAMWriteBytes) {
		t.Fatalf("detection %+v", d.Events)
	}
	if !strings.Contains(raw.opened[0], "type 14 config 0x304 cpu 0") || len(raw.opened) != 8 {
		t.Errorf("opened %q", raw.opened)
	}
	v, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	// Two controllers × (1000 + 10) CAS counts × 64 bytes, each way.
	if b, ok := v.DRAMBytes(); !ok || b != 2*2*1010*64 {
		t.Errorf("DRAM bytes %v, %v; want %d", b, ok, 2*2*1010*64)
	}
}

func TestUncorePermission(t *testing.T) {
	root := fakeRoot(t, "2", "cpu", "uncore_imc_0")
	intelIMC(t, root, "uncore_imc_0", "0")
	_, d, err := Open(Options{Source: Uncore, Root: root, uncore: &fakeRaw{err: unix.EACCES}})
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("got %v, want ErrPermission", err)
	}
	if !strings.Contains(err.Error(), "perf_event_paranoid is 2") || !strings.Contains(err.Error(), "uncore_imc_0/cas_count_read") {
		t.Errorf("the reason does not say what was refused and why: %v", err)
	}
	if len(d.Available()) != 0 {
		t.Error("available events after every open failed")
	}
}

func TestUncoreMissing(t *testing.T) {
	for _, c := range []struct {
		name  string
		pmus  []string
		cause error
		want  string
	}{
		{"none", []string{"cpu", "software"}, ErrNoPMU, "no memory-controller PMU (uncore_imc_*, amd_umc_*) in /sys/bus/event_source/devices (it lists cpu, software)"},
		{"amd_df only", []string{"amd_df", "cpu"}, ErrNoPMU, "amd_df is there, but the kernel names none of its DRAM events"},
		{"amd_umc without events", []string{"amd_umc_0", "cpu"}, ErrUnknownEvent, "amd_umc_0: umc_cas_cmd.rd: the kernel names no such event in sysfs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, "0", c.pmus...)
			_, _, err := Open(Options{Source: Uncore, Root: root, uncore: &fakeRaw{}})
			if !errors.Is(err, c.cause) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %v and %q", err, c.cause, c.want)
			}
		})
	}
}

// fakeCounter counts fn's calls as instructions and adds idle traffic at
// a fixed rate, like an uncore counter seeing background activity.
type fakeCounter struct {
	calls   *int
	started time.Time
	base    int
}

func (f *fakeCounter) Events() []Event { return []Event{Instructions, DRAMReadBytes} }
func (f *fakeCounter) Start() error    { f.started, f.base = time.Now(), *f.calls; return nil }
func (f *fakeCounter) Stop() error     { return nil }
func (f *fakeCounter) Close() error    { return nil }
func (f *fakeCounter) Read() (Counts, error) {
	var c Counts
	c.Set(Instructions, float64(1000*(*f.calls-f.base)))
	// 1 byte per microsecond in the background, plus 64 per call.
	c.Set(DRAMReadBytes, float64(time.Since(f.started).Microseconds())+float64(64*(*f.calls-f.base)))
	return c, nil
}

func TestRunSubtractsBaseline(t *testing.T) {
	calls := 0
	c := &fakeCounter{calls: &calls}
	m, err := Run(c, 10, func() { calls++; time.Sleep(2 * time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	per := m.PerRun()
	if v, _ := per.Get(Instructions); v != 1000 {
		t.Errorf("instructions per run %v, want 1000", v)
	}
	// The background traffic of ~2000 bytes per run is mostly removed;
	// the 64 bytes of each call remain (timer noise allowed).
	if v, _ := per.Get(DRAMReadBytes); v < 0 || v > 64+600 {
		t.Errorf("DRAM bytes per run %v, want about 64 (background %v per run)", v, m.Baseline.Scale(0.1))
	}
	if _, err := Run(c, 0, func() {}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("0 runs: %v", err)
	}
}

// TestDetectHere runs the real detection: whatever this machine has,
// every event is either available or says why not, and Measure either
// measures or returns that reason.
func TestDetectHere(t *testing.T) {
	d, err := Detect(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Events) != len(CoreEvents)+len(UncoreEvents) {
		t.Fatalf("%d events detected", len(d.Events))
	}
	for _, s := range d.Events {
		var ue *UnavailableError
		if s.Err != nil && (!errors.As(s.Err, &ue) || ue.Detail == "") {
			t.Errorf("%s: %v has no reason", s.Event, s.Err)
		}
	}
	var b strings.Builder
	d.Write(&b)
	t.Logf("%s", b.String())
	m, _, err := Measure(Options{}, 3, func() {})
	switch {
	case len(d.Available()) == 0 && !errors.Is(err, ErrUnavailable):
		t.Errorf("Measure without counters: %v, want ErrUnavailable", err)
	case len(d.Available()) > 0 && (err != nil || m.Counts.Empty()):
		t.Errorf("Measure with %v available: %v, %v", d.Available(), m, err)
	}
}
