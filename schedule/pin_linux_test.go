//go:build linux

package schedule

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPoolRunRestoresCaller checks that the goroutine that calls Run, which
// is worker 0 and pinned to the pool's first CPU for the job, gets its
// thread's CPU set back afterwards: a server handler that runs a
// partitioned plan must not leave its thread (and the goroutines the
// runtime later schedules on it) confined to one CPU.
func TestPoolRunRestoresCaller(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to tell a pinned thread from a free one")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		old := runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
	p, err := NewPool(PoolOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Lock this goroutine to its thread so that the affinity read before
	// and after Run is that of the thread Run used.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, during, after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Skipf("no affinity here: %v", err)
	}
	if before.Count() != runtime.NumCPU() {
		t.Fatalf("the test's thread may run on %d CPUs, the process on %d: an earlier pool left it pinned", before.Count(), runtime.NumCPU())
	}
	// callerSet runs jobs of n phases until worker 0's part of the first
	// phase runs on this, the caller's, thread, and returns the CPU set
	// it ran with: a worker may run a part that is late (Pool.await), so
	// on a loaded machine the helper sometimes runs worker 0's.
	caller := unix.Gettid()
	callerSet := func(n int) unix.CPUSet {
		for range 50 {
			var set unix.CPUSet
			var tid int
			var err error
			phases := make([]func(w int), n)
			for i := range phases {
				phases[i] = func(int) {}
			}
			phases[0] = func(w int) {
				if w == 0 {
					tid, err = unix.Gettid(), unix.SchedGetaffinity(0, &set)
				}
			}
			p.Run(phases)
			if err != nil {
				t.Fatal(err)
			}
			if tid == caller {
				return set
			}
		}
		t.Skip("a helper ran worker 0's part in every one of 50 jobs")
		return unix.CPUSet{}
	}
	// A short job leaves the caller where it is (pinCallerPhases).
	if short := callerSet(1); short != before {
		t.Errorf("worker 0 ran on %d CPUs during a one-phase job, want the caller's %d", short.Count(), before.Count())
	}
	// A long one pins it to worker 0's CPU for the job.
	during = callerSet(pinCallerPhases + 1)
	if err := p.PinError(); err != nil {
		t.Skipf("pinning unavailable here: %v", err)
	}
	if during.Count() != 1 || !during.IsSet(p.cpus[0]) {
		t.Errorf("worker 0 ran on %d CPUs during the job, want pinned to CPU %d", during.Count(), p.cpus[0])
	}
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the caller's thread kept a CPU set of %d CPUs after Run, had %d", after.Count(), before.Count())
	}
}

// TestPoolCloseEndsPinnedThreads closes a pinned pool and then occupies
// many threads at once: none may be one a helper worker left pinned.
func TestPoolCloseEndsPinnedThreads(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to tell a pinned thread from a free one")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		old := runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
	for range 3 {
		p, err := NewPool(PoolOptions{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		p.Run([]func(int){func(int) {}})
		if err := p.PinError(); err != nil {
			p.Close()
			t.Skipf("pinning unavailable here: %v", err)
		}
		p.Close()
	}
	const n = 16
	release := make(chan struct{})
	counts := make(chan int, n)
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			if err := unix.SchedGetaffinity(0, &set); err != nil {
				counts <- -1
			} else {
				counts <- set.Count()
			}
			<-release
		}()
	}
	for range n {
		if c := <-counts; c != runtime.NumCPU() {
			t.Errorf("a thread runs on %d CPUs, want the process's %d", c, runtime.NumCPU())
		}
	}
	close(release)
}
