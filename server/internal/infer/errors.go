package infer

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"rnnserve/schedule"
	"rnnserve/server/internal/limits"
)

// Errors a request can meet. StatusOf maps each to its HTTP status; a
// gRPC front end maps the same sentinels to its codes with errors.Is.
var (
	ErrBadRequest = errors.New("bad request")
	ErrTooLarge   = errors.New("request too large")
	// ErrResponseTooLarge refuses a request whose response would be over
	// Options.MaxResponseBytes, before it runs.
	ErrResponseTooLarge = errors.New("response too large")
	ErrUnsupportedMedia = errors.New("unsupported content encoding")
	ErrUnknownModel     = errors.New("unknown model")
	ErrUnknownVersion   = errors.New("unknown model version")
	ErrUnknownSequence  = errors.New("unknown sequence")
	ErrSequenceEnded    = errors.New("sequence ended")
	ErrSequenceExpired  = errors.New("sequence expired")
	ErrSequenceBusy     = errors.New("sequence has a request in flight")
	ErrTooManySequences = errors.New("too many live sequences")
	ErrBusy             = errors.New("server busy: queue full")
	// ErrSlowBody fails a request whose body (or gRPC message) arrived
	// slower than the minimum rate, Options.MinBodyRate.
	ErrSlowBody          = errors.New("request body arrived too slowly")
	ErrDraining          = errors.New("server shutting down")
	ErrNotLanguageModel  = errors.New("model cannot generate text")
	ErrUnsupportedOutput = errors.New("unsupported output")
	// ErrLoad is wrapped by every failed model load: a bad name, a model
	// the repository does not have, or files that do not load. The model
	// served before (if any) keeps serving.
	ErrLoad = errors.New("model load failed")
	// ErrNoRepository answers load and unload on a server started without
	// a model repository.
	ErrNoRepository = errors.New("no model repository: load and unload are off")
	// ErrNotInRepository is wrapped by a load of a name the repository
	// has no model directory for.
	ErrNotInRepository = errors.New("not in the model repository")
	// ErrForbidden answers a call the settings do not allow (the model
	// control mode, the management listener).
	ErrForbidden = errors.New("forbidden")
	// ErrUnauthenticated answers a management call without the bearer
	// token it needs.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInternal answers a request that a panic (a bug) cut short. The
	// message names where it happened; the stack is in the server's log.
	ErrInternal = errors.New("internal error")
	// ErrOverBudget refuses a request that found no room in the memory
	// budget within its wait (package limits).
	ErrOverBudget = limits.ErrOverBudget
)

// StatusOf maps an error to the HTTP status that answers it.
func StatusOf(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrLoad) && (errors.Is(err, ErrUnknownModel) || errors.Is(err, ErrNotInRepository)):
		return http.StatusNotFound
	case errors.Is(err, ErrBadRequest), errors.Is(err, schedule.ErrInput),
		errors.Is(err, ErrNotLanguageModel), errors.Is(err, ErrUnsupportedOutput),
		errors.Is(err, ErrLoad), errors.Is(err, ErrNoRepository), errors.Is(err, ErrResponseTooLarge):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnsupportedMedia):
		return http.StatusUnsupportedMediaType
	case errors.Is(err, ErrSlowBody):
		return http.StatusRequestTimeout
	case errors.Is(err, ErrUnknownModel), errors.Is(err, ErrUnknownVersion), errors.Is(err, ErrUnknownSequence):
		return http.StatusNotFound
	case errors.Is(err, ErrSequenceEnded), errors.Is(err, ErrSequenceExpired):
		return http.StatusGone
	case errors.Is(err, ErrSequenceBusy):
		return http.StatusConflict
	case errors.Is(err, ErrTooManySequences):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrBusy), errors.Is(err, ErrDraining), errors.Is(err, ErrOverBudget):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 499 // client closed request (nginx's convention)
	case errors.Is(err, ErrInternal):
		return http.StatusInternalServerError
	}
	return http.StatusInternalServerError
}

// BadRequest is an ErrBadRequest with a message.
func BadRequest(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
}
