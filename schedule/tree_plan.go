package schedule

import (
	"fmt"
	"sync"
	"sync/atomic"

	"rnnserve/rnn"
	"rnnserve/rnn/tree"
)

// TreePlan is a batch of trees run on one model as a Plan: the steps of
// the chosen executor over the program's weights, the batch's word ids,
// the node states and scratch. Plan can be walked by the traffic analysis
// (dre.Simulate) and run in order; Run runs it as its executor does.
//
// Node states live in rows of the buffers "h" and "c" [rows][H]: tree by
// tree in post-order for the recursive executor, height by height for the
// depth-batched one (so each height's outputs are one contiguous block and
// only the children need gathering). The accessors take (tree, node)
// whatever the layout.
type TreePlan struct {
	Plan     *Plan
	Executor TreeExecutor
	Trees    []*tree.Tree
	Workers  int
	AllNodes bool

	offsets  []int32 // first global node of each tree
	rowOf    []int32 // global node -> state row
	h, c, pr *Buffer

	// Recursive scheduling: global node -> its steps and parent.
	stepEnd []int32
	parent  []int32
	nkids   []int32
	leaves  []int32
}

// Plan builds the plan that runs trees on p's model with opt. Every tree
// is checked against the model (arity, words). A dynamic model returns
// ErrDynamicTree.
func (p *TreeProgram) Plan(trees []*tree.Tree, opt TreeOptions) (*TreePlan, error) {
	m := p.Model
	if m.Cell.Dynamic() {
		return nil, ErrDynamicTree
	}
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if len(trees) == 0 {
		return nil, inputErr("trees", "no trees")
	}
	if len(trees) > MaxBatch {
		return nil, inputErr("trees", "%d trees, limit %d", len(trees), MaxBatch)
	}
	N := 0
	for i, t := range trees {
		if err := m.Check(t); err != nil {
			return nil, fmt.Errorf("tree %d: %w", i, err)
		}
		N += t.Len()
		if N > MaxTreeBatchNodes {
			return nil, inputErr("trees", "more than %d nodes in the batch", MaxTreeBatchNodes)
		}
	}
	tp := &TreePlan{Executor: opt.Executor, Trees: trees, Workers: opt.Workers, AllNodes: opt.AllNodes}
	b := &treeBuilder{prog: p, tp: tp, N: N}
	b.plan = &Plan{B: len(trees), dry: p.dry}
	b.plan.Buffers = append(b.plan.Buffers, p.weights...)
	b.build()
	b.plan.index(1)
	tp.Plan = b.plan
	return tp, nil
}

// treeBuilder emits a tree plan's steps. Both executors emit groups of
// nodes through the same code: a group of one node (recursive, scratch row
// = the node) or a whole height (depth-batched, scratch from row 0), so
// each node's arithmetic is the same in both.
type treeBuilder struct {
	recorder
	prog *TreeProgram
	tp   *TreePlan
	N    int

	flat     []*tree.Node // global node -> node
	words    *Buffer      // I64 [N]: each node's word id (-1 for none), by state row
	x        *Buffer      // gathered word vectors [S][E]
	kid      *Buffer      // gathered children states [S][2H]
	g        *Buffer      // products [S][gate width]
	bil, u   *Buffer      // RNTN: tensor term [S][H], v·V [S][2H·H]
	hsum     *Buffer      // Child-Sum: Σ h_k [S][H]
	iou      *Buffer      // Child-Sum: U_iou h̃ [S][3H]
	kidh, uf *Buffer      // Child-Sum: children's h [SK][H], U_f h_k [SK][H]
	rootH    *Buffer      // depth-batched roots' h [B][H]
	h, c, pr *Buffer
	kidBase  []int32 // recursive Child-Sum: first kidh row of each node
}

// rowList is the rows idx of buf, w wide.
func rowList(buf *Buffer, idx []int32, w int) Rows32 { return Rows32{Buf: buf, Width: w, Idx: idx} }

