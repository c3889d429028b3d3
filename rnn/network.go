package rnn

import (
	"errors"
	"fmt"
)

// CellKind names a recurrent cell type.
type CellKind uint8

const (
	LSTM CellKind = iota + 1
	GRU
)

// ErrUnknownCell is returned for a cell name that is neither "lstm" nor "gru".
var ErrUnknownCell = errors.New("rnn: unknown cell type")

// ParseCell returns the CellKind named s ("lstm" or "gru").
func ParseCell(s string) (CellKind, error) {
	switch s {
	case "lstm":
		return LSTM, nil
	case "gru":
		return GRU, nil
	}
	return 0, fmt.Errorf("%w %q (want lstm or gru)", ErrUnknownCell, s)
}

func (k CellKind) String() string {
	switch k {
	case LSTM:
		return "lstm"
	case GRU:
		return "gru"
	}
	return fmt.Sprintf("CellKind(%d)", uint8(k))
}

// Gates is the number of gate blocks stacked in W_ih and W_hh: 4 for LSTM, 3 for GRU.
func (k CellKind) Gates() int {
	if k == GRU {
		return 3
	}
	return 4
}

// Activation is applied by the output head.
type Activation uint8

const (
	ActNone Activation = iota
	ActSoftmax
	ActLogSoftmax
)

// ParseActivation accepts "none" (or ""), "softmax" and "log_softmax".
func ParseActivation(s string) (Activation, error) {
	switch s {
	case "", "none":
		return ActNone, nil
	case "softmax":
		return ActSoftmax, nil
	case "log_softmax":
		return ActLogSoftmax, nil
	}
	return 0, fmt.Errorf("rnn: unknown activation %q (want none, softmax or log_softmax)", s)
}

func (a Activation) String() string {
	switch a {
	case ActSoftmax:
		return "softmax"
	case ActLogSoftmax:
		return "log_softmax"
	}
	return "none"
}

// Layer holds the weights of one direction of one recurrent layer.
// A Layer whose weight slices are nil describes shapes only (a dry model,
// used for traffic analysis of models nobody has trained).
type Layer struct {
	Cell   CellKind
	Input  int // features per step entering this layer
	Hidden int // H
	Proj   int // P, LSTM only; 0 means no projection

	Wih []float32 // [Gates*H][Input]
	Whh []float32 // [Gates*H][Out()]
	Bih []float32 // [Gates*H]
	Bhh []float32 // [Gates*H]
	Whr []float32 // [Proj][H], nil without projection
}

// Out is the size of the layer's output and recurrent state h: Proj if set, else Hidden.
func (l *Layer) Out() int {
	if l.Proj > 0 {
		return l.Proj
	}
	return l.Hidden
}

// Rows is the number of rows of W_ih and W_hh (Gates*H).
func (l *Layer) Rows() int { return l.Cell.Gates() * l.Hidden }

// Network is an embedding (optional), a stack of recurrent layers (each one
// or two directions) and a linear head (optional).
type Network struct {
	Cell          CellKind
	Input         int // features per step (the embedding width when Vocab > 0)
	Hidden        int
	Proj          int
	NumLayers     int
	Bidirectional bool

	Vocab     int       // 0: the network takes float features
	Embedding []float32 // [Vocab][Input]

	Layers [][]*Layer // [layer][direction]

	HeadOut    int       // 0: no head
	HeadW      []float32 // [HeadOut][Dirs()*Out()]
	HeadB      []float32 // [HeadOut]
	Activation Activation
}

// Dirs is 2 for a bidirectional network, else 1.
func (n *Network) Dirs() int {
	if n.Bidirectional {
		return 2
	}
	return 1
}

// Out is the per-direction output size (Proj if set, else Hidden).
func (n *Network) Out() int {
	if n.Proj > 0 {
		return n.Proj
	}
	return n.Hidden
}

// OutputWidth is the width of one time step of the last layer's output: Dirs()*Out().
func (n *Network) OutputWidth() int { return n.Dirs() * n.Out() }

// Dry reports whether the network has shapes but no weights.
func (n *Network) Dry() bool { return n.Layers[0][0].Wih == nil }

