package schedule

import (
	"fmt"
	"slices"

	"rnnserve/rnn"
	"rnnserve/rnn/tree"
)

// TreePlan is a batch of trees run on one model as a Plan: the steps of
// the chosen executor over the program's weights, the batch's word ids,
// the node states and scratch. Plan can be walked by the traffic analysis
// (dre.Simulate) and run in order; Run runs it as its executor does.
//
// Node states live in rows of the buffers "h" and "c" [rows][H], in the
// order the nodes run: for the recursive executor part by part (see
// below), post-order within a part, so on one worker tree by tree in
// post-order; for the depth-batched one part by part, height by height
// (so each height's outputs are one contiguous block and only the
// children need gathering). The accessors take (tree, node) whatever the
// layout.
//
// A plan on more than one worker (TreeOptions.Workers) is split into
// parts, one per worker, each part's steps consecutive and marked with it
// as Step.Worker, in phases as a Partitioned plan's (Step.Phase): Run
// hands each phase's parts to the pool, as Plan.Run does, so one worker's
// steps replayed alone (dre) are what that worker runs. The depth-batched
// executor splits the batch into parts of consecutive trees, as many as
// the workers (and trees), with about as many nodes each, each part
// depth-batched on its own (its own state rows and scratch), all in one
// phase. The recursive executor runs whole subtrees of at most a
// worker's share of the nodes in phase 0, consecutive ones on each
// worker, and the nodes above them, tree by tree, in phase 1 (see
// cutRecursive).
type TreePlan struct {
	Plan     *Plan
	Executor TreeExecutor
	Trees    []*tree.Tree
	Workers  int // the parts it was built for (1 when left open and not worth the pool)
	AllNodes bool
	// WordTable: what depends only on a node's word (a Binary TreeLSTM
	// leaf's state, a Child-Sum node's W·e) is read by gather steps from
	// the program's word tables (TreeProgram.WordTable), not computed.
	WordTable bool

	offsets  []int32 // first global node of each tree
	rowOf    []int32 // global node -> state row
	h, c, pr *Buffer

	// global node -> its parent and its number of children
	parent []int32
	nkids  []int32

	b     treeBuilder    // the memory the plan is built in (see tree_store.go)
	reuse chan *TreePlan // where Release puts the plan (Acquire)
}

// Plan builds the plan that runs trees on p's model with opt. Every tree
// is checked against the model (arity, words). A dynamic model returns
// ErrDynamicTree.
func (p *TreeProgram) Plan(trees []*tree.Tree, opt TreeOptions) (*TreePlan, error) {
	tp := &TreePlan{}
	if err := p.build(tp, trees, opt); err != nil {
		return nil, err
	}
	return tp, nil
}

// Acquire is Plan for a plan that is given back with Release once its
// outputs have been read: it is built into the memory of a plan released
// before (its buffers, steps, ops and index lists), so that at steady
// state a batch allocates nothing. The program keeps up to keptPlans
// released plans, each of at most keptPlanBytes of activations, outside
// the garbage collector's reach (a sync.Pool would drop them at every
// other collection and a batch would then pay for new ones).
func (p *TreeProgram) Acquire(trees []*tree.Tree, opt TreeOptions) (*TreePlan, error) {
	var tp *TreePlan
	select {
	case tp = <-p.plans:
	default:
		tp = &TreePlan{}
	}
	tp.reuse = p.plans
	if err := p.build(tp, trees, opt); err != nil {
		tp.Release()
		return nil, err
	}
	return tp, nil
}

// Released plans a TreeProgram keeps: as many as batches of one model
// usually run at once, and no more bytes of buffers each than a large
// batch needs (a plan grown by an outsized one is left to the garbage
// collector).
const (
	keptPlans     = 4
	keptPlanBytes = 256 << 20
)

// Release gives a plan from Acquire back for reuse; neither it nor the
// slices its accessors returned may be used after. It does nothing for a
// plan from Plan.
func (tp *TreePlan) Release() {
	if tp.reuse == nil {
		return
	}
	clear(tp.Trees) // the trees are the caller's
	clear(tp.b.flat)
	tp.Trees, tp.b.flat = tp.Trees[:0], tp.b.flat[:0]
	if tp.b.keptBytes() > keptPlanBytes {
		return
	}
	select {
	case tp.reuse <- tp:
	default:
	}
}

