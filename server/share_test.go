package server

import (
	"fmt"
	"math"
	"regexp"
	"runtime"
	"testing"
	"testing/fstest"
	"time"

	"rnnserve/internal/hugepage"
	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
)

// TestOneCoreSharesWide: a model served by P on one core per request with
// a wide form across both cores runs its one-core plans over the wide
// form's weight buffers when its weights are larger than the last-level
// cache (both give the same answers bit for bit), and over a copy of its
// own when they fit.
func TestOneCoreSharesWide(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		old := runtime.GOMAXPROCS(2)
		defer runtime.GOMAXPROCS(old)
	}
	repo := fstest.MapFS{
		"lm/model.yaml":  {Data: []byte(lmSpec(64, 3))},
		"lm/config.yaml": {Data: []byte("schedule: P\nbatching: false\n")},
	}
	entries, err := LoadRepository(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		llc   int64
		share bool
	}{{16 << 10, true}, {1 << 30, false}} {
		o := testOptions()
		o.CacheBytes = c.llc
		o.Batching.Workers = runtime.GOMAXPROCS(0)
		s, err := New(entries, o, testDeps(t, o))
		if err != nil {
			t.Fatal(err)
		}
		m := seqOf(t, s, "lm")
		if m.form.Load().wide == nil || m.form.Load().prog.Workers() != 1 {
			t.Fatalf("LLC %d: lm runs %v with wide form %v (%s)", c.llc, choice.Of(m.form.Load().prog), m.form.Load().wide != nil, reasonOf(m))
		}
		shared := 0
		ws, ww := m.form.Load().prog.Weights(), m.form.Load().wide.Weights()
		for i := range min(len(ws), len(ww)) {
			if ws[i] == ww[i] {
				shared++
			}
		}
		var private int // weights not the network's own slices: P's copies
		for _, b := range ww {
			if b.Role == schedule.RoleWHH || b.Role == schedule.RoleWIH {
				private++
			}
		}
		if c.share && (len(ws) != len(ww) || shared != len(ww)) {
			t.Errorf("LLC %d: %d of the one-core program's %d weight buffers are the wide form's %d, want all", c.llc, shared, len(ws), len(ww))
		}
		if !c.share && shared > len(ww)-private {
			t.Errorf("LLC %d: the one-core program shares %d weight buffers with the wide form, want only the network's own", c.llc, shared)
		}
		if !c.share {
			continue
		}
		in := choice.ReferenceInput(m.net, 9)
		run := func(p *schedule.Program) []float32 {
			pl, err := p.Plan(in, schedule.PlanOptions{Head: true})
			if err != nil {
				t.Fatal(err)
			}
			res, err := pl.Run()
			if err != nil {
				t.Fatal(err)
			}
			return append(append([]float32(nil), res.Output...), res.Head...)
		}
		one, wide := run(m.form.Load().prog), run(m.form.Load().wide)
		for i := range one {
			if math.Float32bits(one[i]) != math.Float32bits(wide[i]) {
				t.Fatalf("value %d: %v on one core, %v across both", i, one[i], wide[i])
			}
		}
	}
}

// TestLanesShareWeights: a model's batcher lanes read one set of weight
// buffers (the token table, here), the first lane's, also after a lane's
// batch is remade.
func TestLanesShareWeights(t *testing.T) {
	repo := fstest.MapFS{"lm/model.yaml": {Data: []byte(lmSpec(16, 3))}}
	entries, err := LoadRepository(repo)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Batching.Workers = 3
	s, err := New(entries, o, testDeps(t, o))
	if err != nil {
		t.Fatal(err)
	}
	m := seqOf(t, s, "lm")
	if len(m.batch.lanes) != 3 {
		t.Fatalf("%d lanes, want 3", len(m.batch.lanes))
	}
	set := func(b batch[*seqWork]) map[*schedule.Buffer]bool {
		w := map[*schedule.Buffer]bool{}
		for _, buf := range b.(*seqBatch).st.Weights() {
			w[buf] = true
		}
		return w
	}
	want := set(m.batch.lanes[0].batch)
	table := false
	for b := range want {
		table = table || b.Name == "l0.xtab"
	}
	if !table {
		t.Fatal("the first lane has no token table")
	}
	remade, err := m.batch.newBatch()
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []batch[*seqWork]{m.batch.lanes[1].batch, m.batch.lanes[2].batch, remade} {
		got := set(b)
		if len(got) != len(want) {
			t.Errorf("batch %d reads %d weight buffers, the first lane %d", i+1, len(got), len(want))
		}
		for buf := range got {
			if !want[buf] {
				t.Errorf("batch %d reads a %s of its own", i+1, buf.Name)
			}
		}
	}
}

