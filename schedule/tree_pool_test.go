package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"rnnserve/internal/cputime"
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

// ProcessCPU is cputime.Process, for the external tests' benchmarks.
func ProcessCPU() (time.Duration, bool) { return cputime.Process() }

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
	if want := min(q.Workers, len(trees)); opt.Executor == DepthBatched && partsOf(q) != want {
		return nil, fmt.Errorf("%d trees, %d workers: %d parts, want %d", len(trees), q.Workers, partsOf(q), want)
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
		if len(parts) != c.parts || partsOf(tp) != c.parts {
			t.Fatalf("%d trees, %d workers: %d parts (steps on %d workers), want %d", c.trees, c.workers, len(parts), partsOf(tp), c.parts)
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
		// Each part's steps are consecutive, in part order, all in one
		// phase.
		for i, s := range tp.Plan.Steps {
			if s.Phase != 0 || i > 0 && s.Worker != tp.Plan.Steps[i-1].Worker && s.Worker != tp.Plan.Steps[i-1].Worker+1 {
				t.Fatalf("%d trees, %d workers: step %d is worker %d's in phase %d, after worker %d's", c.trees, c.workers, i, s.Worker, s.Phase, tp.Plan.Steps[max(i-1, 0)].Worker)
			}
		}
	}
}

// TestTreeAcquireAllocs checks that a batch run through Acquire, Run and
// Release allocates nothing once its program has released a plan large
// enough: on one worker nothing at all, on a pool of two (where the host
// has two cores) nothing but the pool's record of the job, what an empty
// job allocates.
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
	opts := []TreeOptions{{Workers: 1}}
	job := 0.0
	if pool := twoWorkers(t); pool != nil {
		opts = append(opts, TreeOptions{Workers: 2, Pool: pool})
		empty := func(int, int) {}
		job = testing.AllocsPerRun(20, func() { pool.Phases(1, empty) })
		t.Logf("an empty job on a pool of two allocates %v times", job)
	}
	for _, opt := range opts {
		for _, ex := range []TreeExecutor{Recursive, DepthBatched} {
			opt.Executor, opt.AllNodes = ex, true
			want := 0.0
			if opt.Pool != nil {
				want = job
			}
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
			if n := testing.AllocsPerRun(20, run); n != want {
				t.Errorf("%v, pool %v: %v allocations per batch, want %v", ex, opt.Pool != nil, n, want)
			}
		}
	}
}

// intsOf is s as int32s.
func intsOf(s []int) []int32 {
	out := make([]int32, len(s))
	for i, v := range s {
		out[i] = int32(v)
	}
	return out
}

// checkChunkWrites fails if two chunks of one phase of p write the same
// bytes of a buffer (each region taken from its first byte to its last).
func checkChunkWrites(t *testing.T, what string, p *Plan) {
	t.Helper()
	type span struct{ lo, hi int64 }
	type key struct {
		buf   *Buffer
		phase int
	}
	starts := p.chunks.start
	all := map[key][]span{}
	for c, lo := range starts {
		hi := int32(len(p.Steps))
		if c+1 < len(starts) {
			hi = starts[c+1]
		}
		mine := map[key][]span{}
		for i := lo; i < hi; i++ {
			for _, r := range p.Steps[i].Writes() {
				k := key{r.Buf, p.Steps[i].Phase}
				mine[k] = append(mine[k], span{r.Off, r.Off + int64(r.Count-1)*r.Stride + r.Len})
			}
		}
		// The chunk's writes to a buffer merged, then added to all.
		for k, ss := range mine {
			slices.SortFunc(ss, func(a, b span) int { return int(a.lo - b.lo) })
			m := ss[:1]
			for _, x := range ss[1:] {
				if last := &m[len(m)-1]; x.lo <= last.hi {
					last.hi = max(last.hi, x.hi)
				} else {
					m = append(m, x)
				}
			}
			all[k] = append(all[k], m...)
		}
	}
	for k, ss := range all {
		slices.SortFunc(ss, func(a, b span) int { return int(a.lo - b.lo) })
		for i := 1; i < len(ss); i++ {
			if ss[i].lo < ss[i-1].hi {
				t.Fatalf("%s: two chunks of phase %d write bytes [%d, %d) of %s", what, k.phase, ss[i].lo, min(ss[i].hi, ss[i-1].hi), k.buf.Name)
			}
			ss[i].hi = max(ss[i].hi, ss[i-1].hi)
		}
	}
}

