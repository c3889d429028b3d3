package schedule

import (
	"fmt"
	"runtime/debug"
)

// PanicError is a panic raised by one part of a job on a Pool (a phase's
// part of a Partitioned plan, of a tree plan or of a generation's wave),
// recovered on the goroutine it ran on and handed to the caller:
// Pool.Phases, and so Plan.Run, TreePlan.Run and TreeProgram.Generate,
// re-panics with it in the calling goroutine once the job is over. The
// job's other parts finish or are skipped, so the pool stays usable; the
// job's results are garbage.
type PanicError struct {
	Value any    // what the part panicked with
	Stack []byte // the panicking goroutine's stack
	Phase int    // the phase
	Part  int    // the part: the pool's worker index
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("schedule: panic in phase %d part %d: %v", e.Phase, e.Part, e.Value)
}

// Unwrap returns the panic value when it is an error (a runtime error
// such as an index out of range), for errors.As.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// panicked wraps a value recover returned as a PanicError with the
// current goroutine's stack (a PanicError passes through as it is).
func panicked(v any, phase, part int) *PanicError {
	if pe, ok := v.(*PanicError); ok {
		return pe
	}
	return &PanicError{Value: v, Stack: debug.Stack(), Phase: phase, Part: part}
}