func (b *treeBuilder) build() {
	tp, m := b.tp, b.prog.Model
	E, H, C := m.Embed, m.Hidden, m.Classes
	B, N := len(tp.Trees), b.N
	tp.offsets = make([]int32, B)
	tp.parent = make([]int32, N)
	tp.nkids = make([]int32, N)
	b.flat = make([]*tree.Node, N)
	var heights [][]int32 // per tree
	maxH := 0
	totalKids := 0
	off := int32(0)
	for i, t := range tp.Trees {
		tp.offsets[i] = off
		for j := range t.Nodes {
			n := &t.Nodes[j]
			b.flat[off+int32(j)] = n
			tp.parent[off+int32(j)] = -1
			if n.Parent >= 0 {
				tp.parent[off+int32(j)] = off + n.Parent
			}
			tp.nkids[off+int32(j)] = int32(len(n.Kids))
			totalKids += len(n.Kids)
			if len(n.Kids) == 0 {
				tp.leaves = append(tp.leaves, off+int32(j))
			}
		}
		hs := t.Heights()
		heights = append(heights, hs)
		maxH = max(maxH, int(hs[t.Root()]))
		off += int32(t.Len())
	}
	// Groups: the recursive executor's nodes one by one in post-order, the
	// depth-batched executor's heights.
	var groups [][]int32
	tp.rowOf = make([]int32, N)
	S, SK := N, totalKids // scratch rows
	if tp.Executor == Recursive {
		groups = make([][]int32, N)
		for g := range groups {
			groups[g] = []int32{int32(g)}
			tp.rowOf[g] = int32(g)
		}
	} else {
		groups = make([][]int32, maxH+1)
		for i, t := range tp.Trees {
			for j := range t.Nodes {
				h := heights[i][j]
				groups[h] = append(groups[h], tp.offsets[i]+int32(j))
			}
		}
		r := int32(0)
		S, SK = 0, 0
		for _, grp := range groups {
			k := 0
			for _, g := range grp {
				tp.rowOf[g] = r
				r++
				k += len(b.flat[g].Kids)
			}
			S, SK = max(S, len(grp)), max(SK, k)
		}
	}
	b.plan.T = len(groups)

	words := make([]int64, N)
	for g, n := range b.flat {
		words[tp.rowOf[g]] = int64(n.Word)
	}
	b.words = b.ids("words", KindInput, N, words)

	switch m.Cell {
	case tree.TreeRNN, tree.RNTN:
		b.kid = b.buffer("kids", KindActivation, S*2*H)
		b.g = b.buffer("gates", KindActivation, S*H)
		if m.Cell == tree.RNTN {
			b.u = b.buffer("vV", KindActivation, S*2*H*H)
			b.bil = b.buffer("bilinear", KindActivation, S*H)
		}
	case tree.BinaryLSTM:
		if tp.Executor == DepthBatched {
			b.x = b.buffer("x", KindActivation, S*E)
		}
		b.kid = b.buffer("kids", KindActivation, S*2*H)
		b.g = b.buffer("gates", KindActivation, S*5*H)
	case tree.ChildSumLSTM:
		if tp.Executor == DepthBatched {
			b.x = b.buffer("x", KindActivation, S*E)
		}
		b.g = b.buffer("gates", KindActivation, S*4*H)
		b.hsum = b.buffer("hsum", KindActivation, S*H)
		b.iou = b.buffer("iou", KindActivation, S*3*H)
		b.kidh = b.buffer("kid_h", KindActivation, max(SK, 1)*H)
		b.uf = b.buffer("uf", KindActivation, max(SK, 1)*H)
		if tp.Executor == Recursive {
			b.kidBase = make([]int32, N)
			k := int32(0)
			for g, n := range b.flat {
				b.kidBase[g] = k
				k += int32(len(n.Kids))
			}
		}
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

	roots := make(map[int32]int, B) // global root -> tree
	for i, t := range tp.Trees {
		roots[tp.offsets[i]+int32(t.Root())] = i
	}
	if tp.Executor == Recursive {
		tp.stepEnd = make([]int32, N)
	}
	for gi, grp := range groups {
		r0 := int(tp.rowOf[grp[0]])
		s0, k0 := 0, 0
		if tp.Executor == Recursive {
			s0 = int(grp[0])
			if b.kidBase != nil {
				k0 = int(b.kidBase[grp[0]])
			}
		}
		b.cell(gi, grp, r0, s0, k0)
		if tp.Executor == Recursive {
			g := grp[0]
			if tp.AllNodes {
				b.classify(gi, b.h, r0, 1, r0)
			} else if t, ok := roots[g]; ok {
				b.classify(gi, b.h, r0, 1, t)
			}
			tp.stepEnd[g] = int32(len(b.plan.Steps))
		}
	}
	if tp.Executor == DepthBatched {
		if tp.AllNodes {
			b.classify(-1, b.h, 0, N, 0)
		} else {
			b.gatherRoots(roots)
			b.classify(-1, b.rootH, 0, B, 0)
		}
	}
}

// stateRows returns the state rows of nodes' children number k (-1 if
// absent) and of every child in order.
func (b *treeBuilder) kidRows(grp []int32, k int) []int32 {
	tp := b.tp
	out := make([]int32, len(grp))
	for r, g := range grp {
		n := b.flat[g]
		out[r] = -1
		if k < len(n.Kids) {
			tree := b.treeOf(g)
			out[r] = tp.rowOf[tp.offsets[tree]+n.Kids[k]]
		}
	}
	return out
}

// treeOf returns the tree of global node g.
func (b *treeBuilder) treeOf(g int32) int {
	offs := b.tp.offsets
	lo, hi := 0, len(offs)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if offs[mid] <= g {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
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
	b.add(newGather(x, table, Dense(b.words, r0, 1, len(grp))))
	return x
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
			b.add(newGather(h, Dense(p.emb, 0, m.Vocab, E), Dense(b.words, r0, 1, n)))
			return
		}
		kid := b.gatherKids(grp, s0)
		g := Dense(b.g, s0*H, n, H)
		b.add(stable(newGemmNT(g, kid, Dense(p.w, 0, H, 2*H), 0)))
		var bil Mat
		if m.Cell == tree.RNTN {
			W := 2 * H * H
			u := Dense(b.u, s0*W, n, W)
			bil = Dense(b.bil, s0*H, n, H)
			b.add(stable(newGemmNT(u, kid, Dense(p.vt, 0, W, 2*H), 0)))
			b.add(&bilinearOp{v: kid, u: u, out: bil})
		}
		b.add(&tanhBiasOp{g: g, b: Whole(p.b), bil: bil, h: h})

	case tree.BinaryLSTM:
		c := Dense(b.c, r0*H, n, H)
		G := 5 * H
		if leaves {
			src := b.wordVectors(grp, r0, s0)
			g := M(b.g, s0*G, n, 3*H, 3*H)
			b.add(stable(newGemmNT(g, src, Dense(p.w, 0, 3*H, E), 0)))
			b.add(&binaryLeafOp{g: g, b: Whole(p.b), h: h, c: c})
			return
		}
		kid := b.gatherKids(grp, s0)
		g := Dense(b.g, s0*G, n, G)
		b.add(stable(newGemmNT(g, kid, Dense(p.u, 0, G, 2*H), 0)))
		b.add(&binaryInnerOp{g: g, b: Whole(p.ub), left: rowList(b.c, b.kidRows(grp, 0), H),
			right: rowList(b.c, b.kidRows(grp, 1), H), h: h, c: c})

	case tree.ChildSumLSTM:
		b.childSum(grp, r0, s0, k0)
	}
}

