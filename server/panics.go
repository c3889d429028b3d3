package server

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"rnnserve/schedule"
	"rnnserve/server/internal/infer"
)

// Panics are contained where they can happen: a batcher lane recovers,
// fails the jobs of its batch and replaces the batch (batcher.go); a
// request's own goroutine (a whole-request plan, a worker pool job whose
// part panicked, decoding and encoding) recovers in Server.Infer and
// Server.Generate; the REST and gRPC front ends recover in their handlers
// as a last resort. Each answers the requests it hit with ErrInternal
// (HTTP 500, gRPC Internal), logs the panic with its stack, counts it in
// rnnserve_panics_total and the process keeps serving.

// panicked converts a value recover returned into an ErrInternal error,
// logging it with the stack (the panicking worker's, when a
// schedule.PanicError carried it over from a pool) and counting it.
func (b *modelBase) panicked(where string, v any) error {
	stack := debug.Stack()
	var pe *schedule.PanicError
	if e, ok := v.(*schedule.PanicError); ok {
		pe = e
	} else if err, ok := v.(error); ok && errors.As(err, &pe) {
		v = pe
	}
	if pe != nil {
		stack, v = pe.Stack, pe.Value
	}
	b.log.Error("panic contained", "model", b.name, "where", where, "panic", fmt.Sprint(v), "stack", string(stack))
	b.metrics.panics.Inc()
	return fmt.Errorf("%w: a panic in model %q's %s cut the request short (the stack is in the server log)", ErrInternal, infer.Clip(b.name), where)
}

// protect runs f, returning a panic in it as an ErrInternal error (see
// panicked).
func (b *modelBase) protect(where string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = b.panicked(where, v)
		}
	}()
	return f()
}

// logPanic logs a panic a front end recovered outside any model, with
// more attributes (the request id) after where.
func logPanic(log *slog.Logger, where string, v any, attrs ...any) {
	log.Error("panic contained", append(append([]any{"where", where}, attrs...), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))...)
}