// build checks trees and opt and builds their plan into tp.
func (p *TreeProgram) build(tp *TreePlan, trees []*tree.Tree, opt TreeOptions) error {
	m := p.Model
	if m.Cell.Dynamic() {
		return ErrDynamicTree
	}
	auto := opt.Workers == 0 // as many parts as pay (see work.go)
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return err
	}
	if len(trees) == 0 {
		return inputErr("trees", "no trees")
	}
	if len(trees) > MaxBatch {
		return inputErr("trees", "%d trees, limit %d", len(trees), MaxBatch)
	}
	N := 0
	for i, t := range trees {
		if err := m.Check(t); err != nil {
			return fmt.Errorf("tree %d: %w", i, err)
		}
		N += t.Len()
		if N > MaxTreeBatchNodes {
			return inputErr("trees", "more than %d nodes in the batch", MaxTreeBatchNodes)
		}
	}
	tp.Executor, tp.Workers, tp.AllNodes = opt.Executor, opt.Workers, opt.AllNodes
	tp.WordTable = p.WordTable()
	tp.Trees = append(tp.Trees[:0], trees...)
	if tp.Plan == nil {
		tp.Plan = &Plan{}
	}
	pl := tp.Plan
	*pl = Plan{B: len(trees), dry: p.dry, Buffers: append(pl.Buffers[:0], p.weights...), Steps: pl.Steps[:0], span: pl.span[:0], phase: pl.phase, rate: &p.rate[opt.Executor], work: pl.work[:0], chunks: pl.chunks.reset()}
	b := &tp.b
	b.reset(p, tp, N)
	b.build()
	pl.pool = opt.Pool
	pl.index(tp.Workers)
	if auto && pl.workers > 1 && !opt.Pool.pays(pl.work, pl.chunks.grain, pl.workers, pl.rate) {
		pl.serialize()
	}
	if auto {
		tp.Workers = pl.workers
	}
	return nil
}

// treeBuilder emits a tree plan's steps. Both executors emit groups of
// nodes through the same code: a group of one node (recursive, scratch
// row = the node's chunk's, see slots) or a whole height of a part
// (depth-batched, scratch from the part's first scratch row), so each
// node's arithmetic is the same in both. It lives in its TreePlan, and what it builds with is reused from
// one batch to the next (tree_store.go).
type treeBuilder struct {
	recorder
	prog *TreeProgram
	tp   *TreePlan
	N    int

	flat    []*tree.Node // global node -> node
	treeOf  []int32      // global node -> its tree
	height  []int32      // global node -> its height
	order   []int32      // nodes in plan order, group after group; a node's state row is its place here
	part    []int32      // recursive: the part (worker) of each place in order
	phase   []int32      // recursive: the phase of each place in order
	cutAt   []int32      // recursive: places in order that begin a chunk (planChunks)
	slot    []int32      // recursive: the scratch row of each place in order (slots)
	kidAt   []int32      // recursive Child-Sum: each scratch row's first child row (slots)
	groupAt []int32      // first place in order of each group, then N
	parts   []treePart
	count   []int32 // per height, for sorting a part's nodes

	ints  list[int32]
	lists list[[]int32]
	rows  list[Rows32]
	ops   treeOps
	bufs  []*Buffer // every buffer the plan has had but the weights, by name

	words    *Buffer // I64 [N]: each node's word id (-1 for none), by state row
	x        *Buffer // gathered word vectors [S][E]
	kid      *Buffer // gathered children states [S][2H]
	g        *Buffer // products [S][gate width]
	bil, u   *Buffer // RNTN: tensor term [S][H], v·V [S][2H·H]
	hsum     *Buffer // Child-Sum: Σ h_k [S][H]
	iou      *Buffer // Child-Sum: U_iou h̃ [S][3H]
	kidh, uf *Buffer // Child-Sum: children's h [SK][H], U_f h_k [SK][H]
	rootH    *Buffer // depth-batched roots' h [B][H]
	h, c, pr *Buffer

	minChunk int32 // recursive: the fewest nodes in a chunk (see rntnScratchBytes)
	uRows    int   // RNTN: the most v·V scratch rows a group's slice takes
	uAt      int   // RNTN: the group's first v·V scratch row
}

// treePart is a range of trees run as one depth-batched part: its groups
// and its first scratch rows (per node and per child).
type treePart struct {
	t0, t1       int // trees [t0, t1)
	g0, g1       int // groups [g0, g1)
	sBase, kBase int
	uBase        int // RNTN: its first v·V scratch row
}

// reset readies b to build a plan of N nodes for tp on p.
func (b *treeBuilder) reset(p *TreeProgram, tp *TreePlan, N int) {
	b.prog, b.tp, b.N = p, tp, N
	b.recorder = recorder{plan: tp.Plan}
	b.ints.reset()
	b.lists.reset()
	b.rows.reset()
	b.ops.reset()
	b.parts = b.parts[:0]
	b.words, b.x, b.kid, b.g, b.bil, b.u, b.hsum, b.iou, b.kidh, b.uf, b.rootH, b.h, b.c, b.pr =
		nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil
}

// stored returns the buffer named name that earlier plans built here
// used, or a new one.
func (b *treeBuilder) stored(name string) *Buffer {
	for _, x := range b.bufs {
		if x.Name == name {
			return x
		}
	}
	x := &Buffer{Name: name}
	b.bufs = append(b.bufs, x)
	return x
}

// keptBytes is the memory of the buffers b keeps.
func (b *treeBuilder) keptBytes() int64 {
	var n int64
	for _, x := range b.bufs {
		n += 4*int64(cap(x.F32)) + 8*int64(cap(x.I64))
	}
	return n
}

// buffer adds a float32 buffer to the plan, its memory reused from earlier
// plans (not cleared) and grown when they were smaller; a dry plan's has
// none.
func (b *treeBuilder) buffer(name string, kind BufferKind, elems int) *Buffer {
	buf := b.stored(name)
	data := buf.F32
	*buf = Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4}
	if !b.plan.dry {
		buf.F32 = resize(data, elems)
	}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

