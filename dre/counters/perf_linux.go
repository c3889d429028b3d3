//go:build linux

package counters

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	perf "github.com/hodgesds/perf-utils"
	"golang.org/x/sys/unix"
)

// perfOpener makes perf-utils profilers; perfUtils is the real one, tests
// use fakes.
type perfOpener interface {
	Hardware(pid, cpu int, set perf.HardwareProfilerType) (perf.HardwareProfiler, error)
	Cache(pid, cpu int, set perf.CacheProfilerType) (perf.CacheProfiler, error)
}

type perfUtils struct{}

func (perfUtils) Hardware(pid, cpu int, set perf.HardwareProfilerType) (perf.HardwareProfiler, error) {
	return perf.NewHardwareProfiler(pid, cpu, set)
}

func (perfUtils) Cache(pid, cpu int, set perf.CacheProfilerType) (perf.CacheProfiler, error) {
	return perf.NewCacheProfiler(pid, cpu, set)
}

// coreSpecs say how perf-utils opens each core event: one profiler per
// event (a single bit of its profiler set), so that an error belongs to
// one event. perf-utils' "LL read hit" and "LL write hit" profilers count
// PERF_COUNT_HW_CACHE_RESULT_ACCESS: all accesses, hits and misses.
var coreSpecs = []struct {
	event Event
	hw    perf.HardwareProfilerType // 0: a cache event
	cache perf.CacheProfilerType
}{
	{Cycles, perf.CpuCyclesProfiler, 0},
	{Instructions, perf.CpuInstrProfiler, 0},
	{CacheReferences, perf.CacheRefProfiler, 0},
	{CacheMisses, perf.CacheMissesProfiler, 0},
	{LLCLoads, 0, perf.LLReadHitProfiler},
	{LLCLoadMisses, 0, perf.LLReadMissProfiler},
	{LLCStores, 0, perf.LLWriteHitProfiler},
	{LLCStoreMisses, 0, perf.LLWriteMissProfiler},
}

// coreEvent is one core event counted through a perf-utils profiler.
type coreEvent struct {
	event Event
	hw    perf.HardwareProfiler
	cache perf.CacheProfiler
}

func (c *coreEvent) prof() interface {
	Start() error
	Reset() error
	Stop() error
	Close() error
} {
	if c.hw != nil {
		return c.hw
	}
	return c.cache
}

func (c *coreEvent) Events() []Event { return []Event{c.event} }
func (c *coreEvent) Stop() error     { return c.prof().Stop() }
func (c *coreEvent) Close() error    { return c.prof().Close() }

func (c *coreEvent) Start() error {
	if err := c.prof().Reset(); err != nil {
		return err
	}
	return c.prof().Start()
}

// Read returns the event's value, scaled up if the kernel multiplexed it
// (ran it for part of the time it was enabled). A profile without the
// event's value, or one that never ran, gives no value rather than zero.
func (c *coreEvent) Read() (Counts, error) {
	var out Counts
	v, enabled, running, err := c.value()
	if err != nil {
		return out, fmt.Errorf("%s: %w", c.event, err)
	}
	if v == nil {
		return out, nil
	}
	if x, ok := scaled(*v, enabled, running); ok {
		out.Set(c.event, x)
	}
	return out, nil
}

// value reads the profiler and picks the event's field; nil when
// perf-utils gave none.
func (c *coreEvent) value() (v, enabled, running *uint64, err error) {
	if c.hw != nil {
		var p perf.HardwareProfile
		err = c.hw.Profile(&p)
		return hwField(&p, c.event), p.TimeEnabled, p.TimeRunning, err
	}
	var p perf.CacheProfile
	err = c.cache.Profile(&p)
	return cacheField(&p, c.event), p.TimeEnabled, p.TimeRunning, err
}

func hwField(p *perf.HardwareProfile, e Event) *uint64 {
	switch e {
	case Cycles:
		return p.CPUCycles
	case Instructions:
		return p.Instructions
	case CacheReferences:
		return p.CacheRefs
	case CacheMisses:
		return p.CacheMisses
	}
	return nil
}

func cacheField(p *perf.CacheProfile, e Event) *uint64 {
	switch e {
	case LLCLoads:
		return p.LastLevelReadHit
	case LLCLoadMisses:
		return p.LastLevelReadMiss
	case LLCStores:
		return p.LastLevelWriteHit
	case LLCStoreMisses:
		return p.LastLevelWriteMiss
	}
	return nil
}

// scaled corrects a multiplexed count: value × enabled / running. A
// counter that was enabled but never ran has no value.
func scaled(v uint64, enabled, running *uint64) (float64, bool) {
	if enabled == nil || running == nil || *running == *enabled {
		return float64(v), true
	}
	if *running == 0 {
		return 0, *enabled == 0
	}
	return float64(v) * float64(*enabled) / float64(*running), true
}

