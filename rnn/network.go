package rnn

import (
	"errors"
	"fmt"

	"rnnserve/internal/hugepage"
)

// CellKind names a recurrent cell type.
type CellKind uint8

const (
	LSTM CellKind = iota + 1
	GRU
	// RNNTanh and RNNReLU are Elman cells, PyTorch's nn.RNN with
	// nonlinearity 'tanh' (its default) and 'relu': h' = act(W_ih x +
	// b_ih + W_hh h + b_hh), one block of rows in W_ih and W_hh.
	RNNTanh
	RNNReLU
)

// ErrUnknownCell is returned for a cell name ParseCell does not know.
var ErrUnknownCell = errors.New("rnn: unknown cell type")

// ParseCell returns the CellKind named s: "lstm", "gru", "rnn_tanh" or
// "rnn_relu" (the names of torch's RNN modes and of ONNX's RNN
// activations).
func ParseCell(s string) (CellKind, error) {
	switch s {
	case "lstm":
		return LSTM, nil
	case "gru":
		return GRU, nil
	case "rnn_tanh":
		return RNNTanh, nil
	case "rnn_relu":
		return RNNReLU, nil
	}
	return 0, fmt.Errorf("%w %q (want lstm, gru, rnn_tanh or rnn_relu)", ErrUnknownCell, s)
}

func (k CellKind) String() string {
	switch k {
	case LSTM:
		return "lstm"
	case GRU:
		return "gru"
	case RNNTanh:
		return "rnn_tanh"
	case RNNReLU:
		return "rnn_relu"
	}
	return fmt.Sprintf("CellKind(%d)", uint8(k))
}

// Elman reports whether k is an Elman cell (RNNTanh or RNNReLU).
func (k CellKind) Elman() bool { return k == RNNTanh || k == RNNReLU }

// Gates is the number of gate blocks stacked in W_ih and W_hh: 4 for
// LSTM, 3 for GRU, 1 for an Elman cell.
func (k CellKind) Gates() int {
	switch k {
	case GRU:
		return 3
	case RNNTanh, RNNReLU:
		return 1
	}
	return 4
}

// SumsBias reports whether the schedules add b_ih and b_hh into one
// vector before the step (LSTM and Elman cells); a GRU keeps them apart,
// since b_hn sits inside r⊙(W_hn h + b_hn).
func (k CellKind) SumsBias() bool { return k != GRU }

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

// HeadInput is what the head reads: the three ways a PyTorch module feeds
// an nn.Linear from its RNN's results. A weights file has the same
// tensors whichever its forward does; they differ in what they compute
// once the RNN runs in both directions.
type HeadInput uint8

const (
	// HeadEveryStep reads every time step of the last layer's output, a
	// head row per step ([T][B][HeadOut]): fc(out), as a language model
	// or a tagger does.
	HeadEveryStep HeadInput = iota
	// HeadLastStep reads the last layer's output at each row's last step,
	// one head row per sequence ([B][HeadOut]): fc(out[-1]) time-major,
	// fc(out[:, -1]) batch first. For two directions that is the forward
	// direction's last state and the backward direction's first step.
	HeadLastStep
	// HeadFinalState reads the last layer's final hidden states, its
	// directions concatenated, one head row per sequence ([B][HeadOut]):
	// fc(h_n[-1]) for one direction, fc(cat(h_n[-2], h_n[-1])) for two,
	// the usual sequence classifier. With one direction it equals
	// HeadLastStep.
	HeadFinalState
)

// ParseHeadInput accepts "every_step" (or ""), "last_step" and "h_n".
func ParseHeadInput(s string) (HeadInput, error) {
	switch s {
	case "", "every_step":
		return HeadEveryStep, nil
	case "last_step":
		return HeadLastStep, nil
	case "h_n":
		return HeadFinalState, nil
	}
	return 0, fmt.Errorf("rnn: unknown head input %q (want every_step, last_step or h_n)", s)
}

