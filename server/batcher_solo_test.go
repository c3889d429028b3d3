package server

import (
	"testing"

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
