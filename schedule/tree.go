package schedule

import (
	"errors"
	"fmt"

	"rnnserve/internal/f32"
	"rnnserve/rnn/tree"
)

// TreeExecutor selects how a batch of trees is run.
type TreeExecutor uint8

const (
	// Recursive runs every node as its own steps, in post-order; on
	// several workers, whole subtrees in parallel, then the nodes above
	// them (see TreePlan). It is the only executor that can run a model whose
	// structure is decided while it runs (TreeProgram.Generate).
	Recursive TreeExecutor = iota + 1
	// DepthBatched runs, height by height, all nodes of that height across
	// the batch as one matrix-matrix product per cell (TensorFlow Fold's
	// dynamic batching), gathering the children's states into a reused
	// buffer. It needs the whole structure before it starts.
	DepthBatched
)

// ErrUnknownExecutor is returned for an executor name other than
// "recursive" or "depth_batched".
var ErrUnknownExecutor = errors.New("schedule: unknown tree executor")

// ErrDynamicTree is returned by TreeProgram.Plan for a model that generates
// its tree while it runs: only the recursive executor's Generate runs it.
var ErrDynamicTree = errors.New("schedule: the model decides its tree's structure while it runs; only TreeProgram.Generate (recursive) runs it")

// ParseTreeExecutor returns the executor named s.
func ParseTreeExecutor(s string) (TreeExecutor, error) {
	switch s {
	case "recursive":
		return Recursive, nil
	case "depth_batched", "depth-batched", "fold":
		return DepthBatched, nil
	}
	return 0, fmt.Errorf("%w %q (want recursive or depth_batched)", ErrUnknownExecutor, s)
}

func (e TreeExecutor) String() string {
	switch e {
	case Recursive:
		return "recursive"
	case DepthBatched:
		return "depth_batched"
	}
	return fmt.Sprintf("TreeExecutor(%d)", uint8(e))
}

// MaxTreeBatchNodes bounds the nodes of one tree plan, all trees together.
const MaxTreeBatchNodes = 1 << 22

// TreeProgram is a tree model prepared for plans: its weight buffers. It
// is immutable and safe for concurrent use; each batch gets its own plan
// (Plan), or one released by an earlier batch (Acquire).
type TreeProgram struct {
	Model *tree.Model
	plans chan *TreePlan // released plans kept for reuse (Acquire)

	weightList
	emb, w, b, u, ub, uf, vt     *Buffer
	grow, growB, clsW, clsB, sum *Buffer
	// Word tables (NewTreeProgramWith), or nil: W·e of every word
	// (Child-Sum), a leaf's h and c for every word (Binary TreeLSTM).
	wordTable, leafH, leafC *Buffer
	dry                     bool
	// rate is the measured time per flop of the program's plans under
	// each executor (generation's under Recursive), which decides how
	// many parts a plan is split into when its options leave it open
	// (work.go): the depth-batched executor's products of many rows do
	// two to four times the recursive one's flops a second.
	rate [DepthBatched + 1]workRate
}

// TreeProgramOptions configure NewTreeProgramWith.
type TreeProgramOptions struct {
	// MaxWordTable bounds the bytes of the word tables of a Binary or
	// Child-Sum TreeLSTM (see NewTreeProgramWith): 0 means
	// DefaultMaxWordTable, a negative value never builds them.
	MaxWordTable int64
}

// DefaultMaxWordTable is the most bytes of word tables NewTreeProgram
// builds: 64 MiB, a vocabulary of 55,000 words for a Binary TreeLSTM of
// hidden 150 (h and c, 300 floats a word). The benchmark model
// (vocabulary 5000) needs 6 MB, SST's 21,700 words 26 MB.
const DefaultMaxWordTable = 64 << 20

// NewTreeProgram prepares m with the default options (NewTreeProgramWith).
func NewTreeProgram(m *tree.Model) (*TreeProgram, error) {
	return NewTreeProgramWith(m, TreeProgramOptions{})
}