// stable makes a product use the kernel whose results do not depend on the
// number of rows, so that both executors give every node the same bits.
func stable(o *gemmOp) *gemmOp {
	o.stable = true
	return o
}

// gatherKids copies the group's two children's h side by side into kid
// rows from s0: [h_l; h_r].
func (b *treeBuilder) gatherKids(grp []int32, s0 int) Mat {
	H, n := b.prog.Model.Hidden, len(grp)
	kid := Dense(b.kid, s0*2*H, n, 2*H)
	b.add(newGatherRows(kid, rowList(b.h, b.kidRows(grp, 0), H), rowList(b.h, b.kidRows(grp, 1), H)))
	return kid
}

func (b *treeBuilder) childSum(grp []int32, r0, s0, k0 int) {
	m, p := b.prog.Model, b.prog
	E, H, n := m.Embed, m.Hidden, len(grp)
	G := 4 * H
	g := Dense(b.g, s0*G, n, G)
	// W x for every node (zero for nodes without a word).
	if src := b.wordVectors(grp, r0, s0); src.Buf == nil {
		b.add(&zeroOp{g})
	} else {
		b.add(stable(newGemmNT(g, src, Dense(p.w, 0, G, E), 0)))
	}
	// h̃ and U_iou h̃.
	kids := make([][]int32, n)
	var flatKids []int32
	for r, gl := range grp {
		nd := b.flat[gl]
		tr := b.treeOf(gl)
		for _, k := range nd.Kids {
			kids[r] = append(kids[r], b.tp.rowOf[b.tp.offsets[tr]+k])
		}
		flatKids = append(flatKids, kids[r]...)
	}
	hsum, iou := Dense(b.hsum, s0*H, n, H), Dense(b.iou, s0*3*H, n, 3*H)
	b.add(&sumRowsOp{dst: hsum, src: b.h, rows: kids, flat: rowList(b.h, flatKids, H)})
	b.add(stable(newGemmNT(iou, hsum, Dense(p.u, 0, 3*H, H), 0)))
	// U_f h_k for every child.
	K := len(flatKids)
	var uf Mat
	if K > 0 {
		kidh := Dense(b.kidh, k0*H, K, H)
		uf = Dense(b.uf, k0*H, K, H)
		b.add(newGatherRows(kidh, rowList(b.h, flatKids, H)))
		b.add(stable(newGemmNT(uf, kidh, Dense(p.uf, 0, H, H), 0)))
	}
	b.add(&childSumOp{wx: g, b: Whole(p.b), iou: iou, kids: kids, flat: rowList(b.c, flatKids, H), uf: uf,
		h: Dense(b.h, r0*H, n, H), c: Dense(b.c, r0*H, n, H)})
}

