package schedule

import (
	"fmt"
	"strings"

	"rnnserve/rnn"
)

// Variant is a schedule with the precision of its stored weights, named
// as the server's metadata and dresim's sweeps name it: A, A+, P, P-bf16
// or P-int8. Only P stores weights other than float32.
type Variant struct {
	Schedule  Schedule
	Precision Precision
}

// ParseVariant returns the variant named s: a schedule name (Parse),
// optionally followed by "-bf16" or "-int8" for P.
func ParseVariant(s string) (Variant, error) {
	name, prec := s, F32
	for _, p := range []Precision{BF16, Int8} {
		if base, ok := strings.CutSuffix(s, "-"+p.String()); ok {
			name, prec = base, p
		}
	}
	sc, err := Parse(name)
	if err != nil {
		return Variant{}, fmt.Errorf("%w %q (want A, A+, P, P-bf16 or P-int8)", ErrUnknownSchedule, s)
	}
	if prec != F32 && sc != Partitioned {
		return Variant{}, fmt.Errorf("%w %q: only P stores %v weights", ErrUnknownSchedule, s, prec)
	}
	return Variant{Schedule: sc, Precision: prec}, nil
}

func (v Variant) String() string {
	if v.Precision != F32 {
		return v.Schedule.String() + "-" + v.Precision.String()
	}
	return v.Schedule.String()
}

// NewVariantProgram prepares net for v: NewProgram, or for P-bf16 and
// P-int8 NewPartitioned on one worker with that precision.
func NewVariantProgram(net *rnn.Network, v Variant) (*Program, error) {
	if v.Precision == F32 {
		return NewProgram(net, v.Schedule)
	}
	if v.Schedule != Partitioned {
		return nil, fmt.Errorf("%w %v", ErrUnknownSchedule, v)
	}
	return NewPartitioned(net, PartitionOptions{Precision: v.Precision})
}