// TestLoadMapsOnce: loading a model whose P weights are larger than the
// last-level cache maps each of its programs' weights once, counted by
// hugepage.MappedTotal across New (the network's were mapped before):
// P on one core is built as the Serial form of P across both cores, never
// as a copy of its own made and dropped. With schedule P set, the load
// maps P across both cores and the batcher lanes' token table and
// nothing else; with the schedule chosen and timed on the clock, the
// same: the one-core P the clock times is the Serial form, the one
// served, A+ reads the network in place, and A, whose concatenated
// weights beside P's would pass the largest copy one schedule holds and
// the LLC, is left to the traffic model and never built.
func TestLoadMapsOnce(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		old := runtime.GOMAXPROCS(2)
		defer runtime.GOMAXPROCS(old)
	}
	cores := choice.CoresPerRequest(runtime.GOMAXPROCS(0), 1)
	for _, timed := range []bool{false, true} {
		t.Run(fmt.Sprintf("timed=%v", timed), func(t *testing.T) {
			config := "schedule: P\n"
			if timed {
				config = "schedule: auto\n"
			}
			// A 4 MiB W_hh: each of two cores' slices fills a huge page.
			repo := fstest.MapFS{"lm/model.yaml": {Data: []byte(lmSpec(512, 5))}, "lm/config.yaml": {Data: []byte(config)}}
			entries, err := LoadRepository(repo)
			if err != nil {
				t.Fatal(err)
			}
			net := entries[0].Model.Net
			o := testOptions()
			o.CacheBytes, o.TrafficSteps = 1<<20, 4
			o.Batching.Workers = runtime.GOMAXPROCS(0)
			if timed {
				o.ScheduleTiming = 20 * time.Millisecond
			}
			deps := testDeps(t, o)
			// What each program the load keeps or times maps, built on
			// its own.
			maps := func(build func() (any, error)) int64 {
				t.Helper()
				before := hugepage.MappedTotal()
				v, err := build()
				if err != nil {
					t.Fatal(err)
				}
				runtime.KeepAlive(v)
				return hugepage.MappedTotal() - before
			}
			wide := maps(func() (any, error) {
				return choice.Candidate{Sched: schedule.Partitioned, Workers: cores}.Program(net, deps.Pools)
			})
			if wide == 0 {
				t.Skip("no huge pages here")
			}
			want := wide + maps(func() (any, error) { return schedule.NewStepperPrecision(net, o.Batching.MaxRows, schedule.F32) })
			before := hugepage.MappedTotal()
			s, err := New(entries, o, deps)
			if err != nil {
				t.Fatal(err)
			}
			if got := hugepage.MappedTotal() - before; got != want {
				t.Errorf("the load mapped %d bytes, want %d (P on %d cores %d)", got, want, cores, wide)
			}
			m := seqOf(t, s, "lm")
			if left := regexp.MustCompile(`; A \([0-9.]+ MiB\) left to the traffic model`); timed && !left.MatchString(reasonOf(m)) {
				t.Errorf("the clock did not leave A to the traffic model: %s", reasonOf(m))
			}
			if m.form.Load().wide != nil {
				ws, ww := m.form.Load().prog.Weights(), m.form.Load().wide.Weights()
				if len(ws) != len(ww) {
					t.Fatalf("%v on one core has %d weight buffers, the wide form %d", choice.Of(m.form.Load().prog), len(ws), len(ww))
				}
				for i := range ws {
					if ws[i] != ww[i] {
						t.Errorf("one core's %s is not the wide form's", ws[i].Name)
					}
				}
			}
			t.Logf("%s", reasonOf(m))
		})
	}
}