// ids adds an int64 buffer of elems ids, its memory reused (even in a dry
// plan: ids decide which rows are read).
func (b *treeBuilder) ids(name string, kind BufferKind, elems int) *Buffer {
	buf := b.stored(name)
	data := buf.I64
	*buf = Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 8, I64: resize(data, elems)}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

// partition splits the batch into parts of consecutive trees for the
// depth-batched executor: one per worker (at most one per tree), with
// about as many nodes each.
func (b *treeBuilder) partition() {
	tp := b.tp
	B, N := len(tp.Trees), b.N
	P := 1
	if tp.Executor == DepthBatched {
		P = min(tp.Workers, B)
	}
	t0 := 0
	for p := 1; p <= P; p++ {
		t1 := B
		if p < P {
			// The first tree that starts at or after p/P of the nodes,
			// leaving at least one tree for each part after this one.
			target := int32(int64(N) * int64(p) / int64(P))
			t1 = t0 + 1
			for t1 < B-(P-p) && tp.offsets[t1] < target {
				t1++
			}
		}
		b.parts = append(b.parts, treePart{t0: t0, t1: t1})
		t0 = t1
	}
}

// group orders the nodes and forms the groups: every node alone in
// post-order (recursive), or each part's nodes by height, a group per
// height (depth-batched). It returns the scratch rows the groups need
// per node (S) and per child (SK).
func (b *treeBuilder) group() (S, SK int) {
	tp, N := b.tp, b.N
	b.order = resize(b.order, N)
	b.groupAt = slices.Grow(b.groupAt[:0], N+1)
	if tp.Executor == Recursive {
		b.cutRecursive()
		for g := range N {
			b.groupAt = append(b.groupAt, int32(g))
		}
		b.groupAt = append(b.groupAt, int32(N))
		return b.slots()
	}
	at := int32(0)
	for pi := range b.parts {
		pt := &b.parts[pi]
		lo, hi := tp.offsets[pt.t0], int32(N)
		if pt.t1 < len(tp.Trees) {
			hi = tp.offsets[pt.t1]
		}
		maxH := int32(0)
		for g := lo; g < hi; g++ {
			maxH = max(maxH, b.height[g])
		}
		// Counting sort by height, in node order within a height.
		b.count = resize(b.count, int(maxH)+2)
		clear(b.count)
		for g := lo; g < hi; g++ {
			b.count[b.height[g]+1]++
		}
		pt.g0 = len(b.groupAt)
		s, sk := 0, 0
		for h := range maxH + 1 {
			b.count[h+1] += b.count[h]
			b.groupAt = append(b.groupAt, at+b.count[h])
			s = max(s, int(b.count[h+1]-b.count[h]))
		}
		pt.g1 = len(b.groupAt)
		for g := lo; g < hi; g++ {
			h := b.height[g]
			b.order[at+b.count[h]] = g
			b.count[h]++
		}
		for gi := pt.g0; gi < pt.g1; gi++ {
			k, end := 0, at+(hi-lo)
			if gi+1 < pt.g1 {
				end = b.groupAt[gi+1]
			}
			for _, g := range b.order[b.groupAt[gi]:end] {
				k += int(tp.nkids[g])
			}
			sk = max(sk, k)
		}
		pt.sBase, pt.kBase = S, SK
		S, SK = S+s, SK+sk
		at = hi
	}
	b.groupAt = append(b.groupAt, int32(N))
	return S, SK
}

// cutRecursive orders the recursive executor's nodes (b.order) and gives
// each its part and phase, for tp.Workers parts:
//
//   - phase 0 runs whole subtrees, each of at most a part's share of the
//     batch's nodes (ceil(N/parts)): the largest such below every node
//     larger than that (a whole tree when it fits), in the batch's
//     post-order, cut into consecutive runs of about a share each, one
//     run a part;
//   - phase 1 runs the nodes above them (those larger than a share), tree
//     by tree, each tree's in post-order on one part, the trees spread
//     over the parts in order, about as many nodes each, a tree going to
//     the part its first node falls in (so a lone tree's top runs on
//     part 0, the caller's, which needs no wake-up after the barrier).
//
// Each part's nodes are consecutive in the order, in post-order within a
// subtree or a tree's top, so its steps run after those they read: their
// children's in the part before, or in phase 0. A batch of at least as
// many trees as parts whose trees are no larger than a share has no phase
// 1 (its parts are consecutive trees, as the depth-batched executor's);
// one tree is split below its root. With one part the order is the
// batch's post-order, in phase 0.
func (b *treeBuilder) cutRecursive() {
	tp, N := b.tp, b.N
	W := max(1, min(tp.Workers, N))
	b.part, b.phase = resize(b.part, N), resize(b.phase, N)
	b.cutAt = b.cutAt[:0]
	if W == 1 {
		for g := range N {
			b.order[g], b.part[g], b.phase[g] = int32(g), 0, 0
		}
		return
	}
	share := int32((N + W - 1) / W)
	if slices.IndexFunc(tp.Trees, func(t *tree.Tree) bool { return int32(t.Len()) > share }) < 0 {
		b.cutWholeTrees(W)
		return
	}
	b.cutSubtrees(W, share)
}

