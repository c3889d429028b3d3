package schedule

import (
	"errors"
	"fmt"
	"math"

	"rnnserve/internal/f32"
	"rnnserve/rnn"
)

// Input is one batch for a Plan. Sequences are time-major, like PyTorch's
// batch_first=False: element (t, b) of Tokens is Tokens[t*B+b], and row
// (t, b) of Features starts at (t*B+b)*InputSize. The plan reads these
// slices in place and never modifies them.
type Input struct {
	T, B     int
	Tokens   []int64   // [T][B], for a network with an embedding
	Features []float32 // [T][B][InputSize], for a network without one
	H0       []float32 // optional [Layers*Dirs][B][Out] (see rnn.Network.StateOffset for a mixed stack)
	C0       []float32 // optional [Layers*Dirs][B][Hidden] of the LSTM layers (rnn.Network.CellOffset)
	// Lengths, optional, gives each row's length (1..T), longest first,
	// as PyTorch's pack_padded_sequence: row b's steps t >= Lengths[b]
	// are padding. Its outputs there are zero, its final state is the
	// state after its last real step, and a reverse direction starts at
	// that step. Rows of other lengths must be sorted by the caller (the
	// server sorts them and puts the results back in order).
	Lengths []int
}

// active is the number of rows with a real step t: all B without
// lengths, else those whose length exceeds t (a prefix: longest first).
func (in *Input) active(t int) int {
	if in.Lengths == nil {
		return in.B
	}
	n := 0
	for n < len(in.Lengths) && in.Lengths[n] > t {
		n++
	}
	return n
}

// PlanOptions selects what a plan computes beyond the recurrent stack.
type PlanOptions struct {
	// Head applies the network's head (and its activation) to every time
	// step. Ignored for a network without a head.
	Head bool
}

// Limits on one input, so that every buffer size fits in an int.
const (
	MaxSteps = 1 << 20
	MaxBatch = 1 << 16
	maxElems = 1 << 31
)

// ErrInput is matched (errors.Is) by every *InputError.
var ErrInput = errors.New("schedule: invalid input")

// InputError names the input field that is wrong and why.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return "schedule: invalid input: " + e.Field + ": " + e.Msg }

// Is makes errors.Is(err, ErrInput) true.
func (e *InputError) Is(target error) bool { return target == ErrInput }

func inputErr(field, format string, a ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// check validates in against the program's network. Dry programs accept
// nil features (only shapes matter to a walk) but still need token ids,
// because they decide which embedding rows are read.
func (p *Program) check(in *Input) error {
	n := p.Net
	switch {
	case in.T < 1:
		return inputErr("T", "sequence length %d, want at least 1", in.T)
	case in.B < 1:
		return inputErr("B", "batch size %d, want at least 1", in.B)
	case in.T > MaxSteps:
		return inputErr("T", "sequence length %d exceeds %d", in.T, MaxSteps)
	case in.B > MaxBatch:
		return inputErr("B", "batch size %d exceeds %d", in.B, MaxBatch)
	}
	tb := in.T * in.B
	w := stackWidths(n)
	width := max(w.in+w.out, w.seq, w.rows, n.OutputWidth(), n.HeadOut)
	if int64(tb)*int64(width) > maxElems {
		return inputErr("T", "%d steps x batch %d x width %d is more than %d values", in.T, in.B, width, int64(maxElems))
	}
	if n.Vocab > 0 {
		if in.Features != nil {
			return inputErr("features", "the model takes token ids, not features")
		}
		if len(in.Tokens) != tb {
			return inputErr("tokens", "%d ids, want T*B = %d*%d = %d", len(in.Tokens), in.T, in.B, tb)
		}
		for i, id := range in.Tokens {
			if id < 0 || id >= int64(n.Vocab) {
				return inputErr("tokens", "id %d at [t=%d][b=%d] is outside the vocabulary [0, %d)", id, i/in.B, i%in.B, n.Vocab)
			}
		}
	} else {
		if in.Tokens != nil {
			return inputErr("tokens", "the model takes features, not token ids")
		}
		if in.Features == nil && !p.dry {
			return inputErr("features", "missing")
		}
		if in.Features != nil {
			if err := checkFloats("features", in.Features, tb*n.Input, fmt.Sprintf("T*B*input_size = %d*%d*%d", in.T, in.B, n.Input)); err != nil {
				return err
			}
		}
	}
	if in.Lengths != nil {
		if len(in.Lengths) != in.B {
			return inputErr("lengths", "%d lengths for a batch of %d", len(in.Lengths), in.B)
		}
		for b, l := range in.Lengths {
			switch {
			case l < 1 || l > in.T:
				return inputErr("lengths", "row %d has length %d, want 1..T = %d", b, l, in.T)
			case b > 0 && l > in.Lengths[b-1]:
				return inputErr("lengths", "row %d (length %d) is longer than row %d (length %d): rows must be sorted longest first", b, l, b-1, in.Lengths[b-1])
			}
		}
	}
	if in.H0 != nil {
		if err := checkFloats("h0", in.H0, n.StateSize(in.B), stateHow(n, n.Out(), "h")); err != nil {
			return err
		}
	}
	if in.C0 != nil {
		if !n.HasCell() {
			return inputErr("c0", "the model has no LSTM layer, so no cell state")
		}
		if err := checkFloats("c0", in.C0, n.CellSize(in.B), stateHow(n, n.Hidden, "c")); err != nil {
			return err
		}
	}
	return nil
}

func checkFloats(field string, v []float32, want int, how string) error {
	if len(v) != want {
		return inputErr(field, "%d values, want %s = %d", len(v), how, want)
	}
	if f32.Finite(v) {
		return nil
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return inputErr(field, "value %v at index %d is not finite", x, i)
		}
	}
	return nil
}

// stateHow says how the size of an initial state is made, for errors.
func stateHow(n *rnn.Network, width int, what string) string {
	if n.Uniform() {
		return fmt.Sprintf("layers*dirs*B*%d", width)
	}
	return "the sum over layers of dirs*B*" + map[string]string{"h": "out", "c": "hidden (LSTM layers)"}[what]
}