func (h HeadInput) String() string {
	switch h {
	case HeadLastStep:
		return "last_step"
	case HeadFinalState:
		return "h_n"
	}
	return "every_step"
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

	mem *hugepage.Arena // the network's, holding its large matrices (Network.Memory)
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
//
// Layers is the truth about the stack: every layer carries its own cell,
// sizes and (through the length of its slice) direction count, so the
// layers of a mixed stack (several RNN modules in sequence, see
// Config.Stack) may differ. Cell, Hidden, Proj and Bidirectional describe
// the last layer, which is what the head reads; for a uniform stack they
// describe every layer. Code that lays out per-layer state must use the
// layer's own fields or StateOffset/CellOffset, never these.
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
	HeadW      []float32 // [HeadOut][OutputWidth()]
	HeadB      []float32 // [HeadOut]
	Activation Activation
	HeadInput  HeadInput // what the head reads; its width is OutputWidth() whichever

	mem *hugepage.Arena // see Memory
}

// Memory is the arena that owns the network's weight matrices of
// hugepage.MinBytes or more, mapped on huge pages where the host has them
// (NewNetwork places them there): nil for a dry network or one built by
// hand. The matrices live as long as the arena, which the Network and
// each of its Layers point to; code that keeps one of their slices
// beyond them (a schedule's program or stepper) must keep the arena too.
func (n *Network) Memory() *hugepage.Arena { return n.mem }

// Memory is the arena that owns the layer's large matrices: its
// network's (Network.Memory).
func (l *Layer) Memory() *hugepage.Arena { return l.mem }

// HeadRows is the number of head rows a run of T steps of batch B
// gives: T*B when the head reads every step, else B.
func (n *Network) HeadRows(T, B int) int {
	if n.HeadInput == HeadEveryStep {
		return T * B
	}
	return B
}

// Dirs is 2 when the last layer is bidirectional, else 1.
func (n *Network) Dirs() int {
	if n.Bidirectional {
		return 2
	}
	return 1
}

// Out is the last layer's per-direction output size (Proj if set, else Hidden).
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

// Uniform reports whether every layer has the same cell, sizes and
// directions (one nn.LSTM or nn.GRU module), as opposed to a mixed stack.
func (n *Network) Uniform() bool {
	first := n.Layers[0]
	for _, dirs := range n.Layers[1:] {
		if len(dirs) != len(first) || !dirs[0].sameShape(first[0]) {
			return false
		}
	}
	return true
}

func (l *Layer) sameShape(o *Layer) bool {
	return l.Cell == o.Cell && l.Hidden == o.Hidden && l.Proj == o.Proj
}

// Unidirectional reports whether every layer runs forward only, so the
// stack can be run one step at a time (cellular batching, generation).
func (n *Network) Unidirectional() bool {
	for _, dirs := range n.Layers {
		if len(dirs) > 1 {
			return false
		}
	}
	return true
}

// Stack lists the shape of every layer, bottom first.
func (n *Network) Stack() []LayerConfig {
	s := make([]LayerConfig, len(n.Layers))
	for k, dirs := range n.Layers {
		l := dirs[0]
		s[k] = LayerConfig{Cell: l.Cell, Hidden: l.Hidden, Proj: l.Proj, Bidirectional: len(dirs) == 2}
	}
	return s
}

// StateOffset is where the hidden state of layer k, direction d starts in
// a state tensor of batch B: layer by layer, direction by direction, each
// [B][Out] of that layer (PyTorch's h_n [Layers*Dirs][B][Out] for a
// uniform stack; for a mixed stack, each module's h_n in turn, flattened).
// StateOffset(len(Layers), 0, B) is the size of the whole tensor.
func (n *Network) StateOffset(k, d, B int) int {
	off := 0
	for _, dirs := range n.Layers[:k] {
		off += len(dirs) * B * dirs[0].Out()
	}
	if k < len(n.Layers) {
		off += d * B * n.Layers[k][0].Out()
	}
	return off
}

// CellOffset is StateOffset for the cell state c of layer k, direction d:
// [B][Hidden] per LSTM layer and direction; GRU layers have none.
// CellOffset(len(Layers), 0, B) is the size of the whole tensor.
func (n *Network) CellOffset(k, d, B int) int {
	off := 0
	for _, dirs := range n.Layers[:k] {
		if dirs[0].Cell == LSTM {
			off += len(dirs) * B * dirs[0].Hidden
		}
	}
	if k < len(n.Layers) {
		off += d * B * n.Layers[k][0].Hidden
	}
	return off
}