// NewNetwork builds a network of the given shape with every weight slice
// allocated (zero) unless dry is set, in which case only shapes are kept.
// Callers fill the weights (from a file or at random).
func NewNetwork(cfg Config, dry bool) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Network{
		Cell: cfg.Cell, Input: cfg.Input, Hidden: cfg.Hidden, Proj: cfg.Proj,
		NumLayers: cfg.Layers, Bidirectional: cfg.Bidirectional,
		Vocab: cfg.Vocab, HeadOut: cfg.HeadOut, Activation: cfg.Activation,
	}
	alloc := func(k int) []float32 {
		if dry {
			return nil
		}
		return make([]float32, k)
	}
	if n.Vocab > 0 {
		n.Embedding = alloc(n.Vocab * n.Input)
	}
	in := n.Input
	for k := 0; k < n.NumLayers; k++ {
		dirs := make([]*Layer, n.Dirs())
		for d := range dirs {
			l := &Layer{Cell: n.Cell, Input: in, Hidden: n.Hidden, Proj: n.Proj}
			rows := l.Rows()
			l.Wih = alloc(rows * in)
			l.Whh = alloc(rows * l.Out())
			l.Bih = alloc(rows)
			l.Bhh = alloc(rows)
			if n.Proj > 0 {
				l.Whr = alloc(n.Proj * n.Hidden)
			}
			dirs[d] = l
		}
		n.Layers = append(n.Layers, dirs)
		in = n.OutputWidth()
	}
	if n.HeadOut > 0 {
		n.HeadW = alloc(n.HeadOut * n.OutputWidth())
		n.HeadB = alloc(n.HeadOut)
	}
	return n, nil
}

// Config is the shape of a Network.
type Config struct {
	Cell          CellKind
	Input         int
	Hidden        int
	Proj          int
	Layers        int
	Bidirectional bool
	Vocab         int
	HeadOut       int
	Activation    Activation
}

// ErrShape is wrapped by every error about an impossible network shape.
var ErrShape = errors.New("rnn: invalid shape")

// Limit on any single dimension, so that products of sizes cannot overflow.
const maxDim = 1 << 24

// Validate reports the first impossible setting, naming it.
func (c Config) Validate() error {
	bad := func(field string, v int, want string) error {
		return fmt.Errorf("%w: %s = %d, want %s", ErrShape, field, v, want)
	}
	switch {
	case c.Cell != LSTM && c.Cell != GRU:
		return fmt.Errorf("%w: cell %v", ErrUnknownCell, c.Cell)
	case c.Input < 1 || c.Input > maxDim:
		return bad("input_size", c.Input, "1..16777216")
	case c.Hidden < 1 || c.Hidden > maxDim:
		return bad("hidden_size", c.Hidden, "1..16777216")
	case c.Layers < 1 || c.Layers > 1024:
		return bad("num_layers", c.Layers, "1..1024")
	case c.Proj < 0 || c.Proj >= c.Hidden && c.Proj != 0:
		return bad("proj_size", c.Proj, "0 or 1..hidden_size-1")
	case c.Proj > 0 && c.Cell != LSTM:
		return bad("proj_size", c.Proj, "0 for gru")
	case c.Vocab < 0 || c.Vocab > maxDim:
		return bad("vocab_size", c.Vocab, "0..16777216")
	case c.HeadOut < 0 || c.HeadOut > maxDim:
		return bad("out_features", c.HeadOut, "0..16777216")
	case c.Activation > ActLogSoftmax:
		return fmt.Errorf("%w: activation %d", ErrShape, c.Activation)
	case c.Activation != ActNone && c.HeadOut == 0:
		return fmt.Errorf("%w: activation %v needs a head", ErrShape, c.Activation)
	}
	// Bound the largest matrix so element counts fit comfortably in an int.
	out := c.Hidden
	if c.Proj > 0 {
		out = c.Proj
	}
	width := out
	if c.Bidirectional {
		width *= 2
	}
	in := max(c.Input, width)
	if int64(c.Cell.Gates())*int64(c.Hidden)*int64(in+out) > 1<<34 ||
		int64(c.Vocab)*int64(c.Input) > 1<<34 || int64(c.HeadOut)*int64(width) > 1<<34 {
		return fmt.Errorf("%w: a weight matrix has more than 2^34 elements", ErrShape)
	}
	return nil
}

// Config returns the shape of n.
func (n *Network) Config() Config {
	return Config{Cell: n.Cell, Input: n.Input, Hidden: n.Hidden, Proj: n.Proj,
		Layers: n.NumLayers, Bidirectional: n.Bidirectional, Vocab: n.Vocab,
		HeadOut: n.HeadOut, Activation: n.Activation}
}

// WeightBytes is the size of all of n's parameters in bytes (float32).
func (n *Network) WeightBytes() int64 {
	var e int64
	e += int64(n.Vocab) * int64(n.Input)
	for _, dirs := range n.Layers {
		for _, l := range dirs {
			rows := int64(l.Rows())
			e += rows*int64(l.Input) + rows*int64(l.Out()) + 2*rows
			e += int64(l.Proj) * int64(l.Hidden)
		}
	}
	e += int64(n.HeadOut)*int64(n.OutputWidth()) + int64(n.HeadOut)
	return 4 * e
}