// cutSubtrees is cutRecursive for W parts of at most share nodes each.
func (b *treeBuilder) cutSubtrees(W int, share int32) {
	tp, N := b.tp, b.N
	size := b.ints.take(N) // global node -> nodes in its subtree
	for g := range N {
		size[g] = 1
	}
	for g := range N { // children come before their parent
		if p := tp.parent[g]; p >= 0 {
			size[p] += size[g]
		}
	}
	// piece[g]: the root of the phase-0 subtree g is in, or -1 above them.
	piece := b.ints.take(N)
	for g := N - 1; g >= 0; g-- { // parents come after their children
		p := tp.parent[g]
		switch {
		case size[g] > share:
			piece[g] = -1
		case p < 0 || piece[p] < 0:
			piece[g] = int32(g)
		default:
			piece[g] = piece[p]
		}
	}
	// The subtrees in the order of their roots, cut into runs of about a
	// share: a subtree goes to the part its middle node falls in. Then the
	// nodes above them, tree by tree: a tree's to the part its first falls
	// in. key is each node's
	// part in its phase (phase 1's numbered from W); the order is by key,
	// then by node.
	key := b.ints.take(N)
	total := 0
	for g := range N {
		if piece[g] == int32(g) {
			total += int(size[g])
		}
	}
	seen := 0
	for g := range N {
		if piece[g] == int32(g) {
			key[g] = int32(min(W-1, (2*seen+int(size[g]))*W/(2*total)))
			seen += int(size[g])
		}
	}
	above := N - total
	seen = 0
	for t := range tp.Trees {
		lo, hi := tp.offsets[t], tp.offsets[t]+int32(tp.Trees[t].Len())
		n := 0
		for g := lo; g < hi; g++ {
			if piece[g] < 0 {
				n++
			}
		}
		w := int32(min(W-1, seen*W/max(above, 1)))
		seen += n
		for g := lo; g < hi; g++ {
			if piece[g] < 0 {
				key[g] = int32(W) + w
			}
		}
	}
	for g := range N {
		if piece[g] >= 0 {
			key[g] = key[piece[g]]
		}
	}
	count := b.ints.take(2*W + 1)
	clear(count)
	for g := range N {
		count[key[g]+1]++
	}
	for k := range 2 * W {
		count[k+1] += count[k]
	}
	for g := range N {
		at := count[key[g]]
		count[key[g]]++
		b.order[at], b.part[at], b.phase[at] = int32(g), key[g]%int32(W), key[g]/int32(W)
	}
	// Chunks: a part's subtrees (phase 0) or trees' tops (phase 1), none
	// of which reads another's states, in runs of at least minChunkNodes.
	unit := func(g int32) int32 {
		if piece[g] >= 0 {
			return piece[g]
		}
		return -1 - b.treeOf[g]
	}
	run := int32(0) // nodes in the chunk so far
	for at := range int32(N) {
		g := b.order[at]
		if at == 0 || key[g] != key[b.order[at-1]] {
			run = 0 // a part's first node: its first chunk
		} else if run >= b.minChunk && unit(g) != unit(b.order[at-1]) {
			b.cutAt = append(b.cutAt, at)
			run = 0
		}
		run++
	}
}

// cutWholeTrees is cutRecursive for a batch whose trees are each no
// larger than a share, in one pass: every tree is a phase-0 subtree, so
// the order is the batch's, a tree's part the one its middle node falls
// in, and a chunk begins at a tree once the one before has at least
// minChunkNodes nodes.
func (b *treeBuilder) cutWholeTrees(W int) {
	tp, N := b.tp, b.N
	seen, run := 0, int32(0)
	prev := int32(-1)
	for t, tr := range tp.Trees {
		n := tr.Len()
		part := int32(min(W-1, (2*seen+n)*W/(2*N)))
		lo := tp.offsets[t]
		if part != prev {
			run = 0
		} else if run >= b.minChunk {
			b.cutAt = append(b.cutAt, lo)
			run = 0
		}
		for g := lo; g < lo+int32(n); g++ {
			b.order[g], b.part[g], b.phase[g] = g, part, 0
		}
		seen, run, prev = seen+n, run+int32(n), part
	}
}

// reserve grows the plan's step list and the gathers' row lists to the
// most a batch of B trees in b's groups can use, so that a fresh plan
// allocates each once rather than growing it step by step (a grown list
// allocates about five times its final size); a reused one has them.
func (b *treeBuilder) reserve(B int) {
	leaf, inner := 1, 3 // TreeRNN: a gather; a gather, a product, the cell
	switch b.prog.Model.Cell {
	case tree.RNTN:
		inner = 5 // and the tensor's product and term
	case tree.BinaryLSTM:
		leaf = 3 // a gather, a product, the cell (or two gathers)
	case tree.ChildSumLSTM:
		leaf, inner = 7, 7 // W·e (a gather and a product), Σh, U_iou, the children's gather and U_f, the cell
	}
	steps, inners := 0, 0
	for gi := range len(b.groupAt) - 1 {
		if len(b.flat[b.order[b.groupAt[gi]]].Kids) == 0 {
			steps += leaf
		} else {
			steps, inners = steps+inner, inners+1
		}
	}
	parts := len(b.parts)
	heads := B // a product and a softmax per tree, and a part's gather of roots
	if b.tp.AllNodes {
		heads = b.N
	}
	b.plan.Steps = slices.Grow(b.plan.Steps, steps+2*heads+3*parts)
	b.rows.s = slices.Grow(b.rows.s, 2*inners+parts)
}