// StateSize and CellSize are the sizes of the whole h and c tensors for batch B.
func (n *Network) StateSize(B int) int { return n.StateOffset(len(n.Layers), 0, B) }
func (n *Network) CellSize(B int) int  { return n.CellOffset(len(n.Layers), 0, B) }

// HasCell reports whether any layer is an LSTM (so the network has a cell state).
func (n *Network) HasCell() bool { return n.CellSize(1) > 0 }

// NewNetwork builds a network of the given shape with every weight slice
// allocated (zero) unless dry is set, in which case only shapes are kept.
// Callers fill the weights (from a file or at random). A matrix of
// hugepage.MinBytes or more is mapped on huge pages where the host has
// them and hugepage.Enable has not turned mapping off, owned by the
// network's Memory; the rest are on the heap.
func NewNetwork(cfg Config, dry bool) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	stack := cfg.LayerConfigs()
	top := stack[len(stack)-1]
	n := &Network{
		Cell: top.Cell, Input: cfg.Input, Hidden: top.Hidden, Proj: top.Proj,
		NumLayers: len(stack), Bidirectional: top.Bidirectional,
		Vocab: cfg.Vocab, HeadOut: cfg.HeadOut, Activation: cfg.Activation, HeadInput: cfg.HeadInput,
	}
	if !dry {
		n.mem = new(hugepage.Arena)
	}
	alloc := func(k int) []float32 {
		if dry {
			return nil
		}
		return n.mem.Floats(k)
	}
	if n.Vocab > 0 {
		n.Embedding = alloc(n.Vocab * n.Input)
	}
	in := n.Input
	for _, lc := range stack {
		dirs := make([]*Layer, lc.dirs())
		for d := range dirs {
			l := &Layer{Cell: lc.Cell, Input: in, Hidden: lc.Hidden, Proj: lc.Proj, mem: n.mem}
			rows := l.Rows()
			l.Wih = alloc(rows * in)
			l.Whh = alloc(rows * l.Out())
			l.Bih = alloc(rows)
			l.Bhh = alloc(rows)
			if lc.Proj > 0 {
				l.Whr = alloc(lc.Proj * lc.Hidden)
			}
			dirs[d] = l
		}
		n.Layers = append(n.Layers, dirs)
		in = lc.width()
	}
	if n.HeadOut > 0 {
		n.HeadW = alloc(n.HeadOut * n.OutputWidth())
		n.HeadB = alloc(n.HeadOut)
	}
	return n, nil
}

// Config is the shape of a Network. A uniform stack (one nn.LSTM or
// nn.GRU module) sets Cell, Hidden, Proj, Layers and Bidirectional; a
// mixed stack sets Stack instead and leaves those five zero.
type Config struct {
	Cell          CellKind
	Input         int
	Hidden        int
	Proj          int
	Layers        int
	Bidirectional bool
	// Stack lists every layer's shape, bottom first, for a stack whose
	// layers differ: several RNN modules in sequence, each with its own
	// cell, size, projection and direction. Layer k's input is layer
	// k-1's output (Dirs*Out wide).
	Stack      []LayerConfig
	Vocab      int
	HeadOut    int
	Activation Activation
	HeadInput  HeadInput
}

// LayerConfig is the shape of one layer of a stack.
type LayerConfig struct {
	Cell          CellKind
	Hidden        int
	Proj          int // LSTM only; 0 means no projection
	Bidirectional bool
}

func (l LayerConfig) dirs() int {
	if l.Bidirectional {
		return 2
	}
	return 1
}

func (l LayerConfig) out() int {
	if l.Proj > 0 {
		return l.Proj
	}
	return l.Hidden
}

// width is the layer's output width: Dirs*Out.
func (l LayerConfig) width() int { return l.dirs() * l.out() }

