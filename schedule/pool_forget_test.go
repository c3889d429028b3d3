package schedule

import (
	"runtime"
	"testing"
	"time"

	"rnnserve/rnn"
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

// TestStepperForgetsSequences: once its sequences are removed, a Stepper
// keeps nothing of them (their inputs, projections and outputs), neither
// in its slot list nor in the operands of the last step it ran: a lane
// that goes idle after a large batch holds no memory of it.
func TestStepperForgetsSequences(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 4, Hidden: 8, Layers: 2}, 1)
	st, err := NewStepper(net, 3)
	if err != nil {
		t.Fatal(err)
	}
	freed := make(chan struct{}, 3)
	func() {
		var qs []*Sequence
		for range 3 {
			q := &Sequence{Features: make([]float32, 5*4), Head: HeadAll, Outputs: true}
			runtime.SetFinalizer(q, func(*Sequence) { freed <- struct{}{} })
			if err := st.Add(q); err != nil {
				t.Fatal(err)
			}
			qs = append(qs, q)
		}
		for st.Active() > 0 {
			for _, q := range st.Step() {
				st.Remove(q)
			}
		}
	}()
	for n, deadline := 0, time.Now().Add(5*time.Second); n < 3; {
		runtime.GC()
		select {
		case <-freed:
			n++
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("%d of 3 removed sequences are still reachable from the stepper", 3-n)
			}
		}
	}
	runtime.KeepAlive(st)
}
