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
	// A short job leaves the caller where it is (pinCallerPhases).
	var short unix.CPUSet
	var shortErr error
	p.Run([]func(w int){func(w int) {
		if w == 0 {
			shortErr = unix.SchedGetaffinity(0, &short)
		}
	}})
	if shortErr != nil {
		t.Fatal(shortErr)
	}
	if short != before {
		t.Errorf("worker 0 ran on %d CPUs during a one-phase job, want the caller's %d", short.Count(), before.Count())
	}
	// A long one pins it to worker 0's CPU for the job.
	var duringErr error
	phases := make([]func(w int), pinCallerPhases+1)
	for i := range phases {
		phases[i] = func(int) {}
	}
	phases[0] = func(w int) {
		if w == 0 {
			duringErr = unix.SchedGetaffinity(0, &during)
		}
	}
	p.Run(phases)
	if err := p.PinError(); err != nil {
		t.Skipf("pinning unavailable here: %v", err)
	}
	if duringErr != nil {
		t.Fatal(duringErr)
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
