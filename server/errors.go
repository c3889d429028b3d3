package server

import (
	"context"
	"errors"
	"net/http"

	"rnnserve/schedule"
)

// Errors a request can meet; statusOf maps each to its HTTP status.
var (
	ErrBadRequest        = errors.New("bad request")
	ErrTooLarge          = errors.New("request too large")
	ErrUnknownModel      = errors.New("unknown model")
	ErrUnknownSequence   = errors.New("unknown sequence")
	ErrSequenceEnded     = errors.New("sequence ended")
	ErrSequenceExpired   = errors.New("sequence expired")
	ErrSequenceBusy      = errors.New("sequence has a request in flight")
	ErrTooManySequences  = errors.New("too many live sequences")
	ErrBusy              = errors.New("server busy: queue full")
	ErrDraining          = errors.New("server shutting down")
	ErrNotLanguageModel  = errors.New("model cannot generate text")
	ErrUnsupportedOutput = errors.New("unsupported output")
)

// statusOf maps an error to the HTTP status that answers it.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, schedule.ErrInput),
		errors.Is(err, ErrNotLanguageModel), errors.Is(err, ErrUnsupportedOutput):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnknownModel), errors.Is(err, ErrUnknownSequence):
		return http.StatusNotFound
	case errors.Is(err, ErrSequenceEnded), errors.Is(err, ErrSequenceExpired):
		return http.StatusGone
	case errors.Is(err, ErrSequenceBusy):
		return http.StatusConflict
	case errors.Is(err, ErrTooManySequences):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrBusy), errors.Is(err, ErrDraining):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 499 // client closed request (nginx's convention)
	}
	return http.StatusInternalServerError
}
