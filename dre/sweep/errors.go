package sweep

import (
	"errors"
	"fmt"
)

// ErrInvalidOption is matched (errors.Is) by every *OptionError.
var ErrInvalidOption = errors.New("dresim: invalid option")

// OptionError is an invalid setting of MeasureOptions or of the child's
// arguments. Its message names the dresim flag that sets it, as the
// command shows it to the user.
type OptionError struct {
	Msg string
}

func (e *OptionError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInvalidOption) true.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOption }

func optionErr(format string, a ...any) error {
	return &OptionError{Msg: fmt.Sprintf(format, a...)}
}
