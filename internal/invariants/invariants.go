// Package invariants is the switch for checks too costly to run in
// production: built with the invariants tag (go test -tags invariants),
// Enabled is true and the packages that import this one check what they
// otherwise assume, as pebble's internal/invariants does. Without the tag
// Enabled is a false constant, so every check it guards compiles away.
//
// Under the tag:
//
//   - schedule runs every step of a Plan, a Stepper, a tree plan and a
//     generation through its region checker (schedule.Plan.RunChecked),
//     serially;
//   - internal/f32's kernels that take W in chunks report each chunk to
//     a recorder (Record), so that the checker can compare the order a
//     kernel reads W in with the order its step declares.
//
// CI runs the schedule, dre and server tests this way (.ci/run).
package invariants

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// recorder is where Stream reports, set by Record.
var recorder struct {
	mu   sync.Mutex // held from Record to its stop: one recording at a time
	sink atomic.Pointer[func(addr uintptr, bytes int)]
}

// Stream reports that a kernel is about to read bytes bytes from p, one
// chunk of an operand it takes in several. It does nothing without the
// tag (the call compiles away) or while nothing is recording.
func Stream(p unsafe.Pointer, bytes int) {
	if !Enabled {
		return
	}
	if f := recorder.sink.Load(); f != nil {
		(*f)(uintptr(p), bytes)
	}
}

// Record makes f receive every Stream until stop is called, and holds
// every other Record until then, so that a recording sees only the
// kernel calls made while it runs: under the tag every step that runs a
// chunked kernel runs inside the region checker, which checks one step
// at a time inside a Record. Without the tag nothing is recorded.
func Record(f func(addr uintptr, bytes int)) (stop func()) {
	recorder.mu.Lock()
	recorder.sink.Store(&f)
	return func() {
		recorder.sink.Store(nil)
		recorder.mu.Unlock()
	}
}
