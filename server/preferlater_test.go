package server

import (
	"math"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// preferModel is the test server's lm, unbatched and not started, as a
// load leaves it when the clock chose A+ on one request's cores and
// PreferWide found P not to pay: whole-request plans run A+, no wide
// form, and P on one core and across all of them are kept for the later
// looks, which time with look. It returns weak pointers to the A+ program
// and to the two P programs (narrow, wide), so that a test can see them
// go.
func preferModel(t *testing.T, looks []time.Duration, look func(quit func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel, [3]weak.Pointer[schedule.Program]) {
	t.Helper()
	off := false
	s, hs := newTestServer(t, func(o *Options) { o.Batching.Enabled = &off }, false)
	// On a host with hardware counters the traffic probe would hold a
	// core slot for an inference at Start, where a look finds it busy.
	s.measured = nil
	m := seqOf(t, s, "lm")
	f := m.form.Load()
	if f.wide == nil {
		t.Skipf("lm runs %v: no wide form", choice.Of(f.prog))
	}
	aplus, err := choice.Candidate{Sched: schedule.APlus, Workers: 1}.Program(m.net, s.pools)
	if err != nil {
		t.Fatal(err)
	}
	m.form.Store(&seqForm{prog: aplus})
	m.redescribe(func(r *api.RNNMetadata) { r.Schedule, r.WideCores = "A+", 0 })
	s.metrics.forget("lm")
	m.describe()
	m.later = newPreferLater(m.net, aplus, f.prog, f.wide, "; P then", 10, time.Millisecond)
	m.later.looks, m.later.quiet, m.later.look = looks, time.Millisecond, look
	return s, hs, m, [3]weak.Pointer[schedule.Program]{weak.Make(aplus), weak.Make(f.prog), weak.Make(f.wide)}
}

// collected reports whether the program w points to is gone after a
// collection.
func collected(w weak.Pointer[schedule.Program]) bool {
	runtime.GC()
	return w.Value() == nil
}

// TestPreferLater: a model whose load kept the clock's A+ (P did not pay)
// moves to P, with its wide form for lone requests, at the first later
// look that finds it pays: the program whole-request plans run, the
// metadata (schedule, wide_cores, schedule_reason) and the model's info
// series all change. A request that took the A+ program before the switch
// runs it to the end, with answers P's within float32 rounding; A+ goes
// once that request is done.
func TestPreferLater(t *testing.T) {
	ms := time.Millisecond
	var looked atomic.Int32
	s, hs, m, progs := preferModel(t, []time.Duration{ms, ms, ms, ms}, func(func() bool) (bool, string, error) {
		if looked.Add(1) < 3 {
			return false, "keeps it", nil
		}
		return true, "takes P instead (medians: chosen 3ms, P on 1 core(s) 3ms, P on 2 2ms)", nil
	})
	narrow, wide := progs[1].Value(), progs[2].Value()
	if r := laterReason(m.later); !strings.Contains(r, "up to 4 times") || !strings.Contains(r, "the model runs P, a lone request across all cores, once that pays") {
		t.Errorf("the load's reason for the looks: %q", r)
	}
	if md := metadataOf(t, hs); md.Schedule != "A+" || md.WideCores != 0 || testutil.ToFloat64(s.metrics.info.WithLabelValues("lm", "A+", "false")) != 1 {
		t.Fatalf("before the looks: schedule %s, wide_cores %d", md.Schedule, md.WideCores)
	}
	// A request that found a core busy before the switch holds A+.
	slots := newCoreSlots(cap(m.cores))
	slots.tryTake()
	slots.tryTake()
	held, release := m.widen(slots)
	if held != progs[0].Value() || release != nil {
		t.Fatalf("before the switch a request runs %v (wide %v), want A+", choice.Of(held), release != nil)
	}
	s.Start()
	waitUntil(t, "the switch to P", func() bool { return m.form.Load().prog == narrow })
	if f := m.form.Load(); f.wide != wide {
		t.Fatal("after the switch lone requests do not run the wide P built at load")
	}
	md := metadataOf(t, hs)
	if md.Schedule != "P" || md.WideCores != wide.Workers() ||
		!strings.Contains(md.ScheduleReason, "with the model idle (look 3): takes P instead (medians: chosen 3ms, P on 1 core(s) 3ms, P on 2 2ms); P then") {
		t.Errorf("after the switch: schedule %s, wide_cores %d, reason %q", md.Schedule, md.WideCores, md.ScheduleReason)
	}
	_, config := m.description()
	if p := config.Parameters["rnn"].StringValue; !strings.Contains(p, "(look 3)") {
		t.Errorf("the configuration's rnn parameter was not updated: %s", p)
	}
	if testutil.ToFloat64(s.metrics.info.WithLabelValues("lm", "P", "false")) != 1 {
		t.Error("rnnserve_model_info does not say lm runs P")
	}
	if s.metrics.info.DeleteLabelValues("lm", "A+", "false") {
		t.Error("rnnserve_model_info still says lm runs A+")
	}
	time.Sleep(20 * ms)
	if n := looked.Load(); n != 3 {
		t.Errorf("looked %d times, want 3 (none after the switch)", n)
	}

	// The request that held A+ runs it, and answers as P does.
	in := &seqInput{B: 1, T: 3, tokens: []int64{1, 2, 3}, outputs: []outputSpec{{name: "logits", def: outputDef{kind: "logits"}}}}
	before := held.PlanCache().Shapes
	got, err := m.runPlan(in, nil, true, held, nil)
	if err != nil {
		t.Fatal(err)
	}
	if held.PlanCache().Shapes != before+1 {
		t.Error("the request that held A+ did not run A+")
	}
	want, err := m.runPlan(in, nil, true, narrow, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].head) == 0 || len(got[0].head) != len(want[0].head) {
		t.Fatalf("logits: %d values under A+, %d under P", len(got[0].head), len(want[0].head))
	}
	for i := range got[0].head {
		if d := math.Abs(float64(got[0].head[i] - want[0].head[i])); d > 1e-4 {
			t.Fatalf("logit %d: A+ %v, P %v", i, got[0].head[i], want[0].head[i])
		}
	}
	held = nil
	if !collected(progs[0]) {
		t.Error("A+ is still held after the switch and its last request")
	}
	if collected(progs[1]) || collected(progs[2]) {
		t.Error("the P programs served were let go")
	}
}

// TestPreferLaterRelease: looks that never find P paying leave the model
// on A+ and let the two P programs go, with a reason that says so.
func TestPreferLaterRelease(t *testing.T) {
	ms := time.Millisecond
	s, hs, m, progs := preferModel(t, []time.Duration{ms, ms}, func(func() bool) (bool, string, error) {
		return false, "keeps it (medians: chosen 1ms, P on 1 core(s) 2ms, P on 2 2ms)", nil
	})
	if collected(progs[1]) || collected(progs[2]) {
		t.Fatal("the P programs went before the looks")
	}
	s.Start()
	waitUntil(t, "the looks' end", func() bool { return strings.Contains(metadataOf(t, hs).ScheduleReason, "never paid") })
	md := metadataOf(t, hs)
	if f := m.form.Load(); f.prog != progs[0].Value() || f.wide != nil || md.Schedule != "A+" || md.WideCores != 0 ||
		!strings.Contains(md.ScheduleReason, "timed again 2 times with the model idle, P never paid; the last: keeps it") {
		t.Errorf("after looks that never found P paying: %v, wide %v, schedule %s, wide_cores %d, reason %q",
			choice.Of(f.prog), f.wide != nil, md.Schedule, md.WideCores, md.ScheduleReason)
	}
	if !collected(progs[1]) || !collected(progs[2]) {
		t.Errorf("the P programs are still held after the looks: narrow %v, wide %v", progs[1].Value() != nil, progs[2].Value() != nil)
	}
	if collected(progs[0]) {
		t.Error("the A+ program served was let go")
	}
}

// TestPreferLaterLoad: a load whose clock chose A+ and found P not to pay
// keeps the two P programs for the later looks, which time the three it
// timed, and says so; with a last-level cache too small to hold P's
// copies beside A+'s it has no later looks and says why.
func TestPreferLaterLoad(t *testing.T) {
	choose0, prefer0 := choose, preferWide
	t.Cleanup(func() { choose, preferWide = choose0, prefer0 })
	choose = func(net *rnn.Network, want schedule.Schedule, prec schedule.Precision, h choice.Host, builds *choice.Builds, budget time.Duration) (choice.Candidate, string, []api.ScheduleTraffic, error) {
		if want == 0 {
			c, _, traffic, err := choice.Choose(net, schedule.APlus, prec, h, builds, 0)
			return c, "auto: A+ (timed so)", traffic, err
		}
		return choice.Choose(net, want, prec, h, builds, budget)
	}
	var timed [3]*schedule.Program
	preferWide = func(_ *rnn.Network, chosen, narrow, wide *schedule.Program, _ int, _ time.Duration, _ func() bool) (bool, string, error) {
		timed = [3]*schedule.Program{chosen, narrow, wide}
		return false, "the chosen schedule keeps it (medians: chosen 1ms, P on 1 core(s) 2ms, P on 2 1ms)", nil
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one core: no wide form to prefer")
	}
	s, _ := newTestServer(t, func(o *Options) { o.ScheduleTiming = time.Millisecond }, false)
	m := seqOf(t, s, "lm")
	f, l := m.form.Load(), m.later
	switch {
	case f.prog != timed[0] || choice.Of(f.prog).Sched != schedule.APlus || f.wide != nil:
		t.Fatalf("lm serves %v (wide %v), want the A+ timed, alone", choice.Of(f.prog), f.wide != nil)
	case l == nil || l.to.prog != timed[1] || l.to.wide != timed[2] || l.sched != "P":
		t.Fatalf("lm's later looks: %+v, want the two P programs timed", l)
	case !strings.Contains(reasonOf(m), "the chosen schedule keeps it") || !strings.Contains(reasonOf(m), laterReason(l)):
		t.Errorf("schedule_reason %q does not say the later looks will time P", reasonOf(m))
	}
	// A look times the same three programs.
	timed = [3]*schedule.Program{}
	if _, _, err := l.look(func() bool { return false }); err != nil || timed[0] != f.prog || timed[1] != l.to.prog || timed[2] != l.to.wide {
		t.Errorf("a later look did not time the load's programs: %v", err)
	}

	s, _ = newTestServer(t, func(o *Options) { o.ScheduleTiming, o.CacheBytes = time.Millisecond, 64 }, false)
	m = seqOf(t, s, "lm")
	if m.later != nil || !strings.Contains(reasonOf(m), "P is not timed again later: its weight copies of") {
		t.Errorf("with a 64-byte LLC: later looks %v, reason %q", m.later != nil, reasonOf(m))
	}
}