// slots gives each place in the recursive order its scratch row (b.slot)
// and returns how many there are, S: one per chunk, a part's nodes of one
// phase cut at b.cutAt. A chunk's nodes run one after another on one
// worker, each node's steps reading only the scratch its own steps wrote,
// and no two chunks share a row, so chunks that run at once never write
// the same scratch (Plan.index may merge a part's last chunks, which then
// run on one worker). On one worker every node uses row 0: the scratch a
// plan allocates does not grow with its batch. A chunk's children's rows
// (Child-Sum) begin at b.kidAt[row], as many as its node with the most
// children has; SK, their total, is at most the batch's children, so a
// node with many children costs its own chunk's rows, not every chunk's.
func (b *treeBuilder) slots() (S, SK int) {
	N := b.N
	b.slot = resize(b.slot, N)
	b.kidAt = b.kidAt[:0]
	s, cut, most := int32(-1), 0, int32(0)
	for at := range N {
		chunk := at == 0 || b.part[at] != b.part[at-1] || b.phase[at] != b.phase[at-1]
		if cut < len(b.cutAt) && b.cutAt[cut] == int32(at) {
			chunk = true
			cut++
		}
		if chunk {
			if s >= 0 {
				SK += int(most)
			}
			s, most = s+1, 0
			b.kidAt = append(b.kidAt, int32(SK))
		}
		b.slot[at] = s
		most = max(most, b.tp.nkids[b.order[at]])
	}
	return int(s + 1), SK + int(most)
}

// minChunkNodes is the fewest nodes in a recursive plan's chunk (but a
// part's last): a chunk costs whoever runs it a claim (a compare-and-swap
// on its part's line) and two clock reads, under half a microsecond, and
// a node of the benchmarks' models (TreeRNN or Binary TreeLSTM, hidden
// 150) a microsecond or more; 32 nodes are a tree of the SST-like batches
// or two, a few dozen microseconds, so a worker waits at most that long
// for another's chunk.
const minChunkNodes = 32

// rntnScratchBytes bounds an RNTN plan's scratch for its tensor term,
// whose v·V takes 2H·H floats a node (180 KB at H 150): a depth-batched
// height of more nodes than that holds runs the term a slice of them at
// a time (within each part's rows), and a recursive plan's chunks, a row
// each, have at least N/uRows nodes, so that they take at most this and
// a row more for each part's and phase's first. (A variable for tests.)
var rntnScratchBytes int64 = 8 << 20

// rowList is the rows idx of buf, w wide.
func rowList(buf *Buffer, idx []int32, w int) Rows32 { return Rows32{Buf: buf, Width: w, Idx: idx} }