// NewTreeProgramWith prepares m. An RNTN gets a transposed copy of V
// ("cell.V^T", [2H·H][2H]) so that its product runs as A·Wᵀ like every
// other; a dry model gives a dry program, whose plans can only be walked.
//
// What depends only on a node's word is computed here once for every word
// of the vocabulary, when its tables take at most opt.MaxWordTable bytes,
// by the kernels the plans would run, so a table's row holds the bits a
// plan computes for that word (f32.GemmNT computes every element in one
// order whatever the number of rows, and the gate kernels every unit of a
// row the same way wherever the row sits):
//
//   - Binary TreeLSTM: a leaf's state, "cell.leaf.h" and "cell.leaf.c"
//     [Vocab][H]: its gates W·e + b and their nonlinearities. A plan
//     gathers its leaves' rows into their state rows instead of gathering
//     word vectors, multiplying them by W and running the gates.
//   - Child-Sum TreeLSTM: the input projection W·e (without the bias),
//     "cell.W·embedding" [Vocab][4H]. A plan gathers its nodes' rows (a
//     single node reads its row in place) instead of gathering word
//     vectors and multiplying them by W.
//
// WordTable reports whether p has them.
func NewTreeProgramWith(m *tree.Model, opt TreeProgramOptions) (*TreeProgram, error) {
	if err := m.Config.Validate(); err != nil {
		return nil, err
	}
	p := &TreeProgram{Model: m, dry: m.Dry(), plans: make(chan *TreePlan, keptPlans)}
	E, H, C := m.Embed, m.Hidden, m.Classes
	mem := m.Memory()
	p.emb = p.weight("embedding.weight", m.Vocab*E, m.Embedding, mem)
	switch m.Cell {
	case tree.TreeRNN:
		p.w = p.weight("cell.W.weight", H*2*H, m.W, mem)
		p.b = p.weight("cell.W.bias", H, m.B, mem)
	case tree.RNTN:
		var vt []float32
		if !p.dry {
			vt = make([]float32, 4*H*H*H)
			for i := 0; i < 2*H; i++ {
				for j := 0; j < 2*H; j++ {
					for k := 0; k < H; k++ {
						vt[(j*H+k)*2*H+i] = m.V[(i*2*H+j)*H+k]
					}
				}
			}
		}
		p.vt = p.derived("cell.V^T", 4*H*H*H, vt)
		p.w = p.weight("cell.W.weight", H*2*H, m.W, mem)
		p.b = p.weight("cell.W.bias", H, m.B, mem)
	case tree.BinaryLSTM:
		p.w = p.weight("cell.W.weight", 3*H*E, m.W, mem)
		p.b = p.weight("cell.W.bias", 3*H, m.B, mem)
		p.u = p.weight("cell.U.weight", 5*H*2*H, m.U, mem)
		p.ub = p.weight("cell.U.bias", 5*H, m.UB, mem)
	case tree.ChildSumLSTM:
		p.w = p.weight("cell.W.weight", 4*H*E, m.W, mem)
		p.b = p.weight("cell.W.bias", 4*H, m.B, mem)
		p.u = p.weight("cell.U_iou.weight", 3*H*H, m.U, mem)
		p.uf = p.weight("cell.U_f.weight", H*H, m.UF, mem)
	case tree.TopDownLSTM:
		p.w = p.weight("cell.lstm.weight_ih", 4*H*E, m.W, mem)
		p.u = p.weight("cell.lstm.weight_hh", 4*H*H, m.U, mem)
		p.b = p.weight("cell.lstm.bias", 4*H, m.B, mem)
		p.grow = p.weight("cell.grow.weight", 2*H, m.Grow, mem)
		p.growB = p.weight("cell.grow.bias", 2, m.GrowB, mem)
	}
	p.clsW = p.weight("classifier.weight", C*H, m.ClsW, mem)
	p.clsB = p.weight("classifier.bias", C, m.ClsB, mem)
	if W := wordTableWidth(m); W > 0 && 4*int64(m.Vocab)*int64(W) <= opt.maxWordTable() {
		p.wordTables()
	}
	if err := checkOwners(mem, p.weights); err != nil {
		return nil, err
	}
	return p, nil
}

