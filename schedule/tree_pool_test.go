package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"rnnserve/internal/invariants"
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

// NodeOutputs lists every node's h, c (none for cells without memory) and
// class probabilities (none for nodes without), tree after tree, nodes in
// post-order. (A test helper, for the external tests too.)
func NodeOutputs(tp *TreePlan) (h, c, probs []float32) {
	for i, tr := range tp.Trees {
		for j := range tr.Nodes {
			h = append(h, tp.H(i, j)...)
			c = append(c, tp.C(i, j)...)
			probs = append(probs, tp.Probs(i, j)...)
		}
	}
	return h, c, probs
}

// treeOutputs is NodeOutputs as one list.
func treeOutputs(tp *TreePlan) [][]float32 {
	h, c, pr := NodeOutputs(tp)
	return [][]float32{h, c, pr}
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

// RandomTrees draws n trees of 1..maxLeaves leaves over words 0..vocab-1
// (vocab at most 26) for cell: binary trees of mixed shapes, or, for
// Child-Sum, trees of any arity from random parent pointers with a word at
// every leaf and at some inner nodes. (A test helper, for the external
// tests too.)
func RandomTrees(rng *rand.Rand, cell tree.Cell, n, maxLeaves, vocab int) []*tree.Tree {
	word := func(int) int32 { return int32(rng.IntN(vocab)) }
	letters := make([]string, vocab)
	for i := range letters {
		letters[i] = "w" + string(rune('a'+i))
	}
	v, err := tree.NewVocab(letters, "")
	if err != nil {
		panic(err)
	}
	var out []*tree.Tree
	for range n {
		leaves := 1 + rng.IntN(maxLeaves)
		if cell != tree.ChildSumLSTM {
			out = append(out, tree.RandomBinary(rng, leaves, 2*rng.Float64(), word))
			continue
		}
		// Parent pointers, 1-based, 0 for the root.
		nodes := leaves + rng.IntN(leaves+1)
		parents := make([]int, nodes)
		words := make([]string, nodes)
		for j := range parents {
			if j > 0 {
				parents[j] = rng.IntN(j) + 1
			}
			words[j] = letters[rng.IntN(vocab)]
		}
		tr, err := tree.FromParents(parents, words, nil, tree.Options{Vocab: v})
		if err != nil {
			panic(err)
		}
		for j := range tr.Nodes {
			if len(tr.Nodes[j].Kids) > 0 && rng.IntN(3) == 0 {
				tr.Nodes[j].Word = -1
			}
		}
		out = append(out, tr)
	}
	return out
}

// randomTreeModel is a model of cell with widths that leave scalar tails
// after the kernels' eight lanes, and a source of random trees for it.
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
	return m, func(rng *rand.Rand, n int) []*tree.Tree { return RandomTrees(rng, cell, n, 9, 12) }
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

// acquireReused is TreeProgram.Acquire of trees with opt after the
// program ran, and released, a plan of the same trees in reverse order:
// the plan returned is built into memory another batch used. It fails
// unless the depth-batched executor split the batch into one part per
// worker.
func acquireReused(prog *TreeProgram, trees []*tree.Tree, opt TreeOptions) (*TreePlan, error) {
	rev := make([]*tree.Tree, len(trees))
	for i, tr := range trees {
		rev[len(trees)-1-i] = tr
	}
	q, err := prog.Acquire(rev, TreeOptions{Executor: opt.Executor, Workers: 2})
	if err != nil {
		return nil, err
	}
	if !q.Plan.Dry() {
		if err := q.Run(); err != nil {
			return nil, err
		}
	}
	q.Release()
	if q, err = prog.Acquire(trees, opt); err != nil {
		return nil, err
	}
	if want := min(opt.Workers, len(trees)); opt.Executor == DepthBatched && len(q.partEnd) != want {
		return nil, fmt.Errorf("%d trees, %d workers: %d parts, want %d", len(trees), opt.Workers, len(q.partEnd), want)
	}
	return q, nil
}

// sameTreeRun runs tp again with TreePlan.Run (independent subtrees or
// parts in parallel) and requires the outputs' bits to be those it had.
func sameTreeRun(t *testing.T, tp *TreePlan, outputs func() map[string][]float32) {
	t.Helper()
	before := outputs()
	for k, v := range before {
		before[k] = slices.Clone(v)
	}
	if err := tp.Run(); err != nil {
		t.Fatal(err)
	}
	for k, v := range outputs() {
		sameBits(t, "TreePlan.Run "+k, [][]float32{v}, [][]float32{before[k]})
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
	if raceEnabled || invariants.Enabled {
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