// partsOf is the number of workers tp's steps are split over.
func partsOf(tp *TreePlan) int {
	seen := map[int]bool{}
	for _, s := range tp.Plan.Steps {
		seen[s.Worker] = true
	}
	return len(seen)
}

// TestRecursiveCut checks how the recursive executor splits a batch over
// its parts (cutRecursive): every node after its children, in its part
// and phase or in an earlier phase; every part's steps consecutive within
// a phase; the subtrees of phase 0 no larger than a part's share, and the
// parts' shares of it within one subtree of each other; no phase 1 for a
// batch of small trees, and a single large tree split over the parts; a
// part's chunks of at least minChunkNodes nodes (but its last), each
// node's children in its chunk or an earlier phase, the plan's chunks
// those of its nodes; a row of scratch per chunk, and no two chunks of a
// phase writing the same bytes.
func TestRecursiveCut(t *testing.T) {
	m, trees := randomTreeModel(t, tree.ChildSumLSTM)
	prog, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	word := func(int) int32 { return int32(rng.IntN(12)) }
	big, chain := tree.Binary(tree.Balanced, 16, rng, word), tree.Binary(tree.Linear, 16, rng, word)
	for _, c := range []struct {
		batch   []*tree.Tree
		workers int
	}{{trees(rng, 1), 2}, {trees(rng, 3), 2}, {trees(rng, 25), 2}, {trees(rng, 25), 3}, {trees(rng, 7), 5}, {[]*tree.Tree{big}, 2}, {[]*tree.Tree{big}, 3}, {[]*tree.Tree{chain}, 2}, {[]*tree.Tree{big, chain}, 4}} {
		tp, err := prog.Plan(c.batch, TreeOptions{Executor: Recursive, Workers: c.workers, AllNodes: true})
		if err != nil {
			t.Fatal(err)
		}
		N, W := tp.Nodes(), c.workers
		what := fmt.Sprintf("%d trees, %d nodes, %d parts", len(c.batch), N, W)
		b := &tp.b
		at := func(g int32) (place, part, phase int32) {
			r := tp.rowOf[g]
			return r, b.part[r], b.phase[r]
		}
		for g := range int32(N) {
			r, part, phase := at(g)
			for _, k := range b.flat[g].Kids {
				kr, kpart, kphase := at(tp.offsets[b.treeOf[g]] + k)
				if !(kphase < phase || kphase == phase && kpart == part && kr < r) {
					t.Fatalf("%s: node at %d (part %d, phase %d) has a child at %d (part %d, phase %d)", what, r, part, phase, kr, kpart, kphase)
				}
			}
		}
		// Chunks: a part's first place begins one, and so does every
		// place in cutAt; a child in its parent's phase is in its chunk.
		chunk := make([]int, N)
		ci, cut := -1, 0
		for r := range N {
			if r == 0 || b.part[r] != b.part[r-1] || b.phase[r] != b.phase[r-1] || cut < len(b.cutAt) && b.cutAt[cut] == int32(r) {
				ci++
			}
			if cut < len(b.cutAt) && b.cutAt[cut] == int32(r) {
				cut++
			}
			chunk[r] = ci
		}
		for g := range int32(N) {
			r, _, phase := at(g)
			for _, k := range b.flat[g].Kids {
				kr, _, kphase := at(tp.offsets[b.treeOf[g]] + k)
				if kphase == phase && chunk[kr] != chunk[r] {
					t.Fatalf("%s: node at %d (chunk %d) has a child at %d in chunk %d of its phase", what, r, chunk[r], kr, chunk[kr])
				}
			}
		}
		for i, r := range b.cutAt {
			if i > 0 && r <= b.cutAt[i-1] || r == 0 {
				t.Fatalf("%s: chunk cuts %v not ascending after place 0", what, b.cutAt)
			}
			if n := slices.Index(chunk, chunk[r-1]); int(r)-n < minChunkNodes {
				t.Errorf("%s: a chunk of %d nodes before place %d, want at least %d", what, int(r)-n, r, minChunkNodes)
			}
		}
		if got := len(tp.Plan.chunks.start); got != ci+1 {
			t.Errorf("%s: the plan has %d chunks, its nodes %d", what, got, ci+1)
		}
		// Scratch: a row per chunk, the chunk's, and no two chunks of a
		// phase write the same bytes (they may run at once).
		if !slices.Equal(b.slot, intsOf(chunk)) {
			t.Errorf("%s: scratch rows %v, want the chunks' %v", what, b.slot, chunk)
		}
		if got, want := b.g.Elems, (ci+1)*4*m.Hidden; got != want {
			t.Errorf("%s: gates of %d floats, want %d (a row per chunk)", what, got, want)
		}
		checkChunkWrites(t, what, tp.Plan)
		if len(c.batch) == 25 && len(b.cutAt) == 0 {
			t.Errorf("%s: no part cut into chunks", what)
		}
		if W > 1 && slices.IndexFunc(c.batch, func(tr *tree.Tree) bool { return tr.Len() > (N+W-1)/W }) < 0 {
			// The one-pass cut of small trees is the general one's.
			order, part, phase, cuts := slices.Clone(b.order), slices.Clone(b.part), slices.Clone(b.phase), slices.Clone(b.cutAt)
			b.cutAt = b.cutAt[:0]
			b.cutSubtrees(W, int32((N+W-1)/W))
			if !slices.Equal(order, b.order) || !slices.Equal(part, b.part) || !slices.Equal(phase, b.phase) || !slices.Equal(cuts, b.cutAt) {
				t.Errorf("%s: cutWholeTrees gave order %v parts %v phases %v cuts %v, cutSubtrees %v %v %v %v", what, order, part, phase, cuts, b.order, b.part, b.phase, b.cutAt)
			}
		}
		for i, s := range tp.Plan.Steps[1:] {
			prev := tp.Plan.Steps[i]
			if s.Phase < prev.Phase || s.Phase == prev.Phase && s.Worker < prev.Worker {
				t.Fatalf("%s: step %d (worker %d, phase %d) after worker %d's of phase %d", what, i+1, s.Worker, s.Phase, prev.Worker, prev.Phase)
			}
		}
		share := (N + W - 1) / W
		counts := make([]int, W)
		above, largest := 0, 0
		for r := range N {
			if b.phase[r] == 0 {
				counts[b.part[r]]++
			} else {
				above++
			}
		}
		for _, tr := range c.batch {
			largest = max(largest, min(tr.Len(), share))
		}
		if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 2*largest {
			t.Errorf("%s: phase 0 parts of %v nodes (share %d)", what, counts, share)
		}
		if small := slices.IndexFunc(c.batch, func(tr *tree.Tree) bool { return tr.Len() > share }) < 0; small && above > 0 {
			t.Errorf("%s: no tree larger than a share (%d), yet %d nodes in phase 1", what, share, above)
		}
		if len(c.batch) == 1 && N >= 2*W && slices.Contains(counts, 0) {
			t.Errorf("%s: one tree left a part empty: %v", what, counts)
		}
	}
}