// wordTableWidth is the floats per word of m's word tables (see
// NewTreeProgramWith), or 0 for cells without them.
func wordTableWidth(m *tree.Model) int {
	switch m.Cell {
	case tree.BinaryLSTM:
		return 2 * m.Hidden
	case tree.ChildSumLSTM:
		return 4 * m.Hidden
	}
	return 0
}

// wordTables computes p's word tables (see NewTreeProgramWith).
func (p *TreeProgram) wordTables() {
	m := p.Model
	V, E, H := m.Vocab, m.Embed, m.Hidden
	G := 4 * H
	if m.Cell == tree.BinaryLSTM {
		G = 3 * H
	}
	var wx, h, c []float32
	if !p.dry {
		wx = make([]float32, V*G)
		f32.GemmNT(V, G, E, m.Embedding, E, m.W, E, 0, wx, G)
	}
	if m.Cell == tree.ChildSumLSTM {
		p.wordTable = p.derived("cell.W·embedding", V*G, wx)
		return
	}
	if !p.dry {
		h, c = make([]float32, V*H), make([]float32, V*H)
		tree.BinaryLeaf(V, H, wx, m.B, h, c, 0)
	}
	p.leafH = p.derived("cell.leaf.h", V*H, h)
	p.leafC = p.derived("cell.leaf.c", V*H, c)
}

func (o TreeProgramOptions) maxWordTable() int64 {
	if o.MaxWordTable == 0 {
		return DefaultMaxWordTable
	}
	return o.MaxWordTable
}

// WordTable reports whether p's plans read what depends only on a node's
// word from tables computed by NewTreeProgramWith: a Binary TreeLSTM
// leaf's state, a Child-Sum node's input projection W·e.
func (p *TreeProgram) WordTable() bool { return p.wordTable != nil || p.leafH != nil }

// TreeOptions select how a tree plan runs and what it computes.
type TreeOptions struct {
	// Executor: Recursive (the default) or DepthBatched.
	Executor TreeExecutor
	// Workers is the number of parts the plan is split into, one per
	// worker of Pool (see TreePlan): 0 means the Pool's size when the
	// plan is predicted to end sooner on it than on its caller (see
	// schedule/work.go; TreePlan.Workers says which), else 1, as without
	// a Pool. Without a Pool the parts run one after another on the
	// calling goroutine (a dry plan may have any number: it is only
	// walked).
	Workers int
	// Pool runs the parts; it must have Workers workers (when set). The
	// caller owns it (NewPool, Close), and may run Partitioned programs
	// on it too: it runs one job at a time.
	Pool *Pool
	// AllNodes computes class probabilities at every node; otherwise only
	// at the roots.
	AllNodes bool
}

// EnsureDefaults fills zero fields.
func (o *TreeOptions) EnsureDefaults() {
	if o.Executor == 0 {
		o.Executor = Recursive
	}
	if o.Workers == 0 {
		o.Workers = 1
		if o.Pool != nil {
			o.Workers = o.Pool.Workers()
		}
	}
}

// Validate reports an invalid setting.
func (o TreeOptions) Validate() error {
	if o.Executor != Recursive && o.Executor != DepthBatched {
		return fmt.Errorf("%w %v", ErrUnknownExecutor, o.Executor)
	}
	if o.Workers < 1 || o.Workers > 1024 {
		return fmt.Errorf("schedule: tree workers %d, want 1..1024", o.Workers)
	}
	if o.Pool != nil && o.Pool.Workers() != o.Workers {
		return fmt.Errorf("%w: %d tree workers but the pool has %d", ErrPool, o.Workers, o.Pool.Workers())
	}
	return nil
}
