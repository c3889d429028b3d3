package server

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSoloOnlyWhenIdle: a request runs as a whole plan only while every
// core of the model is free; with a plan (or a lane) holding one of two
// cores it joins a batch, as it does with a job queued.
func TestSoloOnlyWhenIdle(t *testing.T) {
	m := &modelBase{cores: newCoreSlots(2)}
	m.metrics.solo = prometheus.NewCounter(prometheus.CounterOpts{Name: "solo_test"})
	b := &batcher[int]{m: m, queue: make(chan *job[int], 1)}
	ran := 0
	j := &job[int]{solo: func(coreSlots) error { ran++; return nil }}

	if ok, err := b.solo(j); !ok || err != nil || ran != 1 {
		t.Fatalf("idle model: ran %v (%v), %d plans; want a plan", ok, err, ran)
	}
	if len(m.cores) != 0 {
		t.Fatalf("%d core slots held after the plan", len(m.cores))
	}

	m.cores <- struct{}{} // another plan, or a lane, holds a core
	if ok, _ := b.solo(j); ok || ran != 1 {
		t.Errorf("a core busy: ran as a plan, want it batched")
	}
	<-m.cores

	b.queue <- &job[int]{}
	if ok, _ := b.solo(j); ok || ran != 1 {
		t.Errorf("a job queued: ran as a plan, want it batched")
	}
	<-b.queue

	if ok, _ := b.solo(j); !ok || ran != 2 {
		t.Errorf("idle again: not run as a plan")
	}
}

// TestSoloYields: a handler that ran a plan lets a goroutine waiting for
// its P run before it goes on (with one P, nothing else could run it
// before the runtime's 10 ms preemption). A yield puts the handler on
// the global run queue, which the scheduler serves first once every 61
// schedules, so one try in about 60 finds the handler running again
// first (4 of 300 tries did, 2026-11-30): the test takes the first of up
// to ten tries in which the other goroutine ran. Without the yield none
// would: ten plans take 1 ms, a tenth of the preemption interval.
func TestSoloYields(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	m := &modelBase{cores: newCoreSlots(1)}
	m.metrics.solo = prometheus.NewCounter(prometheus.CounterOpts{Name: "solo_test"})
	b := &batcher[int]{m: m, queue: make(chan *job[int], 1)}
	j := &job[int]{solo: func(coreSlots) error {
		for t0 := time.Now(); time.Since(t0) < 100*time.Microsecond; {
		}
		return nil
	}}
	for try := 0; try < 10; try++ {
		var other atomic.Bool
		go other.Store(true) // ready to run on this P, behind the handler
		if ok, err := b.solo(j); !ok || err != nil {
			t.Fatalf("idle model: ran %v (%v); want a plan", ok, err)
		}
		if other.Load() {
			return
		}
	}
	t.Errorf("in ten plans, the goroutine waiting for the handler's P never ran after the plan")
}