// LayerConfigs lists the shape of every layer, bottom first, for either
// form of Config.
func (c Config) LayerConfigs() []LayerConfig {
	if len(c.Stack) > 0 {
		return c.Stack
	}
	s := make([]LayerConfig, max(c.Layers, 0))
	for k := range s {
		s[k] = LayerConfig{Cell: c.Cell, Hidden: c.Hidden, Proj: c.Proj, Bidirectional: c.Bidirectional}
	}
	return s
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
	if len(c.Stack) > 0 {
		switch {
		case c.Cell != 0 || c.Hidden != 0 || c.Proj != 0 || c.Layers != 0 || c.Bidirectional:
			return fmt.Errorf("%w: a stack of layers sets cell, sizes and directions per layer, not for the whole network", ErrShape)
		case len(c.Stack) > 1024:
			return bad("layers", len(c.Stack), "1..1024")
		}
	}
	switch {
	case c.Input < 1 || c.Input > maxDim:
		return bad("input_size", c.Input, "1..16777216")
	case len(c.Stack) == 0 && (c.Layers < 1 || c.Layers > 1024):
		return bad("num_layers", c.Layers, "1..1024")
	case c.Vocab < 0 || c.Vocab > maxDim:
		return bad("vocab_size", c.Vocab, "0..16777216")
	case c.HeadOut < 0 || c.HeadOut > maxDim:
		return bad("out_features", c.HeadOut, "0..16777216")
	case c.Activation > ActLogSoftmax:
		return fmt.Errorf("%w: activation %d", ErrShape, c.Activation)
	case c.Activation != ActNone && c.HeadOut == 0:
		return fmt.Errorf("%w: activation %v needs a head", ErrShape, c.Activation)
	case c.HeadInput > HeadFinalState:
		return fmt.Errorf("%w: head input %d", ErrShape, c.HeadInput)
	case c.HeadInput != HeadEveryStep && c.HeadOut == 0:
		return fmt.Errorf("%w: head input %v needs a head", ErrShape, c.HeadInput)
	}
	// Bound the largest matrix so element counts fit comfortably in an int.
	in := c.Input
	for k, l := range c.LayerConfigs() {
		field := func(name string) string {
			if len(c.Stack) == 0 {
				return name
			}
			return fmt.Sprintf("layers[%d].%s", k, name)
		}
		switch {
		case l.Cell != LSTM && l.Cell != GRU && !l.Cell.Elman():
			if len(c.Stack) == 0 {
				return fmt.Errorf("%w: cell %v", ErrUnknownCell, l.Cell)
			}
			return fmt.Errorf("%w: %s %v", ErrUnknownCell, field("cell"), l.Cell)
		case l.Hidden < 1 || l.Hidden > maxDim:
			return bad(field("hidden_size"), l.Hidden, "1..16777216")
		case l.Proj < 0 || l.Proj >= l.Hidden && l.Proj != 0:
			return bad(field("proj_size"), l.Proj, "0 or 1..hidden_size-1")
		case l.Proj > 0 && l.Cell != LSTM:
			return bad(field("proj_size"), l.Proj, "0 (projection is LSTM only)")
		}
		if int64(l.Cell.Gates())*int64(l.Hidden)*int64(in+l.out()) > 1<<34 {
			return fmt.Errorf("%w: a weight matrix of %s has more than 2^34 elements", ErrShape, field("layer"))
		}
		in = l.width()
	}
	if int64(c.Vocab)*int64(c.Input) > 1<<34 || int64(c.HeadOut)*int64(in) > 1<<34 {
		return fmt.Errorf("%w: a weight matrix has more than 2^34 elements", ErrShape)
	}
	return nil
}

// Config returns the shape of n: the uniform form for a uniform stack,
// else Stack.
func (n *Network) Config() Config {
	c := Config{Input: n.Input, Vocab: n.Vocab, HeadOut: n.HeadOut, Activation: n.Activation, HeadInput: n.HeadInput}
	if n.Uniform() {
		c.Cell, c.Hidden, c.Proj, c.Layers, c.Bidirectional = n.Cell, n.Hidden, n.Proj, n.NumLayers, n.Bidirectional
	} else {
		c.Stack = n.Stack()
	}
	return c
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