// TestChildRowsBounded: a Child-Sum plan's rows for children's states are
// each chunk's own, as many as the chunk's node with the most children
// has, so a node with many children beside many small trees costs its own
// chunk's rows, not every chunk's: they stay within the batch's children
// however the batch is cut (a plan sized chunks × the most children of
// any node grows with their product). The answers are one worker's.
func TestChildRowsBounded(t *testing.T) {
	m, trees := randomTreeModel(t, tree.ChildSumLSTM)
	prog, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	const K = 400
	star := &tree.Tree{Nodes: make([]tree.Node, K+1)}
	kids := make([]int32, K)
	for i := range K {
		star.Nodes[i] = tree.Node{Parent: K, Word: int32(rng.IntN(12)), Label: -1}
		kids[i] = int32(i)
	}
	star.Nodes[K] = tree.Node{Kids: kids, Parent: -1, Word: 3, Label: -1}
	batch := append(trees(rng, 60), star)
	children := 0
	for _, tr := range batch {
		for _, n := range tr.Nodes {
			children += len(n.Kids)
		}
	}
	var want [][]float32
	for _, W := range []int{1, 2, 3} {
		tp, err := prog.Plan(batch, TreeOptions{Executor: Recursive, Workers: W, AllNodes: true})
		if err != nil {
			t.Fatal(err)
		}
		b := &tp.b
		most := map[int32]int{}
		for at := range tp.Nodes() {
			s := b.slot[at]
			most[s] = max(most[s], int(tp.nkids[b.order[at]]))
		}
		rows := 0
		for _, k := range most {
			rows += k
		}
		if W > 1 && len(most) < 3 {
			t.Fatalf("%d workers: %d chunks, too few to tell the rows' bound", W, len(most))
		}
		if got := b.kidh.Elems; got != max(rows, 1)*m.Hidden || rows > children {
			t.Errorf("%d workers, %d chunks: children's rows of %d floats, want %d (each chunk's most children, %d rows; the batch has %d children)",
				W, len(most), got, max(rows, 1)*m.Hidden, rows, children)
		}
		checkChunkWrites(t, fmt.Sprintf("%d workers", W), tp.Plan)
		if err := tp.Run(); err != nil {
			t.Fatal(err)
		}
		if W == 1 {
			want = treeOutputs(tp)
		} else {
			sameBits(t, fmt.Sprintf("%d workers", W), treeOutputs(tp), want)
		}
	}
}

