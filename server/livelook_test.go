package server

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
)

// liveBody is the request the never-idle client sends, for every output
// of lm: the logits, the top layer's outputs and each layer's h and c.
const liveBody = `{"inputs":[{"name":"tokens","datatype":"INT64","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}],` +
	`"outputs":[{"name":"logits"},{"name":"output"},{"name":"hidden"},{"name":"cell"}]}`

// liveModel is laterModel's lm with lone requests run as whole plans
// (through the batcher's solo path, or unbatched), looks after pauses
// looks, quiet for an idle look, and rule over the medians of the live
// samples. Its idle look does not time: it ends as a request would end it.
func liveModel(t *testing.T, batching bool, looks []time.Duration, quiet time.Duration, rule func(narrow, wide time.Duration) bool) (*Server, *httptest.Server, *seqModel) {
	t.Helper()
	s, hs, m, _ := laterModel(t, looks, func(func() bool) (bool, string, error) { return false, "", choice.ErrQuit })
	m.alwaysStep, m.batching = false, batching
	m.later.quiet, m.later.live = quiet, rule
	return s, hs, m
}

// client sends liveBody to hs's lm back to back, never leaving the model
// idle, until the test or stop ends it; bodies gets each answer's bytes.
func client(t *testing.T, hs *httptest.Server, bodies func([]byte)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v2/models/lm/infer", strings.NewReader(liveBody))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			var b bytes.Buffer
			_, err = b.ReadFrom(resp.Body)
			resp.Body.Close()
			// An answer cut short by stop's cancel is no answer.
			if err == nil && resp.StatusCode == http.StatusOK && bodies != nil {
				bodies(b.Bytes())
			}
		}
	}()
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

// sampled is how many samples of each form the live look now running
// has, zeros when none runs.
func sampled(m *seqModel) [2]int {
	lv := m.live.Load()
	if lv == nil {
		return [2]int{}
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return [2]int{len(lv.per[0]), len(lv.per[1])}
}

// TestLiveLook: a model never idle for wideQuiet, whose lone requests
// find the wide form faster (the rule sees the narrow median a thousand
// times longer than timed), switches to it on a live look: the
// metadata says so with the medians of liveSamples requests of each
// form, lone requests go wide from then on, and the looks end. Where they
// find it slower it stays narrow and says so once the looks are spent.
// Both through the batcher's solo path and unbatched.
func TestLiveLook(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) { testLiveLook(t, batching) })
	}
}

func testLiveLook(t *testing.T, batching bool) {
	ms := time.Millisecond
	var medians atomic.Pointer[[2]time.Duration]
	s, hs, m := liveModel(t, batching, []time.Duration{ms, time.Hour}, 5*time.Second, func(n, w time.Duration) bool {
		medians.Store(&[2]time.Duration{n, w})
		return choice.WideFaster(1000*n, w)
	})
	wide := m.later.to.wide
	if r := laterReason(m.later); !strings.Contains(r, "or else on 8 of its lone requests on each form, up to 2 times") {
		t.Errorf("the load's reason for the looks: %q", r)
	}
	s.Start()
	client(t, hs, nil)
	waitUntil(t, "the wide form", func() bool { return m.form.Load().wide != nil })
	if m.form.Load().wide != wide || m.live.Load() != nil {
		t.Fatalf("after the switch: wide form %p (want %p), live look %v", m.form.Load().wide, wide, m.live.Load() != nil)
	}
	md := metadataOf(t, hs)
	got := medians.Load()
	if got == nil || got[0] <= 0 || got[1] <= 0 {
		t.Fatalf("the rule saw medians %v", got)
	}
	r := func(d time.Duration) string { return d.Round(10 * time.Nanosecond).String() }
	for _, want := range []string{"on its live lone requests (look 1): a request that finds all of the model's 2 cores free runs it across all of them",
		fmt.Sprintf("on 1 core(s) %v, on 2 %v per row and step (medians of 8 lone requests each)", r(got[0]), r(got[1]))} {
		if !strings.Contains(md.ScheduleReason, want) {
			t.Errorf("schedule_reason %q does not say %q", md.ScheduleReason, want)
		}
	}
	if md.WideCores != wide.Workers() {
		t.Errorf("after the switch: wide_cores %d", md.WideCores)
	}

	// Slower on live requests: no switch, and the looks end saying so.
	s, hs, m = liveModel(t, batching, []time.Duration{ms}, 5*time.Second, func(n, w time.Duration) bool { return choice.WideFaster(n, 1000*w) })
	s.Start()
	client(t, hs, nil)
	waitUntil(t, "the looks' end", func() bool { return strings.Contains(metadataOf(t, hs).ScheduleReason, "never faster") })
	md = metadataOf(t, hs)
	if m.form.Load().wide != nil || md.WideCores != 0 || m.live.Load() != nil || m.later.to.wide != nil ||
		!strings.Contains(md.ScheduleReason, "timed again 0 times with the model idle and 1 on its live lone requests, never faster across all cores; the last: a request that finds all of the model's 2 cores free stays on its own cores (not faster across all of them on live requests): on 1 core(s)") {
		t.Errorf("after a live look that found it slower: wide %v, wide_cores %d, reason %q", m.form.Load().wide != nil, md.WideCores, md.ScheduleReason)
	}
}

