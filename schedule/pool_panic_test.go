package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rnnserve/internal/invariants"
	"rnnserve/models"
	"rnnserve/rnn/tree"
)

// phasesPanic runs p.Phases and returns the *PanicError it panicked with,
// or nil when it returned normally.
func phasesPanic(t *testing.T, p *Pool, n int, f func(ph, w int)) (pe *PanicError) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			var ok bool
			if pe, ok = v.(*PanicError); !ok {
				t.Fatalf("Phases panicked with %T %v, want *PanicError", v, v)
			}
		}
	}()
	p.Phases(n, f)
	return nil
}

// TestPoolPanic injects a panicking part on each worker in turn (a helper,
// the caller's own worker 0, and a runtime error) and checks that Phases
// hands the panic to its caller with the value and the panicking stack,
// that no phase after the panic runs, and that the pool then runs jobs as
// before.
func TestPoolPanic(t *testing.T) {
	p := testPool(t, 3)
	const phases = 6
	for _, c := range []struct {
		name    string
		ph, w   int
		explode func()
	}{
		{"helper", 2, 1, func() { panic("kernel blew up") }},
		{"caller", 3, 0, func() { panic(fmt.Errorf("kernel error")) }},
		{"runtime error", 1, 2, func() {
			var s []float32
			_ = s[len(s)+5] // index out of range
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var after atomic.Int64 // parts run in a phase after the panicking one
			var ran atomic.Int64
			pe := phasesPanic(t, p, phases, func(ph, w int) {
				ran.Add(1)
				if ph > c.ph {
					after.Add(1)
				}
				if ph == c.ph && w == c.w {
					c.explode()
				}
			})
			if pe == nil {
				t.Fatal("Phases returned normally after a part panicked")
			}
			if pe.Phase != c.ph || pe.Part != c.w {
				t.Errorf("panic reported in phase %d part %d, want %d %d", pe.Phase, pe.Part, c.ph, c.w)
			}
			if !strings.Contains(string(pe.Stack), "TestPoolPanic") {
				t.Errorf("stack does not show the panicking part:\n%s", pe.Stack)
			}
			if after.Load() != 0 {
				t.Errorf("%d parts ran in phases after the panic", after.Load())
			}
			if got, most := ran.Load(), int64((c.ph+1)*3); got < int64(c.ph*3+1) || got > most {
				t.Errorf("%d parts ran, want the %d before the panicking phase and at most all of it (%d)", got, c.ph*3, most)
			}
			if c.name == "runtime error" {
				var re runtime.Error
				if !errors.As(pe, &re) {
					t.Errorf("a runtime error is not reachable with errors.As: %v", pe)
				}
			}
			// The pool runs the next job in full.
			var n atomic.Int64
			if pe := phasesPanic(t, p, phases, func(int, int) { n.Add(1) }); pe != nil || n.Load() != phases*3 {
				t.Errorf("after the panic: %d parts ran, panic %v; want %d", n.Load(), pe, phases*3)
			}
		})
	}
	// Each (every part on its own thread) hands its panic over too.
	var pe *PanicError
	func() {
		defer func() { pe, _ = recover().(*PanicError) }()
		p.Each(func(w int) {
			if w == 2 {
				panic("first touch failed")
			}
		})
	}()
	if pe == nil || pe.Value != "first touch failed" {
		t.Errorf("Each: %v, want the part's panic", pe)
	}
}

// TestPoolPanicAbsentWorkers: with the helpers absent the caller runs
// every part itself, the panicking one included, and still gets the panic
// as a *PanicError after the job.
func TestPoolPanicAbsentWorkers(t *testing.T) {
	p := &Pool{n: 2}
	p.wake.init()
	var ran atomic.Int64
	pe := phasesPanic(t, p, 4, func(ph, w int) {
		ran.Add(1)
		if ph == 1 && w == 1 {
			panic("stolen part panics")
		}
	})
	if pe == nil || pe.Value != "stolen part panics" || ran.Load() != 4 {
		t.Errorf("panic %v after %d parts, want the stolen part's panic after 4", pe, ran.Load())
	}
}

// panicOp is a step whose kernel panics: the injected fault.
type panicOp struct{ op }

func (panicOp) run() { panic("tree kernel blew up") }

