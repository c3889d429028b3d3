// Package treetraffic reports the memory traffic of tree-model plans: it
// hands a tree plan (package schedule's TreeProgram.Plan, or the steps a
// top-down generation recorded while it ran) to dre.Analyze with the
// working set of its batch, and sweeps the tree shapes of Jeong et al.'s Table 1
// (balanced, moderately balanced and linear trees) over executors and
// batch sizes, reporting DRE per shape.
//
// The working set follows the DRE paper's definition (weights + word
// embeddings + intermediate values), with a tree batch's intermediate
// values being the word vectors its leaves read, every node's state (h, and
// c for the LSTM cells) and the class probabilities computed:
//
//	weights      = every parameter except the embedding
//	embedding    = vocab × E × 4
//	intermediate = 4 × (words·E + nodes·H·(2 if LSTM else 1) + outputs·C)
//
// where words counts the nodes that read a word and outputs the rows of
// probabilities (every node, or the roots).
//
// A plan of a program with word tables (schedule.TreeProgram.WordTable)
// reads neither the embedding nor W; its working set is what it reads
// instead. A Binary TreeLSTM reads its leaves' states from a [vocab][2H]
// table (h and c), a Child-Sum TreeLSTM its nodes' W·e from a [vocab][4H]
// one:
//
//	weights      = every parameter except the embedding and W (and, for
//	               the Binary TreeLSTM, W's bias)
//	embedding    = the tables: vocab × (2H or 4H) × 4
//	intermediate = 4 × (words·(0 or 4H) + nodes·H·2 + outputs·C)
package treetraffic

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"rnnserve/dre"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
)

// Report is the traffic of a tree plan replayed Runs times back to back:
// dre's report, with the batch it describes.
type Report struct {
	Cell     string `json:"cell"`
	Executor string `json:"executor"`
	Trees    int    `json:"trees"`
	Nodes    int    `json:"nodes"`
	Steps    int    `json:"steps"`
	// WordTable: the plan read what depends only on a word from the
	// program's word tables (see the package documentation).
	WordTable bool `json:"word_table"`
	dre.Report
}

// Batch describes what a plan computed, for the working set.
type Batch struct {
	Executor string
	Trees    int
	Nodes    int // nodes computed
	Words    int // nodes that read a word vector (or its row of the word table)
	Outputs  int // rows of class probabilities (or logits) computed
	// WordTable: the plan reads what depends only on a word from the
	// program's word tables, not the embedding and W.
	WordTable bool
}

// ErrOptions is wrapped by invalid sweep options.
var ErrOptions = errors.New("treetraffic: invalid options")

// Analyze replays p, a plan over m's weights, through the cache of opt
// (dre.Analyze with the tree batch's working set).
func Analyze(m *tree.Model, p *schedule.Plan, b Batch, opt dre.Options) (*Report, error) {
	r, err := dre.Analyze(p, WorkingSetOf(m, b), opt)
	if err != nil {
		return nil, err
	}
	return &Report{Cell: m.Cell.String(), Executor: b.Executor, Trees: b.Trees, Nodes: b.Nodes, Steps: len(p.Steps),
		WordTable: b.WordTable, Report: *r}, nil
}

// WorkingSetOf computes the working set of batch b on m (see the package
// documentation).
func WorkingSetOf(m *tree.Model, b Batch) dre.WorkingSet {
	emb := 4 * int64(m.Vocab) * int64(m.Embed)
	weights := m.WeightBytes() - emb
	word := int64(m.Embed) // floats a node reads for its word
	if b.WordTable {
		H := int64(m.Hidden)
		switch m.Cell {
		case tree.BinaryLSTM: // leaves' h and c; W [3H][E] and its bias unread
			weights -= 4 * 3 * H * (int64(m.Embed) + 1)
			emb, word = 4*int64(m.Vocab)*2*H, 0
		case tree.ChildSumLSTM: // W·e; W [4H][E] unread
			weights -= 4 * 4 * H * int64(m.Embed)
			emb, word = 4*int64(m.Vocab)*4*H, 4*H
		}
	}
	state := int64(1)
	if m.Cell.HasMemory() {
		state = 2
	}
	return dre.NewWorkingSet(weights, emb,
		4*(int64(b.Words)*word+int64(b.Nodes)*int64(m.Hidden)*state+int64(b.Outputs)*int64(m.Classes)))
}

// AnalyzePlan is Analyze for a fixed-structure tree plan.
func AnalyzePlan(m *tree.Model, tp *schedule.TreePlan, opt dre.Options) (*Report, error) {
	b := Batch{Executor: tp.Executor.String(), Trees: len(tp.Trees), Nodes: tp.Nodes(), WordTable: tp.WordTable}
	for _, t := range tp.Trees {
		for _, n := range t.Nodes {
			if n.Word >= 0 {
				b.Words++
			}
		}
	}
	b.Outputs = len(tp.Trees)
	if tp.AllNodes {
		b.Outputs = b.Nodes
	}
	return Analyze(m, tp.Plan, b, opt)
}