func (b *treeBuilder) build() {
	tp, m := b.tp, b.prog.Model
	E, H, C := m.Embed, m.Hidden, m.Classes
	B, N := len(tp.Trees), b.N
	b.minChunk, b.uRows = minChunkNodes, 1
	if m.Cell == tree.RNTN {
		b.uRows = int(max(1, rntnScratchBytes/int64(8*H*H)))
		b.minChunk = max(minChunkNodes, int32((N+b.uRows-1)/b.uRows))
	}
	tp.offsets = resize(tp.offsets, B)
	tp.parent = resize(tp.parent, N)
	tp.nkids = resize(tp.nkids, N)
	tp.rowOf = resize(tp.rowOf, N)
	b.flat = resize(b.flat, N)
	b.treeOf = resize(b.treeOf, N)
	b.height = resize(b.height, N)
	off := int32(0)
	for i, t := range tp.Trees {
		tp.offsets[i] = off
		for j := range t.Nodes {
			n, g := &t.Nodes[j], off+int32(j)
			b.flat[g], b.treeOf[g] = n, int32(i)
			tp.parent[g] = -1
			if n.Parent >= 0 {
				tp.parent[g] = off + n.Parent
			}
			tp.nkids[g] = int32(len(n.Kids))
			h := int32(0)
			for _, k := range n.Kids {
				h = max(h, b.height[off+k]+1)
			}
			b.height[g] = h
		}
		off += int32(t.Len())
	}
	b.partition()
	S, SK := b.group()
	for r, g := range b.order {
		tp.rowOf[g] = int32(r)
	}
	b.plan.T = len(b.groupAt) - 1
	b.reserve(B)

	b.words = b.ids("words", KindInput, N)
	for g, n := range b.flat {
		b.words.I64[tp.rowOf[g]] = int64(n.Word)
	}

	switch m.Cell {
	case tree.TreeRNN, tree.RNTN:
		b.kid = b.buffer("kids", KindActivation, S*2*H)
		b.g = b.buffer("gates", KindActivation, S*H)
		if m.Cell == tree.RNTN {
			rows := S // recursive: a row per chunk
			if tp.Executor == DepthBatched {
				rows = 0
				for pi := range b.parts {
					pt := &b.parts[pi]
					end := S
					if pi+1 < len(b.parts) {
						end = b.parts[pi+1].sBase
					}
					pt.uBase, rows = rows, rows+min(end-pt.sBase, b.uRows)
				}
			}
			b.u = b.buffer("vV", KindActivation, rows*2*H*H)
			b.bil = b.buffer("bilinear", KindActivation, S*H)
		}
	case tree.BinaryLSTM:
		if tp.Executor == DepthBatched && !tp.WordTable {
			b.x = b.buffer("x", KindActivation, S*E)
		}
		b.kid = b.buffer("kids", KindActivation, S*2*H)
		b.g = b.buffer("gates", KindActivation, S*5*H)
	case tree.ChildSumLSTM:
		if tp.Executor == DepthBatched && !tp.WordTable {
			b.x = b.buffer("x", KindActivation, S*E)
		}
		b.g = b.buffer("gates", KindActivation, S*4*H)
		b.hsum = b.buffer("hsum", KindActivation, S*H)
		b.iou = b.buffer("iou", KindActivation, S*3*H)
		b.kidh = b.buffer("kid_h", KindActivation, max(SK, 1)*H)
		b.uf = b.buffer("uf", KindActivation, max(SK, 1)*H)
	}
	b.h = b.buffer("h", KindOutput, N*H)
	if m.Cell.HasMemory() {
		b.c = b.buffer("c", KindActivation, N*H)
	}
	if tp.AllNodes {
		b.pr = b.buffer("probs", KindOutput, N*C)
	} else {
		b.pr = b.buffer("probs", KindOutput, B*C)
		if tp.Executor == DepthBatched {
			b.rootH = b.buffer("root_h", KindActivation, B*H)
		}
	}
	tp.h, tp.c, tp.pr = b.h, b.c, b.pr
	b.plan.output, b.plan.hn, b.plan.cn, b.plan.head = b.h, b.h, b.c, b.pr

	if tp.Executor == Recursive {
		cut := 0
		for gi := range N {
			g := b.order[gi]
			if cut < len(b.cutAt) && b.cutAt[cut] == int32(gi) {
				b.plan.chunks.cuts = append(b.plan.chunks.cuts, int32(len(b.plan.Steps)))
				cut++
			}
			b.at.Worker, b.at.Phase = int(b.part[gi]), int(b.phase[gi])
			s := int(b.slot[gi])
			b.uAt = s
			b.cell(gi, b.order[gi:gi+1], gi, s, int(b.kidAt[s]))
			if tp.AllNodes {
				b.classify(gi, b.h, gi, 1, gi)
			} else if tp.parent[g] < 0 {
				b.classify(gi, b.h, gi, 1, int(b.treeOf[g]))
			}
		}
		b.at.Worker, b.at.Phase = 0, 0
		return
	}
	for pi, pt := range b.parts {
		b.at.Worker, b.uAt = pi, pt.uBase
		for gi := pt.g0; gi < pt.g1; gi++ {
			r0, r1 := int(b.groupAt[gi]), int(b.groupAt[gi+1])
			b.cell(gi, b.order[r0:r1], r0, pt.sBase, pt.kBase)
		}
		r0 := int(b.groupAt[pt.g0])
		r1 := int(b.groupAt[pt.g1])
		if tp.AllNodes {
			b.classify(-1, b.h, r0, r1-r0, r0)
		} else {
			b.gatherRoots(pt.t0, pt.t1)
			b.classify(-1, b.rootH, pt.t0, pt.t1-pt.t0, pt.t0)
		}
	}
	b.at.Worker = 0
}

// kidRows returns the state rows of the group's children number k (-1
// where a node has fewer children).
func (b *treeBuilder) kidRows(grp []int32, k int) []int32 {
	tp := b.tp
	out := b.ints.take(len(grp))
	for r, g := range grp {
		n := b.flat[g]
		out[r] = -1
		if k < len(n.Kids) {
			out[r] = tp.rowOf[tp.offsets[b.treeOf[g]]+n.Kids[k]]
		}
	}
	return out
}

// wordVectors returns the A operand of a leaf product: the word's row of
// the embedding for a single node (recursive), else the group's word
// vectors gathered into x. Zero rows stand for nodes without a word; a
// single node without a word gives a Mat without a buffer.
func (b *treeBuilder) wordVectors(grp []int32, r0, s0 int) Mat {
	E := b.prog.Model.Embed
	table := Dense(b.prog.emb, 0, b.prog.Model.Vocab, E)
	if len(grp) == 1 && b.x == nil {
		if w := b.flat[grp[0]].Word; w >= 0 {
			return table.Row(int(w))
		}
		return Mat{}
	}
	x := Dense(b.x, s0*E, len(grp), E)
	b.add(b.ops.gather.put(newGather(x, table, Dense(b.words, r0, 1, len(grp)))))
	return x
}

