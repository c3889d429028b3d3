package tree

import (
	"errors"
	"fmt"

	"rnnserve/internal/hugepage"
)

// Cell names a tree cell.
type Cell uint8

const (
	// TreeRNN is Socher et al. 2011: p = tanh(W [c1; c2] + b); a leaf is its
	// word vector (Embed == Hidden).
	TreeRNN Cell = iota + 1
	// RNTN is Socher et al. 2013: p = tanh([a; b]ᵀ V [a; b] + W [a; b] + b)
	// with V of shape [2d][2d][d]; a leaf is its word vector.
	RNTN
	// BinaryLSTM is Tai et al. 2015's N-ary TreeLSTM with N = 2 and a forget
	// gate per child; leaves read their word, inner nodes only children.
	BinaryLSTM
	// ChildSumLSTM is Tai et al. 2015's Child-Sum TreeLSTM: any number of
	// children, a forget gate per child, a word at any node.
	ChildSumLSTM
	// TopDownLSTM generates a tree top-down (after Zhang, Lu and Lapata
	// 2016): a child's state is an LSTM step from its predecessor (parent
	// or previous sibling) on the child's word; whether a node gets another
	// child is decided from the values computed so far. Its structure is
	// not known before it runs, so only the recursive executor runs it.
	TopDownLSTM
)

var cellNames = [...]string{TreeRNN: "tree_rnn", RNTN: "rntn", BinaryLSTM: "binary_treelstm",
	ChildSumLSTM: "childsum_treelstm", TopDownLSTM: "topdown_treelstm"}

// ErrUnknownCell is returned for an unknown cell name.
var ErrUnknownCell = errors.New("tree: unknown cell type")