// openCore opens one core event. perf-utils returns its profiler together
// with the error when the event failed, and that profiler then lacks the
// event; so whatever the error, the profiler is read once, and the event
// counts as open only if the read gives its value.
func openCore(op perfOpener, i, pid, cpu int, d *Detection) (*coreEvent, error) {
	s := coreSpecs[i]
	c := &coreEvent{event: s.event}
	var err error
	if s.hw != 0 {
		c.hw, err = op.Hardware(pid, cpu, s.hw)
	} else {
		c.cache, err = op.Cache(pid, cpu, s.cache)
	}
	if c.hw == nil && c.cache == nil {
		if err == nil {
			err = errors.New("perf-utils returned no profiler and no error")
		}
		return nil, classify(Perf, s.event.String(), "", err, d)
	}
	v, _, _, rerr := c.value()
	if v != nil {
		return c, nil
	}
	c.Close() // an empty profiler: nothing to release but its map
	if err != nil {
		return nil, classify(Perf, s.event.String(), "", err, d)
	}
	if rerr != nil {
		return nil, classify(Perf, s.event.String(), "", rerr, d)
	}
	return nil, unavailable(Perf, s.event.String(), ErrNoValue, "perf-utils opened a profiler without error but its profile has no %s value", s.event)
}

// rawOpener opens one raw perf event (type and config from sysfs) on a
// CPU, for every process; rawPerf is the real one.
type rawOpener interface {
	Open(typ uint32, config uint64, cpu int) (perf.Profiler, error)
}

type rawPerf struct{}

func (rawPerf) Open(typ uint32, config uint64, cpu int) (perf.Profiler, error) {
	attr := unix.PerfEventAttr{
		Type:        typ,
		Config:      config,
		Size:        unix.PERF_ATTR_SIZE_VER0,
		Bits:        unix.PerfBitDisabled,
		Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open(type %d, config %#x, cpu %d): %w", typ, config, cpu, err)
	}
	return rawEvent(fd), nil
}

// rawEvent is an open perf event file descriptor.
type rawEvent int

func (r rawEvent) Start() error { return unix.IoctlSetInt(int(r), unix.PERF_EVENT_IOC_ENABLE, 0) }
func (r rawEvent) Reset() error { return unix.IoctlSetInt(int(r), unix.PERF_EVENT_IOC_RESET, 0) }
func (r rawEvent) Stop() error  { return unix.IoctlSetInt(int(r), unix.PERF_EVENT_IOC_DISABLE, 0) }
func (r rawEvent) Close() error { return unix.Close(int(r)) }

// Profile reads value, time enabled and time running (read_format with
// both times), 8 bytes each in the host's byte order.
func (r rawEvent) Profile(v *perf.ProfileValue) error {
	var b [24]byte
	n, err := unix.Read(int(r), b[:])
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("read %d bytes of a perf event, want %d", n, len(b))
	}
	v.Value = binary.NativeEndian.Uint64(b[0:])
	v.TimeEnabled = binary.NativeEndian.Uint64(b[8:])
	v.TimeRunning = binary.NativeEndian.Uint64(b[16:])
	return nil
}

// uncoreCounter is one memory-controller event on every CPU of its
// PMU's cpumask, summed and turned into bytes.
type uncoreCounter struct {
	ev    uncoreEvent
	profs []perf.Profiler
}

func (u *uncoreCounter) Events() []Event { return []Event{u.ev.event} }

func (u *uncoreCounter) each(f func(perf.Profiler) error) error {
	var errs []error
	for _, p := range u.profs {
		errs = append(errs, f(p))
	}
	return errors.Join(errs...)
}

func (u *uncoreCounter) Start() error {
	return u.each(func(p perf.Profiler) error {
		if err := p.Reset(); err != nil {
			return err
		}
		return p.Start()
	})
}

func (u *uncoreCounter) Stop() error  { return u.each(perf.Profiler.Stop) }
func (u *uncoreCounter) Close() error { return u.each(perf.Profiler.Close) }

func (u *uncoreCounter) Read() (Counts, error) {
	var out Counts
	var sum float64
	for _, p := range u.profs {
		var v perf.ProfileValue
		if err := p.Profile(&v); err != nil {
			return out, fmt.Errorf("%s/%s: %w", u.ev.pmu, u.ev.name, err)
		}
		x, ok := scaled(v.Value, &v.TimeEnabled, &v.TimeRunning)
		if !ok {
			return out, nil // never ran: no value
		}
		sum += x
	}
	out.Set(u.ev.event, sum*u.ev.bytesPer)
	return out, nil
}