// TestLiveLookSameAnswers: P on one core and P across both compute every
// output bit for bit the same, so the answers of a model under live
// looks, whichever form each request ran, are the bytes of one without.
func TestLiveLookSameAnswers(t *testing.T) {
	ms := time.Millisecond
	s, hs, m := liveModel(t, true, []time.Duration{ms}, time.Hour, choice.WideFaster)
	m.later.samples = math.MaxInt // a look that never has its samples
	narrow, wide := m.form.Load().prog, m.later.to.wide
	in := schedule.Input{T: 16, B: 1, Tokens: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	var outs [2]schedule.Result
	for i, prog := range []*schedule.Program{narrow, wide} {
		p, err := prog.Plan(in, schedule.PlanOptions{Head: true})
		if err != nil {
			t.Fatal(err)
		}
		if outs[i], err = p.Run(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		name string
		a, b []float32
	}{{"head", outs[0].Head, outs[1].Head}, {"output", outs[0].Output, outs[1].Output}, {"h_n", outs[0].HN, outs[1].HN}, {"c_n", outs[0].CN, outs[1].CN}} {
		if len(f.a) != len(f.b) || len(f.a) == 0 && f.name != "c_n" {
			t.Fatalf("%s: %d values on %d core(s), %d on %d", f.name, len(f.a), narrow.Workers(), len(f.b), wide.Workers())
		}
		for i := range f.a {
			if math.Float32bits(f.a[i]) != math.Float32bits(f.b[i]) {
				t.Fatalf("%s[%d]: %v on %d core(s), %v on %d", f.name, i, f.a[i], narrow.Workers(), f.b[i], wide.Workers())
			}
		}
	}

	ref, refHS := newTestServer(t, nil, true)
	seqOf(t, ref, "lm").alwaysStep = false
	code, want, _ := post(t, refHS.URL+"/v2/models/lm/infer", liveBody)
	if code != http.StatusOK {
		t.Fatalf("reference: %d %s", code, want)
	}
	s.Start()
	var mu sync.Mutex
	var answers, differ int
	stop := client(t, hs, func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		answers++
		if !bytes.Equal(b, want) {
			differ++
		}
	})
	waitUntil(t, "samples of both forms", func() bool { n := sampled(m); return n[0] >= 8 && n[1] >= 8 })
	stop()
	if differ > 0 {
		t.Errorf("%d of %d answers under a live look differ from the model's without", differ, answers)
	}
}

// TestLiveLookSpent: a live look that has too few samples by the end of
// its time is spent, and the looks, all spent, end saying so; the model
// stays narrow.
func TestLiveLookSpent(t *testing.T) {
	ms := time.Millisecond
	s, hs, m := liveModel(t, true, []time.Duration{ms, ms}, 100*ms, func(time.Duration, time.Duration) bool {
		t.Error("a live look without its samples applied the rule")
		return true
	})
	m.later.samples = math.MaxInt
	s.Start()
	client(t, hs, nil)
	var most [2]int
	waitUntil(t, "the looks' end", func() bool {
		if n := sampled(m); n[0]+n[1] > most[0]+most[1] {
			most = n
		}
		return strings.Contains(metadataOf(t, hs).ScheduleReason, "never faster")
	})
	md := metadataOf(t, hs)
	if most[0] == 0 || most[1] == 0 {
		t.Errorf("the live looks timed %v lone requests (narrow, wide): none of a form", most)
	}
	if m.form.Load().wide != nil || m.live.Load() != nil ||
		!strings.Contains(md.ScheduleReason, "timed again 0 times with the model idle, never faster across all cores (2 more spent: ended by a request, or too few lone requests in time)") {
		t.Errorf("after spent live looks: wide %v, live look %v, reason %q", m.form.Load().wide != nil, m.live.Load() != nil, md.ScheduleReason)
	}
}

// TestLiveLookStops: unloading the model ends a live look in the middle,
// and the server's Stop returns.
func TestLiveLookStops(t *testing.T) {
	s, hs, m := liveModel(t, true, []time.Duration{time.Millisecond}, time.Hour, choice.WideFaster)
	m.later.samples = math.MaxInt
	s.Start()
	stop := client(t, hs, nil)
	waitUntil(t, "live samples", func() bool { n := sampled(m); return n[0] > 0 && n[1] > 0 })
	if err := s.unload("lm", ""); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the live look's end", func() bool { return m.live.Load() == nil })
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v (the looks did not end)", err)
	}
	if len(m.cores) != 0 {
		t.Errorf("%d core slots held after the stop", len(m.cores))
	}
}

