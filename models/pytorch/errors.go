package pytorch

import (
	"errors"
	"strings"
)

// Errors returned by Read, wrapped with detail; test with errors.Is.
var (
	// ErrFormat means the input is not a PyTorch checkpoint; the message
	// says what it is (a safetensors file, an ONNX model, ...).
	ErrFormat = errors.New("pytorch: not a PyTorch checkpoint")
	// ErrCorrupt means a malformed zip archive or pickle.
	ErrCorrupt = errors.New("pytorch: corrupt checkpoint")
	// ErrTruncated means the file ends early.
	ErrTruncated = errors.New("pytorch: checkpoint truncated")
	// ErrMissingRecord means the zip archive lacks a record the pickle
	// refers to (data.pkl, or a storage's data/<key>).
	ErrMissingRecord = errors.New("pytorch: checkpoint lacks a record")
	// ErrClass is matched by every *ClassError.
	ErrClass = errors.New("pytorch: class not allowed")
	// ErrContent means the pickle is valid and harmless but does not hold
	// a dict of tensors (a state_dict), or holds a tensor this package
	// cannot represent.
	ErrContent = errors.New("pytorch: checkpoint is not a state_dict")
	// ErrTooLarge means a tensor or record over the size limits.
	ErrTooLarge = errors.New("pytorch: checkpoint too large")
)

// ClassError is a pickle's reference to a class outside the allow list.
// Nothing of the class is run or constructed.
type ClassError struct {
	Module, Name string
}

func (e *ClassError) Error() string {
	var hint string
	switch {
	case e.Module == "__main__" || strings.HasPrefix(e.Module, "torch.nn.modules"):
		hint = ": the file pickles a whole module; save model.state_dict() instead"
	case strings.HasPrefix(e.Module, "numpy"):
		hint = ": the file holds numpy objects; save only model.state_dict()"
	}
	// STACK_GLOBAL's names are strs of any length: clipped.
	return "pytorch: class " + clipName(e.Module) + "." + clipName(e.Name) + " is not allowed in a checkpoint (loading it would run or trust code from the file)" + hint
}

// Is makes errors.Is(err, ErrClass) true.
func (e *ClassError) Is(target error) bool { return target == ErrClass }