// wordProjections returns the Child-Sum group's input projections W·e
// (4H wide, no bias) from the program's word table: for a single node
// with a word, its row of the table (read in place), else the rows
// gathered into the scratch rows of g from s0 (zero rows for nodes
// without a word). It is what the product of wordVectors by W gives, bit
// for bit: the table's rows were computed by the same product
// (NewTreeProgramWith).
func (b *treeBuilder) wordProjections(grp []int32, r0, s0 int) Mat {
	G := 4 * b.prog.Model.Hidden
	table := Dense(b.prog.wordTable, 0, b.prog.Model.Vocab, G)
	if len(grp) == 1 {
		if w := b.flat[grp[0]].Word; w >= 0 {
			return table.Row(int(w))
		}
	}
	g := Dense(b.g, s0*G, len(grp), G)
	b.add(b.ops.gather.put(newGather(g, table, Dense(b.words, r0, 1, len(grp)))))
	return g
}

// stable makes a product use the kernel whose results do not depend on the
// number of rows, so that both executors give every node the same bits.
func stable(o *gemmOp) *gemmOp {
	o.stable = true
	return o
}

// product emits c = a·wᵀ, stable.
func (b *treeBuilder) product(c, a, w Mat) {
	b.add(b.ops.gemm.put(stable(newGemmNT(c, a, w, 0))))
}

// gatherRows emits the gather of parts' rows side by side into dst.
func (b *treeBuilder) gatherRows(dst Mat, parts ...Rows32) {
	b.add(b.ops.rows.put(newGatherRows(dst, b.rows.add(len(b.rows.s), parts...)...)))
}

// cell emits the steps of one group's cell: nodes grp, whose state rows
// start at r0, using scratch rows from s0 (and k0 for per-child scratch).
func (b *treeBuilder) cell(t int, grp []int32, r0, s0, k0 int) {
	m, p := b.prog.Model, b.prog
	E, H, n := m.Embed, m.Hidden, len(grp)
	h := Dense(b.h, r0*H, n, H)
	leaves := len(b.flat[grp[0]].Kids) == 0
	b.pos(-1, 0, t)
	switch m.Cell {
	case tree.TreeRNN, tree.RNTN:
		if leaves {
			b.add(b.ops.gather.put(newGather(h, Dense(p.emb, 0, m.Vocab, E), Dense(b.words, r0, 1, n))))
			return
		}
		kid := b.gatherKids(grp, s0)
		g := Dense(b.g, s0*H, n, H)
		b.product(g, kid, Dense(p.w, 0, H, 2*H))
		var bil Mat
		if m.Cell == tree.RNTN {
			// v·V is 2H·H floats a node: a group of more than uRows
			// nodes runs the tensor term a slice of them at a time.
			W := 2 * H * H
			bil = Dense(b.bil, s0*H, n, H)
			for i := 0; i < n; i += b.uRows {
				k := min(b.uRows, n-i)
				v, u := Dense(b.kid, (s0+i)*2*H, k, 2*H), Dense(b.u, b.uAt*W, k, W)
				b.product(u, v, Dense(p.vt, 0, W, 2*H))
				b.add(b.ops.bil.put(&bilinearOp{v: v, u: u, out: Dense(b.bil, (s0+i)*H, k, H)}))
			}
		}
		b.add(b.ops.tanh.put(&tanhBiasOp{g: g, b: Whole(p.b), bil: bil, h: h}))

	case tree.BinaryLSTM:
		c := Dense(b.c, r0*H, n, H)
		G := 5 * H
		if leaves && b.tp.WordTable {
			// The leaves' states, their words' rows of the tables.
			ids := Dense(b.words, r0, 1, n)
			b.add(b.ops.gather.put(newGather(h, Dense(p.leafH, 0, m.Vocab, H), ids)))
			b.add(b.ops.gather.put(newGather(c, Dense(p.leafC, 0, m.Vocab, H), ids)))
			return
		}
		if leaves {
			src := b.wordVectors(grp, r0, s0)
			g := M(b.g, s0*G, n, 3*H, 3*H)
			b.product(g, src, Dense(p.w, 0, 3*H, E))
			b.add(b.ops.leaf.put(&binaryLeafOp{g: g, b: Whole(p.b), h: h, c: c}))
			return
		}
		kid := b.gatherKids(grp, s0)
		g := Dense(b.g, s0*G, n, G)
		b.product(g, kid, Dense(p.u, 0, G, 2*H))
		b.add(b.ops.inner.put(&binaryInnerOp{g: g, b: Whole(p.ub), left: rowList(b.c, b.kidRows(grp, 0), H),
			right: rowList(b.c, b.kidRows(grp, 1), H), h: h, c: c}))

	case tree.ChildSumLSTM:
		b.childSum(grp, r0, s0, k0)
	}
}

// gatherKids copies the group's two children's h side by side into kid
// rows from s0: [h_l; h_r].
func (b *treeBuilder) gatherKids(grp []int32, s0 int) Mat {
	H, n := b.prog.Model.Hidden, len(grp)
	kid := Dense(b.kid, s0*2*H, n, 2*H)
	b.gatherRows(kid, rowList(b.h, b.kidRows(grp, 0), H), rowList(b.h, b.kidRows(grp, 1), H))
	return kid
}

