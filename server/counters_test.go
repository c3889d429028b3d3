package server

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/dre/counters"
	"rnnserve/server/internal/choice"
)

// fakeCounters counts misses LLC misses and bytes DRAM bytes in every
// interval it is started for the inference runs, and nothing while idle:
// Run starts it twice, for the runs and for the idle baseline.
type fakeCounters struct {
	misses, bytes float64
	starts        int
	closed        bool
}

func (f *fakeCounters) Events() []counters.Event {
	return []counters.Event{counters.LLCLoadMisses, counters.DRAMReadBytes, counters.DRAMWriteBytes}
}
func (f *fakeCounters) Start() error { f.starts++; return nil }
func (f *fakeCounters) Stop() error  { return nil }
func (f *fakeCounters) Close() error { f.closed = true; return nil }
func (f *fakeCounters) Read() (counters.Counts, error) {
	var c counters.Counts
	k := 0.0
	if f.starts%2 == 1 {
		k = 1 // the runs; the baseline reads zero
	}
	c.Set(counters.LLCLoadMisses, k*f.misses)
	c.Set(counters.DRAMReadBytes, k*f.bytes)
	c.Set(counters.DRAMWriteBytes, k*f.bytes/2)
	return c, nil
}

func detection(events ...counters.Event) func() (*counters.Detection, error) {
	return func() (*counters.Detection, error) {
		d := &counters.Detection{Source: counters.Auto}
		for _, e := range append(counters.CoreEvents, counters.UncoreEvents...) {
			st := counters.Status{Event: e, Source: counters.Perf,
				Err: &counters.UnavailableError{Source: counters.Perf, Event: e.String(), Cause: counters.ErrNoPMU, Detail: "no core PMU here"}}
			for _, a := range events {
				if a == e {
					st.Err = nil
				}
			}
			d.Events = append(d.Events, st)
		}
		return d, nil
	}
}

func TestMeasuredTrafficUnavailable(t *testing.T) {
	// At level Info: one short line, without the long reason.
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	opened := false
	mt := newMeasuredTrafficWith(reg, log, detection(), func() (counters.Counter, error) { opened = true; return nil, nil })
	if mt != nil || opened {
		t.Fatal("a probe without counters")
	}
	if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "measured memory traffic off: no hardware counters") ||
		strings.Contains(lines[0], "no core PMU here") || len(lines[0]) > 160 {
		t.Errorf("at level info, want one short line without the reason:\n%s", logs.String())
	}
	// At level Debug the reason follows.
	logs.Reset()
	debug := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if newMeasuredTrafficWith(prometheus.NewRegistry(), debug, detection(), nil) != nil || !strings.Contains(logs.String(), "no core PMU here") {
		t.Errorf("at level debug, want the reason:\n%s", logs.String())
	}
	logs.Reset()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 0 {
		t.Errorf("metrics registered without counters: %v %v", mfs, err)
	}
	// Counters that count neither LLC misses nor DRAM bytes are as good
	// as none.
	logs.Reset()
	if mt := newMeasuredTrafficWith(reg, log, detection(counters.Cycles), nil); mt != nil {
		t.Error("a probe with only cycles")
	}
	if !strings.Contains(logs.String(), "no LLC-miss or DRAM-byte counters") {
		t.Errorf("log: %s", logs.String())
	}
}

// TestMeasuredTrafficServerHere: the real server on this machine either
// exports the measured metrics or says why not, and then has none.
func TestMeasuredTrafficServerHere(t *testing.T) {
	d, err := counters.Detect(counters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, nil, false)
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var measured []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "rnnserve_measured_") {
			measured = append(measured, mf.GetName())
		}
	}
	if len(d.Available()) == 0 && (s.measured != nil || len(measured) > 0) {
		t.Errorf("no counters here (%s), yet the probe is on and exports %v", d.Summary(), measured)
	}
}

func TestMeasuredTrafficProbe(t *testing.T) {
	s, _ := newTestServer(t, nil, false)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	fc := &fakeCounters{misses: 1000, bytes: 6400}
	mt := newMeasuredTrafficWith(reg, slog.New(slog.NewTextHandler(&logs, nil)),
		detection(counters.LLCLoadMisses, counters.DRAMReadBytes, counters.DRAMWriteBytes),
		func() (counters.Counter, error) { return fc, nil })
	if mt == nil {
		t.Fatalf("no probe: %s", logs.String())
	}
	m := seqOf(t, s, "lm")
	stop := make(chan struct{})
	if err := mt.probe(stop, m, 4); err != nil {
		t.Fatal(err)
	}
	if !fc.closed {
		t.Error("the counters were not closed")
	}
	sched := choice.Of(m.form.Load().prog).String()
	for _, c := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{mt.llcMisses.WithLabelValues("lm"), 1000},
		{mt.dramBytes.WithLabelValues("lm"), 9600},
		{mt.inferences.WithLabelValues("lm"), measureRuns},
		{mt.perInf.WithLabelValues("lm", sched, "llc_misses"), 1000.0 / measureRuns * measureLine},
		{mt.perInf.WithLabelValues("lm", sched, "imc"), 9600.0 / measureRuns},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%v = %v, want %v", c.c, got, c.want)
		}
	}
	// The counter accumulates over probes.
	if err := mt.probe(stop, m, 4); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(mt.llcMisses.WithLabelValues("lm")); got != 2000 {
		t.Errorf("llc misses after two probes %v", got)
	}
	// A failing counter is an error, not a zero.
	bad := newMeasuredTrafficWith(prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)),
		detection(counters.LLCLoadMisses), func() (counters.Counter, error) { return nil, errors.New("gone") })
	if err := bad.probe(stop, m, 4); err == nil {
		t.Error("no error from a counter that cannot open")
	}
	if testutil.CollectAndCount(bad.perInf) != 0 {
		t.Error("a failed probe exported a value")
	}
	// run stops when told to, after probing every model once.
	close(stop)
	mt.run(stop, s.table, 3)
	if got := testutil.ToFloat64(mt.inferences.WithLabelValues("feat")); got != 0 {
		t.Errorf("probed after stop: %v", got)
	}
}