// openUncore opens every memory-controller event sysfs names, one counter
// per PMU and event. Both DRAM events are unavailable, with the reason,
// when sysfs names none or none opens.
func openUncore(opt Options, d *Detection) multi {
	evs, err := findUncore(opt.Root)
	if err != nil {
		for _, e := range UncoreEvents {
			d.Events = append(d.Events, Status{Event: e, Source: Uncore, Err: err})
		}
		return nil
	}
	var cs multi
	opened := map[Event][]string{}
	failed := map[Event]error{}
	for _, ev := range evs {
		u := &uncoreCounter{ev: ev}
		var ferr error
		for _, cpu := range ev.cpus {
			p, err := opt.uncore.Open(ev.typ, ev.config, cpu)
			if err != nil {
				ferr = classify(Uncore, ev.event.String(), fmt.Sprintf("%s/%s on CPU %d", ev.pmu, ev.name, cpu), err, d)
				break
			}
			u.profs = append(u.profs, p)
		}
		if ferr != nil {
			u.Close()
			failed[ev.event] = ferr
			continue
		}
		cs = append(cs, u)
		opened[ev.event] = append(opened[ev.event], ev.pmu+"/"+ev.name)
	}
	for _, e := range UncoreEvents {
		st := Status{Event: e, Source: Uncore}
		switch {
		case len(opened[e]) > 0 && failed[e] != nil:
			// A sum over some controllers only would undercount: use none.
			for i := len(cs) - 1; i >= 0; i-- {
				if u, ok := cs[i].(*uncoreCounter); ok && u.ev.event == e {
					u.Close()
					cs = slices.Delete(cs, i, i+1)
				}
			}
			st.Err = failed[e]
		case len(opened[e]) > 0:
			st.Note = strings.Join(opened[e], " + ") + ", whole machine"
		case failed[e] != nil:
			st.Err = failed[e]
		default:
			st.Err = unavailable(Uncore, e.String(), ErrUnknownEvent, "sysfs names no %s event", e)
		}
		d.Events = append(d.Events, st)
	}
	return cs
}

// open opens the events of opt and records what happened in a Detection.
func open(opt Options) (multi, *Detection) {
	if opt.perf == nil {
		opt.perf = perfUtils{}
	}
	if opt.uncore == nil {
		opt.uncore = rawPerf{}
	}
	d := &Detection{Source: opt.Source, Scope: opt.Scope, PMUs: listPMUs(opt.Root), Paranoid: readParanoid(opt.Root)}
	var cs multi
	if opt.Source == Auto || opt.Source == Perf {
		pid, cpu := 0, -1
		if opt.Scope == CPU {
			pid, cpu = -1, opt.CPU
		}
		for i, s := range coreSpecs {
			c, err := openCore(opt.perf, i, pid, cpu, d)
			st := Status{Event: s.event, Source: Perf}
			if err != nil {
				st.Err = err
			} else {
				cs = append(cs, c)
			}
			d.Events = append(d.Events, st)
		}
	}
	if opt.Source == Auto || opt.Source == Uncore {
		cs = append(cs, openUncore(opt, d)...)
	}
	return cs, d
}

// errnos are the perf_event_open errors classify recognises, in the order
// it looks for them.
var errnos = []syscall.Errno{unix.EACCES, unix.EPERM, unix.ENOENT, unix.ENODEV, unix.EOPNOTSUPP, unix.EINVAL, unix.EBUSY, unix.EMFILE}

// findErrno returns the errno err wraps, or, for perf-utils' errors,
// which carry the errno only as text (formatted with %q, possibly inside
// another %q) in errors joined by multierr.Append (which unwrap as
// errors.Join's do), the errno whose message one of the joined errors
// contains.
func findErrno(err error) (syscall.Errno, bool) {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en, true
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		msg := e.Error()
		for _, en := range errnos {
			if strings.Contains(msg, en.Error()) {
				return en, true
			}
		}
	}
	return 0, false
}

// classify turns a failure to open an event into an *UnavailableError
// that says why, from the errno and what sysfs and procfs show. what
// names what was opened, when the event's name does not say it.
func classify(src Source, event, what string, err error, d *Detection) *UnavailableError {
	en, ok := findErrno(err)
	if !ok {
		return unavailable(src, event, ErrOpen, "%v", err)
	}
	call := "perf_event_open: " + en.Error()
	if what != "" {
		call = what + ": " + call
	}
	switch en {
	case unix.EACCES, unix.EPERM:
		who := "this process is not root and may lack CAP_PERFMON"
		if os.Geteuid() == 0 {
			who = "even as root: a container's seccomp profile or a security module may block perf_event_open"
		}
		need := "thread counters need <= 2, CPU and uncore counters <= 0"
		if d.Paranoid != "" {
			if p, perr := strconv.Atoi(d.Paranoid); perr == nil && p > 2 {
				need = "above 2 forbids every unprivileged perf event"
			}
			return unavailable(src, event, ErrPermission, "%s; perf_event_paranoid is %s (%s); %s", call, d.Paranoid, need, who)
		}
		return unavailable(src, event, ErrPermission, "%s; %s", call, who)
	case unix.ENOENT, unix.ENODEV, unix.EOPNOTSUPP, unix.EINVAL:
		if src == Perf && !slices.ContainsFunc(d.PMUs, isCorePMU) {
			return unavailable(src, event, ErrNoPMU, "%s; /%s has no core PMU (it lists %s): a virtual machine without a virtual PMU, or a kernel without perf support for this CPU",
				call, devicesDir, listOrNone(d.PMUs))
		}
		return unavailable(src, event, ErrUnknownEvent, "%s", call)
	case unix.EBUSY:
		return unavailable(src, event, ErrBusy, "%s; another tool (or the NMI watchdog) holds the counter", call)
	}
	return unavailable(src, event, ErrOpen, "%s", call)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}