func (b *treeBuilder) childSum(grp []int32, r0, s0, k0 int) {
	m, p, tp := b.prog.Model, b.prog, b.tp
	E, H, n := m.Embed, m.Hidden, len(grp)
	G := 4 * H
	g := Dense(b.g, s0*G, n, G)
	// W x for every node (zero for nodes without a word).
	if b.tp.WordTable && (n > 1 || b.flat[grp[0]].Word >= 0) {
		g = b.wordProjections(grp, r0, s0)
	} else if src := b.wordVectors(grp, r0, s0); src.Buf == nil {
		b.add(b.ops.zero.put(&zeroOp{g}))
	} else {
		b.product(g, src, Dense(p.w, 0, G, E))
	}
	// h̃ and U_iou h̃. kids[r] are node r's children's rows, runs of
	// flatKids, which lists them all in order.
	kids := b.lists.take(n)
	K := 0
	for _, gl := range grp {
		K += len(b.flat[gl].Kids)
	}
	flatKids := b.ints.take(K)
	K = 0
	for r, gl := range grp {
		nd := b.flat[gl]
		off := tp.offsets[b.treeOf[gl]]
		for i, k := range nd.Kids {
			flatKids[K+i] = tp.rowOf[off+k]
		}
		kids[r] = flatKids[K : K+len(nd.Kids) : K+len(nd.Kids)]
		K += len(nd.Kids)
	}
	hsum, iou := Dense(b.hsum, s0*H, n, H), Dense(b.iou, s0*3*H, n, 3*H)
	b.add(b.ops.sum.put(&sumRowsOp{dst: hsum, src: b.h, rows: kids, flat: rowList(b.h, flatKids, H)}))
	b.product(iou, hsum, Dense(p.u, 0, 3*H, H))
	// U_f h_k for every child.
	var uf Mat
	if K > 0 {
		kidh := Dense(b.kidh, k0*H, K, H)
		uf = Dense(b.uf, k0*H, K, H)
		b.gatherRows(kidh, rowList(b.h, flatKids, H))
		b.product(uf, kidh, Dense(p.uf, 0, H, H))
	}
	b.add(b.ops.child.put(&childSumOp{wx: g, b: Whole(p.b), iou: iou, kids: kids, flat: rowList(b.c, flatKids, H), uf: uf,
		h: Dense(b.h, r0*H, n, H), c: Dense(b.c, r0*H, n, H)}))
}

// classify emits the classifier of n state rows from r0 of src into
// probability rows from dst.
func (b *treeBuilder) classify(t int, src *Buffer, r0, n, dst int) {
	m, p := b.prog.Model, b.prog
	H, C := m.Hidden, m.Classes
	pr := Dense(b.pr, dst*C, n, C)
	b.pos(-1, 0, t)
	b.product(pr, Dense(src, r0*H, n, H), Dense(p.clsW, 0, C, H))
	b.add(b.ops.head.put(newHead(pr, Whole(p.clsB), rnn.ActSoftmax)))
}

// gatherRoots gathers the roots' h of trees [t0, t1) into their rows of
// root_h.
func (b *treeBuilder) gatherRoots(t0, t1 int) {
	tp, H := b.tp, b.prog.Model.Hidden
	idx := b.ints.take(t1 - t0)
	for t := t0; t < t1; t++ {
		idx[t-t0] = tp.rowOf[int(tp.offsets[t])+tp.Trees[t].Root()]
	}
	b.pos(-1, 0, -1)
	b.gatherRows(Dense(b.rootH, t0*H, t1-t0, H), rowList(b.h, idx, H))
}

// Run computes every node as Plan.Run runs a sequence plan: in plan
// order on the calling goroutine, or, for a plan on a Pool of more than
// one worker, phase by phase on the pool (with the invariants build tag,
// checked, serially). A panic in a step reaches the caller as Plan.Run's
// does: from the pool as a *PanicError (Pool.Phases), on the calling
// goroutine as it was raised.
func (tp *TreePlan) Run() error {
	p := tp.Plan
	if p.dry {
		return ErrDryPlan
	}
	return p.exec()
}

func runSteps(steps []Step) {
	for i := range steps {
		steps[i].op.run()
	}
}

// H returns the state h of node of tree t (after Run). The slice belongs
// to the plan.
func (tp *TreePlan) H(t, node int) []float32 {
	H := tp.h.Elems / len(tp.rowOf)
	r := int(tp.rowOf[int(tp.offsets[t])+node])
	return tp.h.F32[r*H : (r+1)*H]
}

// C returns the memory cell c of a node (nil for cells without one).
func (tp *TreePlan) C(t, node int) []float32 {
	if tp.c == nil {
		return nil
	}
	H := tp.c.Elems / len(tp.rowOf)
	r := int(tp.rowOf[int(tp.offsets[t])+node])
	return tp.c.F32[r*H : (r+1)*H]
}

// Probs returns the class probabilities of a node of tree t: any node
// with AllNodes, else only the root (nil for others).
func (tp *TreePlan) Probs(t, node int) []float32 {
	C := tp.pr.Elems / len(tp.Trees)
	if tp.AllNodes {
		C = tp.pr.Elems / len(tp.rowOf)
		r := int(tp.rowOf[int(tp.offsets[t])+node])
		return tp.pr.F32[r*C : (r+1)*C]
	}
	if node != tp.Trees[t].Root() {
		return nil
	}
	return tp.pr.F32[t*C : (t+1)*C]
}

// Nodes is the number of nodes of the batch.
func (tp *TreePlan) Nodes() int { return len(tp.rowOf) }