// SweepOptions configure Sweep. Zero values mean the defaults noted.
type SweepOptions struct {
	Cell    tree.Cell // default BinaryLSTM
	Embed   int       // default 300
	Hidden  int       // default 150
	Vocab   int       // default 5000
	Classes int       // default 5
	Leaves  int       // leaves of every tree (default 19, as SST sentences)
	// Batches lists the batch sizes (default 1, 10, 25, as Table 1).
	Batches []int
	// Executors (default both).
	Executors []schedule.TreeExecutor
	// Shapes (default balanced, moderate, linear).
	Shapes []tree.Shape
	// AllNodes computes class probabilities at every node.
	AllNodes bool
	// MaxWordTable bounds the word tables of a Binary TreeLSTM as
	// schedule.TreeProgramOptions does: 0 means the default (the tables
	// the server would build), negative none (every leaf runs its input
	// projection and gates, as the recursion paper's executors do).
	MaxWordTable int64
	// DRE sets the cache and runs (dre's defaults: 12 MiB fully
	// associative LRU, 100 runs).
	DRE  dre.Options
	Seed uint64
}

// EnsureDefaults fills zero fields.
func (o *SweepOptions) EnsureDefaults() {
	if o.Cell == 0 {
		o.Cell = tree.BinaryLSTM
	}
	if o.Hidden == 0 {
		o.Hidden = 150
	}
	if o.Embed == 0 {
		o.Embed = 300
		if o.Cell == tree.TreeRNN || o.Cell == tree.RNTN {
			o.Embed = o.Hidden
		}
	}
	if o.Vocab == 0 {
		o.Vocab = 5000
	}
	if o.Classes == 0 {
		o.Classes = 5
	}
	if o.Leaves == 0 {
		o.Leaves = 19
	}
	if o.Batches == nil {
		o.Batches = []int{1, 10, 25}
	}
	if o.Executors == nil {
		o.Executors = []schedule.TreeExecutor{schedule.Recursive, schedule.DepthBatched}
	}
	if o.Shapes == nil {
		o.Shapes = []tree.Shape{tree.Balanced, tree.Moderate, tree.Linear}
	}
	o.DRE.EnsureDefaults()
}

// Row is one point of a sweep.
type Row struct {
	Shape  string  `json:"shape"`
	Batch  int     `json:"batch"`
	Height float64 `json:"mean_height"`
	Report
}

// Sweep builds, for every shape, batch size and executor, a batch of
// trees of that shape (Moderate draws a random split per node, seeded) on a
// dry model (shapes only, no weights), and reports its traffic and DRE.
//
// Signature for cmd/dresim: func Sweep(SweepOptions) ([]Row, error).
func Sweep(opt SweepOptions) ([]Row, error) {
	opt.EnsureDefaults()
	if err := opt.DRE.Validate(); err != nil {
		return nil, err
	}
	if opt.Cell.Arity() != 2 {
		return nil, fmt.Errorf("%w: the shapes are binary trees; cell %v is not binary", ErrOptions, opt.Cell)
	}
	if opt.Leaves < 1 || opt.Leaves > 1<<16 {
		return nil, fmt.Errorf("%w: leaves %d, want 1..65536", ErrOptions, opt.Leaves)
	}
	m, err := tree.NewModel(tree.Config{Cell: opt.Cell, Vocab: opt.Vocab, Embed: opt.Embed, Hidden: opt.Hidden, Classes: opt.Classes}, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	prog, err := schedule.NewTreeProgramWith(m, schedule.TreeProgramOptions{MaxWordTable: opt.MaxWordTable})
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, shape := range opt.Shapes {
		for _, B := range opt.Batches {
			if B < 1 || B > schedule.MaxBatch {
				return nil, fmt.Errorf("%w: batch %d", ErrOptions, B)
			}
			rng := rand.New(rand.NewPCG(opt.Seed, uint64(shape)<<32|uint64(B)))
			trees := make([]*tree.Tree, B)
			height := 0
			for i := range trees {
				trees[i] = tree.Binary(shape, opt.Leaves, rng, func(int) int32 { return int32(rng.IntN(opt.Vocab)) })
				height += trees[i].Height()
			}
			for _, ex := range opt.Executors {
				tp, err := prog.Plan(trees, schedule.TreeOptions{Executor: ex, AllNodes: opt.AllNodes, Workers: 1})
				if err != nil {
					return nil, err
				}
				r, err := AnalyzePlan(m, tp, opt.DRE)
				if err != nil {
					return nil, err
				}
				rows = append(rows, Row{Shape: shape.String(), Batch: B, Height: float64(height) / float64(B), Report: *r})
			}
		}
	}
	return rows, nil
}
