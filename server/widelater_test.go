package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// laterModel is the test server's lm, not started, as a load that timed
// its wide form no faster leaves it: lone requests on their own core, the
// wide program kept for the later looks, which time with look.
func laterModel(t *testing.T, looks []time.Duration, look func(quit func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel, *schedule.Program) {
	t.Helper()
	s, hs := newTestServer(t, nil, false)
	// On a host with hardware counters the traffic probe would hold a
	// core slot for an inference at Start, where a look finds it busy.
	s.measured = nil
	m := seqOf(t, s, "lm")
	f := m.form.Load()
	if f.wide == nil {
		t.Skipf("lm runs %v: no wide form", choice.Of(f.prog))
	}
	m.form.Store(&seqForm{prog: f.prog})
	m.redescribe(func(r *api.RNNMetadata) { r.WideCores = 0 })
	m.later = newWideLater(m.net, f.prog, f.wide, 10, time.Millisecond)
	m.later.looks, m.later.quiet, m.later.look = looks, time.Millisecond, look
	return s, hs, m, f.wide
}

// laterKinds make a model with later looks of each kind: one serving P on
// one core whose wide form the load timed no faster (laterModel), one
// serving the clock's A+ whose load found P not to pay (preferModel).
var laterKinds = []struct {
	name string
	make func(*testing.T, []time.Duration, func(func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel)
}{
	{"P", func(t *testing.T, looks []time.Duration, look func(func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel) {
		s, hs, m, _ := laterModel(t, looks, look)
		return s, hs, m
	}},
	{"A+", func(t *testing.T, looks []time.Duration, look func(func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel) {
		s, hs, m, _ := preferModel(t, looks, look)
		return s, hs, m
	}},
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func metadataOf(t *testing.T, hs *httptest.Server) api.RNNMetadata {
	t.Helper()
	code, body := get(t, hs.URL+"/v2/models/lm")
	var md api.ModelMetadata
	if code != http.StatusOK || json.Unmarshal(body, &md) != nil {
		t.Fatalf("metadata: %d %s", code, body)
	}
	return md.RNN
}

// TestWideLater: a model whose load kept lone requests on one core lets
// them run across every core once a later look finds that faster, says so
// in its metadata (REST and the configuration's parameters), and looks no
// more; one that never finds it faster keeps them where they are and says
// how many looks it took.
func TestWideLater(t *testing.T) {
	ms := time.Millisecond
	var looked atomic.Int32
	s, hs, m, wide := laterModel(t, []time.Duration{ms, ms, ms, ms}, func(func() bool) (bool, string, error) {
		if looked.Add(1) < 3 {
			return false, "not faster", nil
		}
		return true, "faster: on 1 core(s) 2ms, on 2 1ms", nil
	})
	if md := metadataOf(t, hs); md.WideCores != 0 {
		t.Fatalf("before the looks wide_cores is %d", md.WideCores)
	}
	s.Start()
	waitUntil(t, "the wide form", func() bool { return m.form.Load().wide != nil })
	if m.form.Load().wide != wide {
		t.Fatal("lone requests got another program than the wide form built at load")
	}
	waitUntil(t, "the metadata", func() bool { return metadataOf(t, hs).WideCores == wide.Workers() })
	md := metadataOf(t, hs)
	if !strings.Contains(md.ScheduleReason, "with the model idle (look 3): faster: on 1 core(s) 2ms, on 2 1ms") {
		t.Errorf("schedule_reason %q does not give the look that found the wide form faster", md.ScheduleReason)
	}
	_, config := m.description()
	if p := config.Parameters["rnn"].StringValue; !strings.Contains(p, "(look 3)") {
		t.Errorf("the configuration's rnn parameter was not updated: %s", p)
	}
	slots := newCoreSlots(cap(m.cores))
	slots.tryTake()
	_, release := m.widen(slots)
	if release == nil {
		t.Fatal("a lone request does not go wide after the switch")
	}
	release()
	time.Sleep(20 * ms)
	if n := looked.Load(); n != 3 {
		t.Errorf("looked %d times, want 3 (none after the switch)", n)
	}

	looked.Store(0)
	s, hs, m, _ = laterModel(t, []time.Duration{ms, ms}, func(func() bool) (bool, string, error) {
		looked.Add(1)
		return false, "not faster: on 1 core(s) 1ms, on 2 2ms", nil
	})
	s.Start()
	waitUntil(t, "the looks' end", func() bool { return strings.Contains(metadataOf(t, hs).ScheduleReason, "never faster") })
	md = metadataOf(t, hs)
	if m.form.Load().wide != nil || md.WideCores != 0 || looked.Load() != 2 ||
		!strings.Contains(md.ScheduleReason, "timed again 2 times with the model idle, never faster across all cores; the last: not faster") {
		t.Errorf("after looks that never found it faster: wide %v, wide_cores %d, %d looks, reason %q", m.form.Load().wide != nil, md.WideCores, looked.Load(), md.ScheduleReason)
	}
}

// TestWideLaterIdle: no look times the forms while a request of the
// model is in flight (an idle-only look waits for its end; one that may
// time live requests finds no lone request to time, and is spent); a look
// finds every core slot free or does not time; a request that arrives
// during a look ends it, and is served.
func TestWideLaterIdle(t *testing.T) {
	for _, k := range laterKinds {
		t.Run(k.name, func(t *testing.T) { testWideLaterIdle(t, k.make) })
	}
}

func testWideLaterIdle(t *testing.T, mk func(*testing.T, []time.Duration, func(func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel)) {
	ms := time.Millisecond
	var looked atomic.Int32
	s, _, m := mk(t, []time.Duration{ms, 100 * ms}, func(func() bool) (bool, string, error) {
		looked.Add(1)
		return false, "not faster", nil
	})
	m.stats.inflight.Add(1) // a request being served
	s.Start()
	time.Sleep(50 * ms)
	if n := looked.Load(); n != 0 {
		t.Fatalf("looked %d times with a request in flight", n)
	}
	m.stats.inflight.Add(-1)
	waitUntil(t, "a look once idle", func() bool { return looked.Load() == 1 })

	// A lane or plan holds a core slot: the look does not time.
	m.cores.tryTake()
	_, _, err := m.idleLook(nil, func(func() bool) (bool, string, error) {
		t.Error("timed while a core slot was held")
		return false, "", nil
	})
	m.cores.give()
	if !errors.Is(err, choice.ErrQuit) {
		t.Errorf("a look with a core slot held: %v, want ErrQuit", err)
	}

	// A request arrives during a look: the look ends, then it is served.
	s, hs, m := mk(t, nil, nil)
	s.Start()
	started := make(chan struct{})
	served := make(chan int, 1)
	go func() {
		<-started
		resp, err := http.Post(hs.URL+"/v2/models/lm/infer", "application/json",
			strings.NewReader(`{"inputs":[{"name":"tokens","datatype":"INT64","shape":[1,3],"data":[1,2,3]}]}`))
		if err != nil {
			served <- 0
			return
		}
		resp.Body.Close()
		served <- resp.StatusCode
	}()
	_, _, err = m.idleLook(nil, func(quit func() bool) (bool, string, error) {
		close(started)
		for !quit() {
			time.Sleep(ms)
		}
		return false, "", choice.ErrQuit
	})
	if !errors.Is(err, choice.ErrQuit) {
		t.Errorf("a look a request ended: %v, want ErrQuit", err)
	}
	if code := <-served; code != http.StatusOK {
		t.Errorf("the request that ended a look: status %d", code)
	}
	if len(m.cores) != 0 {
		t.Errorf("%d core slots held after the look", len(m.cores))
	}
}

// TestWideLaterStops: the looks end when the model is unloaded, waiting
// for the next or in the middle of one, and when the server stops; no
// goroutine of them outlives the server's Stop.
func TestWideLaterStops(t *testing.T) {
	for _, k := range laterKinds {
		t.Run(k.name, func(t *testing.T) { testWideLaterStops(t, k.make) })
	}
}

func testWideLaterStops(t *testing.T, mk func(*testing.T, []time.Duration, func(func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel)) {
	for _, during := range []bool{false, true} {
		t.Run(fmt.Sprintf("during=%v", during), func(t *testing.T) {
			looks := []time.Duration{time.Hour}
			if during {
				looks = []time.Duration{time.Millisecond}
			}
			inLook, left := make(chan struct{}), make(chan struct{})
			s, _, _ := mk(t, looks, func(quit func() bool) (bool, string, error) {
				close(inLook)
				defer close(left)
				for !quit() {
					time.Sleep(time.Millisecond)
				}
				return false, "", choice.ErrQuit
			})
			s.Start()
			if during {
				<-inLook
			}
			if err := s.unload("lm", ""); err != nil {
				t.Fatal(err)
			}
			if during {
				select {
				case <-left:
				case <-time.After(10 * time.Second):
					t.Fatal("the look went on after the unload")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Stop(ctx); err != nil {
				t.Fatalf("stop: %v (the looks did not end)", err)
			}
		})
	}
	// Stop without an unload ends them too.
	s, _, _ := mk(t, []time.Duration{time.Hour}, func(func() bool) (bool, string, error) { return false, "", nil })
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v (the looks did not end)", err)
	}
}

// TestJitter: a pause moves by at most a quarter either way, and moves.
func TestJitter(t *testing.T) {
	d := 4 * time.Second
	seen := map[time.Duration]bool{}
	for range 100 {
		j := jitter(d)
		if j < 3*time.Second || j >= 5*time.Second {
			t.Fatalf("jitter(%v) = %v, want within a quarter", d, j)
		}
		seen[j] = true
	}
	if len(seen) < 50 {
		t.Errorf("jitter(%v) gave %d values in 100", d, len(seen))
	}
}

// TestWideLaterPanic: a panic in a look is contained: the looks end, the
// core slots come back and the model serves on.
func TestWideLaterPanic(t *testing.T) {
	for _, k := range laterKinds {
		t.Run(k.name, func(t *testing.T) { testWideLaterPanic(t, k.make) })
	}
}

func testWideLaterPanic(t *testing.T, mk func(*testing.T, []time.Duration, func(func() bool) (bool, string, error)) (*Server, *httptest.Server, *seqModel)) {
	var looked atomic.Int32
	s, hs, m := mk(t, []time.Duration{time.Millisecond, time.Millisecond}, func(func() bool) (bool, string, error) {
		looked.Add(1)
		panic("a kernel fault")
	})
	s.Start()
	waitUntil(t, "the panic counted", func() bool { return testutil.ToFloat64(s.metrics.panics.WithLabelValues("lm")) == 1 })
	code, body, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs":[{"name":"tokens","datatype":"INT64","shape":[1,3],"data":[1,2,3]}]}`)
	if code != http.StatusOK {
		t.Fatalf("after a look's panic: %d %s", code, body)
	}
	time.Sleep(20 * time.Millisecond)
	if n := looked.Load(); n != 1 || m.form.Load().wide != nil || len(m.cores) != 0 {
		t.Errorf("after a look's panic: %d looks, wide %v, %d core slots held", n, m.form.Load().wide != nil, len(m.cores))
	}
}

// TestWideLaterLateTick: a look whose goroutine wakes only when its end
// is due too (a busy host; here a pause of zero, so the end and the
// first tick fall together) still times an idle model rather than
// spending the look.
func TestWideLaterLateTick(t *testing.T) {
	const looks = 12
	var looked atomic.Int32
	s, hs, _, _ := laterModel(t, make([]time.Duration, looks), func(func() bool) (bool, string, error) {
		looked.Add(1)
		return false, "not faster", nil
	})
	s.Start()
	waitUntil(t, "the looks' end", func() bool { return strings.Contains(metadataOf(t, hs).ScheduleReason, "never faster") })
	if n := looked.Load(); n != looks {
		t.Errorf("timed %d of %d looks at an idle model: %q", n, looks, metadataOf(t, hs).ScheduleReason)
	}
}