// ParseCell returns the cell named s: tree_rnn, rntn, binary_treelstm,
// childsum_treelstm or topdown_treelstm.
func ParseCell(s string) (Cell, error) {
	for c, name := range cellNames {
		if name != "" && name == s {
			return Cell(c), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want tree_rnn, rntn, binary_treelstm, childsum_treelstm or topdown_treelstm)", ErrUnknownCell, s)
}

func (c Cell) String() string {
	if int(c) < len(cellNames) && cellNames[c] != "" {
		return cellNames[c]
	}
	return fmt.Sprintf("Cell(%d)", uint8(c))
}

// Arity is the number of children an inner node must have: 2 for the
// binary cells, 0 (any) for Child-Sum and the top-down generator.
func (c Cell) Arity() int {
	switch c {
	case TreeRNN, RNTN, BinaryLSTM:
		return 2
	}
	return 0
}

// Dynamic reports whether the cell decides its tree's structure as it runs.
func (c Cell) Dynamic() bool { return c == TopDownLSTM }

// HasMemory reports whether nodes carry an LSTM memory cell c beside h.
func (c Cell) HasMemory() bool { return c == BinaryLSTM || c == ChildSumLSTM || c == TopDownLSTM }

// Config is the shape of a Model.
type Config struct {
	Cell    Cell
	Vocab   int // rows of the embedding
	Embed   int // E: width of a word vector
	Hidden  int // H: width of a node's state
	Classes int // C: outputs of the per-node classifier (the vocabulary for TopDownLSTM)
}

// ErrShape is wrapped by every error about an impossible model shape.
var ErrShape = errors.New("tree: invalid shape")

const maxDim = 1 << 16

// Validate reports the first impossible setting.
func (c Config) Validate() error {
	bad := func(field string, v int, want string) error {
		return fmt.Errorf("%w: %s = %d, want %s", ErrShape, field, v, want)
	}
	switch {
	case c.Cell < TreeRNN || c.Cell > TopDownLSTM:
		return fmt.Errorf("%w: cell %v", ErrUnknownCell, c.Cell)
	case c.Vocab < 1 || c.Vocab > MaxNodesLimit:
		return bad("vocab", c.Vocab, "1..16777216")
	case c.Embed < 1 || c.Embed > maxDim:
		return bad("embedding_size", c.Embed, "1..65536")
	case c.Hidden < 1 || c.Hidden > maxDim:
		return bad("hidden_size", c.Hidden, "1..65536")
	case c.Classes < 1 || c.Classes > MaxNodesLimit:
		return bad("classes", c.Classes, "1..16777216")
	case (c.Cell == TreeRNN || c.Cell == RNTN) && c.Embed != c.Hidden:
		return bad("embedding_size", c.Embed, fmt.Sprintf("hidden_size (%d): %v leaves are their word vectors", c.Hidden, c.Cell))
	case c.Cell == TopDownLSTM && c.Classes != c.Vocab:
		return bad("classes", c.Classes, fmt.Sprintf("the vocabulary size (%d): the top-down classifier predicts words", c.Vocab))
	case c.Cell == RNTN && int64(c.Hidden)*int64(c.Hidden)*int64(c.Hidden) > 1<<30:
		return bad("hidden_size", c.Hidden, "at most 1024 for an RNTN (V has 4d³ values)")
	case int64(c.Vocab)*int64(c.Embed) > 1<<32 || int64(c.Classes)*int64(c.Hidden) > 1<<32:
		return fmt.Errorf("%w: a weight matrix has more than 2^32 elements", ErrShape)
	}
	return nil
}

// Model holds a tree model's weights, float32 and row-major in PyTorch's
// layout (see the package documentation for the equations and names).
// A Model whose slices are nil has shapes only (a dry model, for traffic
// analysis).
type Model struct {
	Config
	Embedding []float32 // [Vocab][E]

	// TreeRNN, RNTN:  W [H][2H], B [H]; RNTN also V [2H][2H][H].
	// BinaryLSTM:     W [3H][E], B [3H] (leaf gates i, o, u);
	//                 U [5H][2H], UB [5H] (inner gates i, f_l, f_r, o, u).
	// ChildSumLSTM:   W [4H][E], B [4H] (gates i, o, u, f);
	//                 U [3H][H] (U_iou), UF [H][H] (U_f).
	// TopDownLSTM:    W [4H][E] (weight_ih), U [4H][H] (weight_hh),
	//                 B [4H] (bias_ih + bias_hh, gates i, f, g, o);
	//                 Grow [2][H], GrowB [2] (argmax 1: another child).
	W, B, U, UB, UF, V []float32
	Grow, GrowB        []float32

	ClsW []float32 // [Classes][H]
	ClsB []float32 // [Classes]

	mem *hugepage.Arena // see Memory
}

// Memory is the arena that owns the model's matrices of
// hugepage.MinBytes or more, mapped on huge pages where the host has
// them (NewModel places them there): nil for a dry model or one built by
// hand. Code that keeps one of the model's slices beyond the model (a
// schedule's program) must keep the arena too.
func (m *Model) Memory() *hugepage.Arena { return m.mem }

// Tensor is one parameter of a model: its shape and storage.
type Tensor struct {
	Shape []int
	Data  *[]float32
}

// Tensors lists the model's parameters by their PyTorch state_dict names
// (the TopDownLSTM's bias_ih and bias_hh are summed into B on loading, so
// they are not listed here; see models.TreeParams).
func (m *Model) Tensors() map[string]Tensor {
	E, H, C := m.Embed, m.Hidden, m.Classes
	t := map[string]Tensor{
		"embedding.weight":  {[]int{m.Vocab, E}, &m.Embedding},
		"classifier.weight": {[]int{C, H}, &m.ClsW},
		"classifier.bias":   {[]int{C}, &m.ClsB},
	}
	switch m.Cell {
	case TreeRNN, RNTN:
		t["cell.W.weight"] = Tensor{[]int{H, 2 * H}, &m.W}
		t["cell.W.bias"] = Tensor{[]int{H}, &m.B}
		if m.Cell == RNTN {
			t["cell.V"] = Tensor{[]int{2 * H, 2 * H, H}, &m.V}
		}
	case BinaryLSTM:
		t["cell.W.weight"] = Tensor{[]int{3 * H, E}, &m.W}
		t["cell.W.bias"] = Tensor{[]int{3 * H}, &m.B}
		t["cell.U.weight"] = Tensor{[]int{5 * H, 2 * H}, &m.U}
		t["cell.U.bias"] = Tensor{[]int{5 * H}, &m.UB}
	case ChildSumLSTM:
		t["cell.W.weight"] = Tensor{[]int{4 * H, E}, &m.W}
		t["cell.W.bias"] = Tensor{[]int{4 * H}, &m.B}
		t["cell.U_iou.weight"] = Tensor{[]int{3 * H, H}, &m.U}
		t["cell.U_f.weight"] = Tensor{[]int{H, H}, &m.UF}
	case TopDownLSTM:
		t["cell.lstm.weight_ih"] = Tensor{[]int{4 * H, E}, &m.W}
		t["cell.lstm.weight_hh"] = Tensor{[]int{4 * H, H}, &m.U}
		t["cell.grow.weight"] = Tensor{[]int{2, H}, &m.Grow}
		t["cell.grow.bias"] = Tensor{[]int{2}, &m.GrowB}
	}
	return t
}

// NewModel makes a model of shape cfg with zero weights, or a dry one
// (shapes only) when dry is set. A matrix of hugepage.MinBytes or more is
// mapped on huge pages where the host has them, owned by the model's
// Memory.
func NewModel(cfg Config, dry bool) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	if dry {
		return m, nil
	}
	m.mem = new(hugepage.Arena)
	for _, t := range m.Tensors() {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		*t.Data = m.mem.Floats(n)
	}
	if cfg.Cell == TopDownLSTM {
		m.B = make([]float32, 4*cfg.Hidden)
	}
	return m, nil
}

