package schedule

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// backToBack runs two-worker jobs one after another for d, each part
// spinning for about 20 µs. With first set, the caller yields its P after
// each job (as a server's handler does after a plan) and so keeps taking
// it back, and the first job's part 1 (its helper's, unless the caller
// took it over) calls first.
func backToBack(p *Pool, d time.Duration, first func()) {
	yield := first != nil
	for end := time.Now().Add(d); time.Now().Before(end); {
		p.Phases(1, func(_, w int) {
			if w == 1 && first != nil {
				first()
				first = nil
			}
			for t0 := time.Now(); time.Since(t0) < 20*time.Microsecond; {
			}
		})
		if yield {
			runtime.Gosched()
		}
	}
}

// TestHelperYieldsItsP: a helper that has held its P through back-to-back
// jobs for holdFor yields it while goroutines wait to run, and not while
// none do. The waiting goroutines here are started by the helper, so
// they queue on its P; without the yield they would run only at the
// runtime's 10 ms preemption (the other P always finds its caller to run
// again before it would look at another P's queue).
func TestHelperYieldsItsP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	// An idle spin longer than any gap between two jobs: the helper never
	// parks, as under load.
	p, err := NewPool(PoolOptions{Workers: 2, IdleSpin: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// Nothing else to run: at most one yield (the runtime's own goroutines,
	// a collector's workers, may wait at a job's end), where one every
	// holdFor would be five.
	backToBack(p, 5*time.Millisecond, nil)
	if n := p.Yields(); n > 1 {
		t.Errorf("nothing else to run: the helper yielded %d times, want at most 1", n)
	}
	// Three goroutines always ready to run, started by the helper (so they
	// queue on its P): without the yield they would wait there for the
	// runtime's preemption, 10 ms or more. How long they do wait is the
	// OS's business too (more threads than cores), so the test asks for
	// the yields, not for a bound on the wait.
	var stop atomic.Bool
	var wg sync.WaitGroup
	spawn := func() {
		for range 3 {
			wg.Go(func() {
				for !stop.Load() {
					runtime.Gosched()
				}
			})
		}
	}
	// On a loaded machine the helper's thread may get no core for a
	// whole round, and the caller then runs every part itself: up to ten
	// rounds of 8 ms, the goroutines waiting throughout.
	before := p.Yields()
	backToBack(p, 8*time.Millisecond, spawn)
	for range 9 {
		if p.Yields() > before {
			break
		}
		backToBack(p, 8*time.Millisecond, nil)
	}
	stop.Store(true)
	wg.Wait()
	if n := p.Yields() - before; n == 0 {
		t.Errorf("goroutines waiting through 80 ms of back-to-back jobs: the helper never yielded its P")
	}
}

// TestRunnableAllocatesNothing: Runnable runs after every plan a server
// handler runs, so it reuses its sample rather than allocating one.
func TestRunnableAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what it is given")
	}
	if n := testing.AllocsPerRun(100, func() { _ = Runnable() }); n != 0 {
		t.Errorf("Runnable allocates %v times a call", n)
	}
}