// classify emits the classifier of n state rows from r0 of src into
// probability rows from dst.
func (b *treeBuilder) classify(t int, src *Buffer, r0, n, dst int) {
	m, p := b.prog.Model, b.prog
	H, C := m.Hidden, m.Classes
	pr := Dense(b.pr, dst*C, n, C)
	b.pos(-1, 0, t)
	b.add(stable(newGemmNT(pr, Dense(src, r0*H, n, H), Dense(p.clsW, 0, C, H), 0)))
	b.add(newHead(pr, Whole(p.clsB), rnn.ActSoftmax))
}

func (b *treeBuilder) gatherRoots(roots map[int32]int) {
	H := b.prog.Model.Hidden
	idx := make([]int32, len(b.tp.Trees))
	for g, t := range roots {
		idx[t] = b.tp.rowOf[g]
	}
	b.pos(-1, 0, -1)
	b.add(newGatherRows(Whole(b.rootH).reshape(len(idx), H), rowList(b.h, idx, H)))
}

// Run computes every node: the depth-batched executor runs the steps in
// order; the recursive one runs each node's steps on a pool of Workers
// goroutines, a leaf whenever a worker is free and an inner node as soon
// as its last child is done (by the worker that finished that child). With
// one worker it runs the steps in plan order.
func (tp *TreePlan) Run() error {
	p := tp.Plan
	if p.dry {
		return ErrDryPlan
	}
	if invariants {
		return p.RunChecked()
	}
	if tp.Executor == DepthBatched || tp.Workers <= 1 || len(tp.leaves) <= 1 {
		for i := range p.Steps {
			p.Steps[i].op.run()
		}
		return nil
	}
	N := len(tp.parent)
	pending := make([]atomic.Int32, N)
	for g := range pending {
		pending[g].Store(tp.nkids[g])
	}
	ready := make(chan int32, len(tp.leaves))
	for _, l := range tp.leaves {
		ready <- l
	}
	close(ready)
	var wg sync.WaitGroup
	for range min(tp.Workers, len(tp.leaves)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range ready {
				for {
					start := int32(0)
					if g > 0 {
						start = tp.stepEnd[g-1]
					}
					for i := start; i < tp.stepEnd[g]; i++ {
						p.Steps[i].op.run()
					}
					par := tp.parent[g]
					if par < 0 || pending[par].Add(-1) != 0 {
						break
					}
					g = par
				}
			}
		}()
	}
	wg.Wait()
	return nil
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
