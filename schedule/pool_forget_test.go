package schedule

import (
	"runtime"
	"testing"
	"time"
)

// TestPoolForgetsJob: once a job is done the pool holds nothing of it, so
// a plan it ran (with its activation buffers) is garbage as soon as its
// caller lets it go, not only when the next job replaces it.
func TestPoolForgetsJob(t *testing.T) {
	p, err := NewPool(PoolOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	freed := make(chan struct{})
	func() {
		big := &struct{ buf []float32 }{buf: make([]float32, 1<<20)}
		runtime.SetFinalizer(big, func(any) { close(freed) })
		p.Phases(3, func(ph, w int) { big.buf[w] += float32(ph) })
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the job's function is still reachable from the pool after it finished")
		}
	}
}