// TestTreePlanPanic injects a panicking kernel into a tree plan run by the
// recursive executor on a pool of two workers: Run panics in the caller
// with a *PanicError, as Plan.Run does, instead of taking the process
// down, and a new plan of the same program runs and matches a clean run.
func TestTreePlanPanic(t *testing.T) {
	if invariants.Enabled {
		t.Skip("the region checker runs a tree plan's steps serially, on the calling goroutine")
	}
	pool := twoWorkers(t)
	if pool == nil {
		t.Skip("GOMAXPROCS < 2: no pool of two workers")
	}
	m, err := models.LoadTree(filepath.Join("testdata/trees/golden/binary_treelstm", "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var trees []*tree.Tree
	for _, s := range []string{"(((1) (2)) ((3) ((4) (5))))", "(((1) (1)) ((2) (2)))", "((1) ((2) ((3) (4))))", "(((5) (4)) (3))"} {
		tr, err := tree.ParseBracketed(s, m.ParseOptions())
		if err != nil {
			t.Fatal(err)
		}
		trees = append(trees, tr)
	}
	prog, err := NewTreeProgram(m.Net)
	if err != nil {
		t.Fatal(err)
	}
	opt := TreeOptions{Executor: Recursive, Workers: 2, Pool: pool}
	clean, err := prog.Plan(trees, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := clean.Run(); err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), clean.Probs(0, trees[0].Root())...)
	faulty, err := prog.Plan(trees, opt)
	if err != nil {
		t.Fatal(err)
	}
	k := len(faulty.Plan.Steps) / 3
	faulty.Plan.Steps[k].op = panicOp{faulty.Plan.Steps[k].op}
	var pe *PanicError
	err = func() error {
		defer func() { pe, _ = recover().(*PanicError) }()
		return faulty.Run()
	}()
	if err != nil || pe == nil || pe.Value != "tree kernel blew up" || len(pe.Stack) == 0 {
		t.Fatalf("Run with a panicking kernel: error %v, panic %v; want its *PanicError", err, pe)
	}
	again, err := prog.Plan(trees, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Run(); err != nil {
		t.Fatal(err)
	}
	if got := again.Probs(0, trees[0].Root()); !slices.Equal(got, want) {
		t.Errorf("after the panic: probs %v, want %v", got, want)
	}
}

// TestPoolPhaseOrder runs jobs whose parts take random times on a pool
// that waits only briefly before taking over late parts, so parts are
// often run by a worker other than their own, and checks the barrier: no
// part of a phase starts before every part of the phase before it has
// finished, and every part runs once.
func TestPoolPhaseOrder(t *testing.T) {
	const n, phases = 3, 40
	if runtime.GOMAXPROCS(0) < n {
		old := runtime.GOMAXPROCS(n)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
	p, err := NewPool(PoolOptions{Workers: n, NoPin: true, Spin: 2 * time.Microsecond, IdleSpin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	for rep := 0; rep < 200; rep++ {
		var finished [phases]atomic.Int32
		var bad atomic.Int32
		work := make([]int, phases*n) // busy-wait iterations of each part
		for i := range work {
			if rng.IntN(4) == 0 {
				work[i] = rng.IntN(20000)
			}
		}
		p.Phases(phases, func(ph, w int) {
			if ph > 0 && finished[ph-1].Load() != n {
				bad.Add(1)
			}
			x := 0
			for i := 0; i < work[ph*n+w]; i++ {
				x += i
			}
			sink.Add(int64(x))
			finished[ph].Add(1)
		})
		for ph := range finished {
			if got := finished[ph].Load(); got != n {
				t.Fatalf("job %d phase %d: %d parts ran, want %d", rep, ph, got, n)
			}
		}
		if bad.Load() != 0 {
			t.Fatalf("job %d: %d parts started before the phase before them had finished", rep, bad.Load())
		}
	}
	t.Logf("%d parts taken over", p.Stolen())
}

var sink atomic.Int64

// TestPoolEachOnce alternates Each with Phases: every worker must run its
// part of each Each exactly once, even when a helper wakes for a later
// job and finds an earlier one still current.
func TestPoolEachOnce(t *testing.T) {
	p := testPool(t, 2)
	var calls [2]atomic.Int64
	const jobs = 3000
	for range jobs {
		p.Each(func(w int) { calls[w].Add(1) })
		p.Phases(1, func(int, int) {})
	}
	for w := range calls {
		if got := calls[w].Load(); got != jobs {
			t.Errorf("worker %d ran its part of Each %d times in %d jobs", w, got, jobs)
		}
	}
}