// TestLiveLookPanic: a panic in a live look's verdict is contained: the
// looks end, the core slots come back, and the model serves on, narrow.
func TestLiveLookPanic(t *testing.T) {
	s, hs, m := liveModel(t, true, []time.Duration{time.Millisecond, time.Millisecond}, time.Hour, func(time.Duration, time.Duration) bool {
		panic("a fault in the verdict")
	})
	s.Start()
	stop := client(t, hs, nil)
	waitUntil(t, "the panic counted", func() bool { return testutil.ToFloat64(s.metrics.panics.WithLabelValues("lm")) == 1 })
	waitUntil(t, "the live look's end", func() bool { return m.live.Load() == nil })
	stop()
	code, body, _ := post(t, hs.URL+"/v2/models/lm/infer", liveBody)
	if code != http.StatusOK {
		t.Fatalf("after a live look's panic: %d %s", code, body)
	}
	time.Sleep(20 * time.Millisecond)
	if m.form.Load().wide != nil || m.live.Load() != nil || len(m.cores) != 0 || testutil.ToFloat64(s.metrics.panics.WithLabelValues("lm")) != 1 {
		t.Errorf("after a live look's panic: wide %v, live look %v, %d core slots held, %v panics", m.form.Load().wide != nil,
			m.live.Load() != nil, len(m.cores), testutil.ToFloat64(s.metrics.panics.WithLabelValues("lm")))
	}
}

// TestPreferLaterIdleOnly: the looks of a model serving A+ (whose answers
// may differ from P's in the last bits) never time live requests: under a
// client that never leaves it idle no look starts, no request runs P,
// and the load's reason says the looks wait for an idle model.
func TestPreferLaterIdleOnly(t *testing.T) {
	ms := time.Millisecond
	var looked atomic.Int32
	s, hs, m, _ := preferModel(t, []time.Duration{ms, ms}, func(func() bool) (bool, string, error) {
		looked.Add(1)
		return false, "keeps it", nil
	})
	m.later.quiet = 200 * ms
	aplus := m.form.Load().prog
	if m.later.live != nil || strings.Contains(laterReason(m.later), "lone requests") {
		t.Errorf("the A+ model's looks may time live requests: %q", laterReason(m.later))
	}
	s.Start()
	stop := client(t, hs, nil)
	for deadline := time.Now().Add(300 * ms); time.Now().Before(deadline); time.Sleep(ms) {
		if m.live.Load() != nil {
			t.Fatal("a live look on a model serving A+")
		}
	}
	stop()
	if n, wide := looked.Load(), testutil.ToFloat64(s.metrics.wide.WithLabelValues("lm")); n != 0 || wide != 0 || m.form.Load().prog != aplus {
		t.Errorf("under a never-idle client: %d looks, %v wide plans, serving %v", n, wide, choice.Of(m.form.Load().prog))
	}
}