// TestRNTNScratchBounded: an RNTN node's tensor term takes a scratch row
// of 2H·H floats (v·V), so a depth-batched height runs it in slices of at
// most rntnScratchBytes of rows a part, not a row per node of the height
// (half a tree's nodes are leaves: one tree of 2048 leaves at H 150 would
// take 368 MB, a request of 64 such trees 23 GB), and a recursive plan on
// several workers has few enough chunks, a row each, that they take at
// most as much and a row for each part's and phase's first. The answers
// are one worker's, bit for bit.
func TestRNTNScratchBounded(t *testing.T) {
	const H = 16
	defer func(b int64) { rntnScratchBytes = b }(rntnScratchBytes)
	const rows = 32
	rntnScratchBytes = rows * 8 * H * H
	m, err := tree.NewModel(tree.Config{Cell: tree.RNTN, Vocab: 12, Embed: H, Hidden: H, Classes: 3}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.RandomizeTree(m, 5)
	prog, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	word := func(int) int32 { return int32(rng.IntN(12)) }
	batch := []*tree.Tree{tree.Binary(tree.Balanced, 1024, rng, word), tree.Binary(tree.Linear, 40, rng, word),
		tree.Binary(tree.Balanced, 1024, rng, word), tree.Binary(tree.Moderate, 300, rng, word)}
	for range 150 { // small trees: many chunks of minChunkNodes
		batch = append(batch, tree.Binary(tree.Moderate, 16, rng, word))
	}
	var want [][]float32
	for _, o := range []TreeOptions{
		{Executor: Recursive, Workers: 1, AllNodes: true},
		{Executor: Recursive, Workers: 4, AllNodes: true},
		{Executor: DepthBatched, Workers: 1, AllNodes: true},
		{Executor: DepthBatched, Workers: 3, AllNodes: true},
	} {
		tp, err := prog.Plan(batch, o)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%v, %d workers", o.Executor, o.Workers)
		limit := o.Workers * rows
		if o.Executor == Recursive {
			limit = rows + 2*o.Workers
		}
		if got := tp.b.u.Elems / (2 * H * H); got > limit {
			t.Errorf("%s: %d rows of v·V scratch, want at most %d", what, got, limit)
		}
		checkChunkWrites(t, what, tp.Plan)
		if err := tp.Run(); err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = treeOutputs(tp)
		} else {
			sameBits(t, what, treeOutputs(tp), want)
		}
	}
}
