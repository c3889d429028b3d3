package schedule

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"rnnserve/models"
	"rnnserve/rnn/tree"
)

// poisonTree fills every float32 buffer of tp's plan but the weights with
// NaN, to the end of its memory, as if an earlier batch had left garbage
// there.
func poisonTree(tp *TreePlan) {
	for _, b := range tp.Plan.Buffers {
		if b.Kind == KindWeight || b.F32 == nil {
			continue
		}
		all := b.F32[:cap(b.F32)]
		for i := range all {
			all[i] = float32(math.NaN())
		}
	}
}

// treeOutputs lists every node's h, c and probabilities (nil where the
// plan has none).
func treeOutputs(tp *TreePlan) [][]float32 {
	var out [][]float32
	for i, tr := range tp.Trees {
		for j := range tr.Nodes {
			out = append(out, tp.H(i, j), tp.C(i, j), tp.Probs(i, j))
		}
	}
	return out
}

func sameBits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: output %d has %d values, want %d", what, i, len(got[i]), len(want[i]))
		}
		for j := range got[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("%s: output %d value %d = %v, want %v", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// randomTreeModel is a model of cell with widths that leave scalar tails
// after the kernels' eight lanes, and random trees for it.
func randomTreeModel(t *testing.T, cell tree.Cell) (*tree.Model, func(rng *rand.Rand, n int) []*tree.Tree) {
	t.Helper()
	E, H := 11, 11
	if cell == tree.BinaryLSTM || cell == tree.ChildSumLSTM {
		E, H = 9, 19
	}
	m, err := tree.NewModel(tree.Config{Cell: cell, Vocab: 12, Embed: E, Hidden: H, Classes: 3}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.RandomizeTree(m, uint64(cell))
	letters := make([]string, 12)
	for k := range letters {
		letters[k] = string(rune('a' + k))
	}
	vocab, err := tree.NewVocab(letters, "")
	if err != nil {
		t.Fatal(err)
	}
	word := func(rng *rand.Rand) func(int) int32 { return func(int) int32 { return int32(rng.IntN(12)) } }
	return m, func(rng *rand.Rand, n int) []*tree.Tree {
		out := make([]*tree.Tree, n)
		for i := range out {
			leaves := 1 + rng.IntN(9)
			if cell != tree.ChildSumLSTM {
				out[i] = tree.RandomBinary(rng, leaves, 2*rng.Float64(), word(rng))
				continue
			}
			// Any arity (parent pointers, 1-based, 0 for the root), a word
			// at every leaf and at some inner nodes.
			nodes := leaves + rng.IntN(leaves+1)
			parents := make([]int, nodes)
			words := make([]string, nodes)
			for j := range parents {
				if j > 0 {
					parents[j] = rng.IntN(j) + 1
				}
				words[j] = letters[rng.IntN(len(letters))]
			}
			ft, err := tree.FromParents(parents, words, nil, tree.Options{Vocab: vocab})
			if err != nil {
				t.Fatal(err)
			}
			for j := range ft.Nodes {
				if len(ft.Nodes[j].Kids) > 0 && rng.IntN(3) == 0 {
					ft.Nodes[j].Word = -1
				}
			}
			out[i] = ft
		}
		return out
	}
}

// TestTreePlanReuseDirty runs plans from Acquire, built into the memory of
// plans released by other batches and poisoned with NaN, and requires the
// bits of a fresh plan: no step reads memory an earlier step of its plan
// did not write. It covers every cell, both executors, one and several
// workers (the depth-batched executor's parts) and both outputs.
func TestTreePlanReuseDirty(t *testing.T) {
	for _, cell := range []tree.Cell{tree.TreeRNN, tree.RNTN, tree.BinaryLSTM, tree.ChildSumLSTM} {
		t.Run(cell.String(), func(t *testing.T) {
			m, trees := randomTreeModel(t, cell)
			prog, err := NewTreeProgram(m)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(cell), 16))
			for round := range 12 {
				opt := TreeOptions{Executor: Recursive, Workers: 1 + round%3, AllNodes: round%4 < 2}
				if round%2 == 1 {
					opt.Executor = DepthBatched
				}
				batch := trees(rng, 1+rng.IntN(7))
				fresh, err := prog.Plan(batch, opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := fresh.Run(); err != nil {
					t.Fatal(err)
				}
				want := treeOutputs(fresh)

				// An unrelated batch first, so that the memory holds its
				// values where it does not hold NaN.
				other, err := prog.Acquire(trees(rng, 1+rng.IntN(7)), opt)
				if err != nil {
					t.Fatal(err)
				}
				poisonTree(other)
				if err := other.Run(); err != nil {
					t.Fatal(err)
				}
				other.Release()
				tp, err := prog.Acquire(batch, opt)
				if err != nil {
					t.Fatal(err)
				}
				if tp != other {
					t.Fatal("Acquire did not reuse the plan just released")
				}
				poisonTree(tp)
				if err := tp.Run(); err != nil {
					t.Fatal(err)
				}
				sameBits(t, opt.Executor.String(), treeOutputs(tp), want)
				tp.Release()
			}
		})
	}
}

// TestTreePartsConform holds the depth-batched executor split into parts
// (three workers), built into a plan released by another batch, to the
// conformance suite's checks on the PyTorch goldens: outputs within 1e-5,
// every step's regions, the dry plan walking as the plan that ran. Then
// TreePlan.Run, which runs the parts in parallel, must give the checked
// run's bits.
func TestTreePartsConform(t *testing.T) {
	for _, name := range []string{"tree_rnn", "rntn", "binary_treelstm", "childsum_treelstm"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "trees", "golden", name)
			m, err := models.LoadTree(filepath.Join(dir, "model.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			dryModel, err := tree.NewModel(m.Net.Config, true)
			if err != nil {
				t.Fatal(err)
			}
			var trees []*tree.Tree
			for _, line := range readTreeLines(t, filepath.Join(dir, "trees.txt")) {
				var tr *tree.Tree
				if strings.HasPrefix(line, "{") {
					tr, err = tree.ParseJSON([]byte(line), m.ParseOptions())
				} else {
					tr, err = tree.ParseBracketed(line, m.ParseOptions())
				}
				if err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				trees = append(trees, tr)
			}
			if len(trees) < 3 {
				t.Fatalf("%d golden trees: too few for three parts", len(trees))
			}
			gold := treeGoldenIO(t, dir)
			want := map[string][]float64{"h": gold["h"], "probs": gold["probs"]}
			if m.Net.Cell.HasMemory() {
				want["c"] = gold["c"]
			}
			opt := TreeOptions{Executor: DepthBatched, AllNodes: true, Workers: 3}
			var tp *TreePlan
			outputs := func() map[string][]float32 {
				var h, c, pr []float32
				for i, tr := range trees {
					for j := range tr.Nodes {
						h = append(h, tp.H(i, j)...)
						c = append(c, tp.C(i, j)...)
						pr = append(pr, tp.Probs(i, j)...)
					}
				}
				return map[string][]float32{"h": h, "c": c, "probs": pr}
			}
			conform(t, conformance{
				build: func(dry bool) (*Plan, error) {
					mm := m.Net
					if dry {
						mm = dryModel
					}
					prog, err := NewTreeProgram(mm)
					if err != nil {
						return nil, err
					}
					// Reversed, then released: the plan that runs is
					// built into memory another batch used.
					rev := make([]*tree.Tree, len(trees))
					for i, tr := range trees {
						rev[len(trees)-1-i] = tr
					}
					q, err := prog.Acquire(rev, TreeOptions{Executor: DepthBatched, Workers: 2})
					if err != nil {
						return nil, err
					}
					if !dry {
						if err := q.Run(); err != nil {
							return nil, err
						}
					}
					q.Release()
					q, err = prog.Acquire(trees, opt)
					if err != nil {
						return nil, err
					}
					if got := len(q.partEnd); got != 3 {
						t.Fatalf("%d parts, want 3", got)
					}
					if !dry {
						tp = q
					}
					return q.Plan, nil
				},
				outputs: outputs,
				want:    want, tol: 1e-5,
			})
			checked := outputs()
			if err := tp.Run(); err != nil {
				t.Fatal(err)
			}
			for k, v := range outputs() {
				sameBits(t, "parallel parts "+k, [][]float32{v}, [][]float32{checked[k]})
			}
		})
	}
}

// TestTreePartition checks how the depth-batched executor splits a batch:
// consecutive trees, every tree in exactly one part, no part empty, one
// part per worker up to one per tree, about as many nodes each.
func TestTreePartition(t *testing.T) {
	m, trees := randomTreeModel(t, tree.BinaryLSTM)
	prog, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for _, c := range []struct{ trees, workers, parts int }{{1, 2, 1}, {2, 2, 2}, {2, 5, 2}, {7, 3, 3}, {40, 2, 2}, {40, 4, 4}} {
		batch := trees(rng, c.trees)
		tp, err := prog.Plan(batch, TreeOptions{Executor: DepthBatched, Workers: c.workers})
		if err != nil {
			t.Fatal(err)
		}
		parts := tp.b.parts
		if len(parts) != c.parts || len(tp.partEnd) != c.parts {
			t.Fatalf("%d trees, %d workers: %d parts (%d step ranges), want %d", c.trees, c.workers, len(parts), len(tp.partEnd), c.parts)
		}
		largest := 0
		for _, tr := range batch {
			largest = max(largest, tr.Len())
		}
		next := 0
		for i, pt := range parts {
			if pt.t0 != next || pt.t1 <= pt.t0 {
				t.Fatalf("%d trees, %d workers: part %d covers trees [%d, %d), want from %d", c.trees, c.workers, i, pt.t0, pt.t1, next)
			}
			next = pt.t1
			nodes := 0
			for _, tr := range batch[pt.t0:pt.t1] {
				nodes += tr.Len()
			}
			// Cuts fall at tree boundaries: a part is within a tree of
			// its share.
			if share := tp.Nodes() / c.parts; c.trees >= 2*c.parts && (nodes > share+largest || nodes < share-largest) {
				t.Errorf("%d trees, %d workers: part %d has %d nodes, share %d (largest tree %d)", c.trees, c.workers, i, nodes, share, largest)
			}
		}
		if next != c.trees {
			t.Fatalf("%d trees, %d workers: parts end at tree %d", c.trees, c.workers, next)
		}
		start := 0
		for i, end := range tp.partEnd {
			for _, s := range tp.Plan.Steps[start:end] {
				if s.Worker != i {
					t.Fatalf("%d trees, %d workers: a step of part %d has Worker %d", c.trees, c.workers, i, s.Worker)
				}
			}
			start = int(end)
		}
	}
}

// TestTreeAcquireAllocs checks that a batch run through Acquire, Run and
// Release allocates nothing once its program has released a plan large
// enough (one worker: more would start goroutines).
func TestTreeAcquireAllocs(t *testing.T) {
	if raceEnabled || invariants {
		t.Skip("the race detector and the region checker allocate")
	}
	m, trees := randomTreeModel(t, tree.BinaryLSTM)
	prog, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	batch := trees(rand.New(rand.NewPCG(4, 4)), 9)
	for _, ex := range []TreeExecutor{Recursive, DepthBatched} {
		opt := TreeOptions{Executor: ex, Workers: 1, AllNodes: true}
		run := func() {
			tp, err := prog.Acquire(batch, opt)
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.Run(); err != nil {
				t.Fatal(err)
			}
			tp.Release()
		}
		run()
		if n := testing.AllocsPerRun(20, run); n != 0 {
			t.Errorf("%v: %v allocations per batch, want 0", ex, n)
		}
	}
}
