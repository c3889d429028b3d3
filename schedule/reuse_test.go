package schedule

import (
	"fmt"
	"math/rand/v2"
	"rnnserve/rnn"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
)

// TestAcquireReuses runs two inputs of one shape through Acquire and
// Release: the second gets the first's plan back, with its own data bound
// in, and its outputs equal a fresh plan's bit for bit; an input of
// another shape gets another plan.
func TestAcquireReuses(t *testing.T) {
	var pool *Pool
	if runtime.GOMAXPROCS(0) >= 2 {
		pool = testPool(t, 2)
	}
	r := rand.New(rand.NewPCG(8, 9))
	for i, cfg := range sequenceConfigs() {
		net := randomNet(t, cfg, uint64(i)+3)
		for _, s := range sequenceSchedules(pool) {
			if s.prog == nil {
				continue
			}
			t.Run(fmt.Sprintf("%d/%s", i, s.name), func(t *testing.T) {
				prog, err := s.prog(net)
				if err != nil {
					t.Fatal(err)
				}
				T, B := 5, 3
				inputs := make([]Input, 2)
				for k := range inputs {
					inputs[k] = randomInput(net, T, B, true, r)
					inputs[k].Lengths = []int{5, 3, 2}
				}
				first, err := prog.Acquire(inputs[0], PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := first.Run(); err != nil {
					t.Fatal(err)
				}
				// The plans sit in a sync.Pool: a plan released on one P
				// is that P's private entry, which a Get on another P does
				// not see, and a collection may drop it. So, between the
				// release and the acquire, the collector waits and there
				// is one P (shrinking GOMAXPROCS keeps the pool's entries).
				// The race detector's pool drops entries at random.
				defer debug.SetGCPercent(debug.SetGCPercent(-1))
				procs := runtime.GOMAXPROCS(1)
				first.Release()
				again, err := prog.Acquire(inputs[1], PlanOptions{Head: true})
				runtime.GOMAXPROCS(procs)
				if err != nil {
					t.Fatal(err)
				}
				if again != first && !raceEnabled {
					t.Fatal("the released plan was not reused for an input of the same shape")
				}
				got, err := again.Run()
				if err != nil {
					t.Fatal(err)
				}
				fresh, err := prog.Plan(inputs[1], PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				want, err := fresh.Run()
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range [][2][]float32{{got.Output, want.Output}, {got.HN, want.HN}, {got.CN, want.CN}, {got.Head, want.Head}} {
					if !slices.Equal(c[0], c[1]) {
						t.Fatal("a reused plan's outputs differ from a fresh plan's")
					}
				}
				again.Release()
				other := inputs[1]
				other.Lengths = []int{5, 5, 1}
				q, err := prog.Acquire(other, PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				if q == first {
					t.Error("an input of other lengths got the plan of the first")
				}
				q.Release()
			})
		}
	}
}

// TestPlanCacheBounded acquires and releases plans for many more lengths
// than MaxPlanShapes: the program keeps at most that many shapes, counts
// the ones it drops, and still reuses the plan of a shape it keeps.
func TestPlanCacheBounded(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 3, Hidden: 4, Layers: 1}, 1)
	prog, err := NewProgram(net, APlus)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const T, B, shapes = 40, 3, 3 * MaxPlanShapes
	seen := map[string]bool{}
	for len(seen) < shapes {
		in := randomInput(net, T, B, false, r)
		in.Lengths = randomLengths(T, B, r)
		seen[fmt.Sprint(in.Lengths)] = true
		p, err := prog.Acquire(in, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
		if c := prog.PlanCache(); c.Shapes > MaxPlanShapes {
			t.Fatalf("%d shapes kept, limit %d", c.Shapes, MaxPlanShapes)
		}
	}
	c := prog.PlanCache()
	if c.Shapes != MaxPlanShapes || c.Evicted < int64(len(seen)-MaxPlanShapes) {
		t.Errorf("after %d shapes: %+v, want %d kept and at least %d dropped", len(seen), c, MaxPlanShapes, len(seen)-MaxPlanShapes)
	}
	// The shape used last is kept: acquiring it again adds none and drops
	// none.
	in := randomInput(net, T, B, false, r)
	in.Lengths = []int{T, 2, 1}
	for range 2 {
		p, err := prog.Acquire(in, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	if d := prog.PlanCache(); d.Shapes != MaxPlanShapes || d.Evicted > c.Evicted+1 {
		t.Errorf("one shape twice: %+v after %+v, want at most one more dropped", d, c)
	}
}