// Dry reports whether the model has shapes but no weights.
func (m *Model) Dry() bool { return m.Embedding == nil }

// WeightBytes is the size of the model's parameters (embedding included).
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, t := range m.Tensors() {
		e := int64(1)
		for _, d := range t.Shape {
			e *= int64(d)
		}
		n += e
	}
	if m.Cell == TopDownLSTM {
		n += 4 * int64(m.Hidden)
	}
	return 4 * n
}

// Options returns parser options for this model: its arity and classes.
func (m *Model) Options(v *Vocab) Options {
	o := Options{Vocab: v, Arity: m.Cell.Arity()}
	if m.Cell != TopDownLSTM {
		o.Classes = m.Classes
	}
	return o
}

// Check verifies that t can run on m: node arity, word ids inside the
// vocabulary, a word at every leaf, and (TreeRNN, RNTN, BinaryLSTM) no word
// at inner nodes, which those cells cannot read. Errors name the node.
func (m *Model) Check(t *Tree) error {
	if m.Cell.Dynamic() {
		return fmt.Errorf("%w: %v generates its trees; it does not read them", ErrStructure, m.Cell)
	}
	if len(t.Nodes) == 0 {
		return &Error{Err: ErrStructure, Msg: "empty tree"}
	}
	ar := m.Cell.Arity()
	for i := range t.Nodes {
		n := &t.Nodes[i]
		switch {
		case n.Word >= int32(m.Vocab) || n.Word < -1:
			return errNode(ErrStructure, i, "word id %d outside the vocabulary of %d", n.Word, m.Vocab)
		case len(n.Kids) == 0 && n.Word < 0:
			return errNode(ErrStructure, i, "leaf without a word")
		case len(n.Kids) > 0 && ar > 0 && len(n.Kids) != ar:
			return errNode(ErrStructure, i, "%d children, %v takes %d", len(n.Kids), m.Cell, ar)
		case len(n.Kids) > 0 && ar > 0 && n.Word >= 0:
			return errNode(ErrStructure, i, "inner node with a word, which %v does not read", m.Cell)
		}
	}
	return nil
}
