package server

import (
	"fmt"

	"rnnserve/server/internal/infer"
)

// Errors a request can meet: package infer's, under the names users of
// package server know. StatusOf maps each to its HTTP status; CodeOf to
// its gRPC code.
var (
	ErrBadRequest        = infer.ErrBadRequest
	ErrTooLarge          = infer.ErrTooLarge
	ErrResponseTooLarge  = infer.ErrResponseTooLarge
	ErrUnsupportedMedia  = infer.ErrUnsupportedMedia
	ErrUnknownModel      = infer.ErrUnknownModel
	ErrUnknownVersion    = infer.ErrUnknownVersion
	ErrUnknownSequence   = infer.ErrUnknownSequence
	ErrSequenceEnded     = infer.ErrSequenceEnded
	ErrSequenceExpired   = infer.ErrSequenceExpired
	ErrSequenceBusy      = infer.ErrSequenceBusy
	ErrTooManySequences  = infer.ErrTooManySequences
	ErrBusy              = infer.ErrBusy
	ErrSlowBody          = infer.ErrSlowBody
	ErrDraining          = infer.ErrDraining
	ErrNotLanguageModel  = infer.ErrNotLanguageModel
	ErrUnsupportedOutput = infer.ErrUnsupportedOutput
	ErrLoad              = infer.ErrLoad
	ErrNoRepository      = infer.ErrNoRepository
	ErrNotInRepository   = infer.ErrNotInRepository
	ErrForbidden         = infer.ErrForbidden
	ErrUnauthenticated   = infer.ErrUnauthenticated
	ErrInternal          = infer.ErrInternal
)

// StatusOf maps an error to the HTTP status that answers it (see
// infer.StatusOf).
func StatusOf(err error) int { return infer.StatusOf(err) }

// loadError wraps a load failure of model name.
func loadError(name string, err error) error {
	return fmt.Errorf("%w: model %q: %w", ErrLoad, infer.Clip(name), err)
}
