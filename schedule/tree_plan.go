package schedule

import (
	"fmt"
	"sync"
	"sync/atomic"

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
	b := &treeBuilder{prog: p, tp: tp, N: N, plan: &Plan{B: len(trees), dry: p.dry}}
	b.plan.Buffers = append(b.plan.Buffers, p.weights...)
	b.build()
	tp.Plan = b.plan
	return tp, nil
}

// treeBuilder emits a tree plan's steps. Both executors emit groups of
// nodes through the same code: a group of one node (recursive, scratch row
// = the node) or a whole height (depth-batched, scratch from row 0), so
// each node's arithmetic is the same in both.
type treeBuilder struct {
	prog *TreeProgram
	tp   *TreePlan
	plan *Plan
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

func (b *treeBuilder) buffer(name string, kind BufferKind, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4}
	if !b.plan.dry {
		buf.F32 = make([]float32, elems)
	}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

func (b *treeBuilder) add(s Step) { b.plan.Steps = append(b.plan.Steps, s) }

// rows returns one region per listed row of buf (width w floats).
func rows(buf *Buffer, idx []int32, w int) []Region {
	rs := make([]Region, 0, len(idx))
	for _, k := range idx {
		if k >= 0 {
			rs = append(rs, mat(buf, int(k)*w, 1, w, w))
		}
	}
	return rs
}

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
	b.words = &Buffer{Name: "words", Kind: KindInput, Elems: N, ElemSize: 8, I64: words}
	b.plan.Buffers = append(b.plan.Buffers, b.words)

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
				b.classify(gi, r0, 1, r0)
			} else if t, ok := roots[g]; ok {
				b.classify(gi, r0, 1, t)
			}
			tp.stepEnd[g] = int32(len(b.plan.Steps))
		}
	}
	if tp.Executor == DepthBatched {
		if tp.AllNodes {
			b.classify(-1, 0, N, 0)
		} else {
			b.gatherRoots(roots)
			b.classifyRows(b.rootH, B)
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
// vectors gathered into x. Zero rows stand for nodes without a word.
func (b *treeBuilder) wordVectors(t int, grp []int32, r0, s0 int) (src *Buffer, off int) {
	m, E := b.prog.Model, b.prog.Model.Embed
	emb := b.prog.emb
	if len(grp) == 1 && b.x == nil {
		w := b.flat[grp[0]].Word
		if w >= 0 {
			return emb, int(w) * E
		}
		return nil, 0
	}
	_ = m
	ids := make([]int32, len(grp))
	for r, g := range grp {
		ids[r] = b.flat[g].Word
	}
	x, n := b.x, len(grp)
	reads := append([]Region{mat(b.words, r0, 1, n, n)}, rows(emb, ids, E)...)
	reads[0].Off, reads[0].Len = 8*int64(r0), 8*int64(n)
	b.add(Step{Kernel: KEmbed, Layer: -1, T: t, Reads: reads, Writes: []Region{mat(x, s0*E, n, E, E)},
		run: func() { tree.GatherRows(E, x.F32[s0*E:], E, 0, emb.F32, ids) }})
	return x, s0 * E
}

// cell emits the steps of one group's cell: nodes grp, whose state rows
// start at r0, using scratch rows from s0 (and k0 for per-child scratch).
func (b *treeBuilder) cell(t int, grp []int32, r0, s0, k0 int) {
	m := b.prog.Model
	p := b.prog
	E, H, n := m.Embed, m.Hidden, len(grp)
	h, c := b.h, b.c
	leaves := len(b.flat[grp[0]].Kids) == 0
	switch m.Cell {
	case tree.TreeRNN, tree.RNTN:
		if leaves {
			ids := make([]int32, n)
			for r, g := range grp {
				ids[r] = b.flat[g].Word
			}
			emb := p.emb
			b.add(Step{Kernel: KEmbed, Layer: -1, T: t, Reads: append([]Region{{Buf: b.words, Off: 8 * int64(r0), Len: 8 * int64(n), Count: 1}}, rows(emb, ids, E)...),
				Writes: []Region{mat(h, r0*H, n, H, H)},
				run:    func() { tree.GatherRows(H, h.F32[r0*H:], H, 0, emb.F32, ids) }})
			return
		}
		kid := b.gatherKids(t, grp, s0)
		g, w, bias := b.g, p.w, p.b
		b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(w), mat(kid, s0*2*H, n, 2*H, 2*H)}, Writes: []Region{mat(g, s0*H, n, H, H)},
			run: func() { tree.MatMulT(n, H, 2*H, kid.F32[s0*2*H:], 2*H, w.F32, 2*H, 0, g.F32[s0*H:], H) }})
		var bil []float32
		reads := []Region{mat(g, s0*H, n, H, H), all(bias)}
		if m.Cell == tree.RNTN {
			u, vt, bl := b.u, p.vt, b.bil
			W := 2 * H * H
			b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(vt), mat(kid, s0*2*H, n, 2*H, 2*H)}, Writes: []Region{mat(u, s0*W, n, W, W)},
				run: func() { tree.MatMulT(n, W, 2*H, kid.F32[s0*2*H:], 2*H, vt.F32, 2*H, 0, u.F32[s0*W:], W) }})
			b.add(Step{Kernel: KBilinear, Layer: -1, T: t, Reads: []Region{mat(kid, s0*2*H, n, 2*H, 2*H), mat(u, s0*W, n, W, W)}, Writes: []Region{mat(bl, s0*H, n, H, H)},
				run: func() { tree.Bilinear(n, H, kid.F32[s0*2*H:], u.F32[s0*W:], bl.F32[s0*H:]) }})
			reads = append(reads, mat(bl, s0*H, n, H, H))
			if !b.plan.dry {
				bil = bl.F32[s0*H:]
			}
		}
		b.add(Step{Kernel: KTreeCell, Layer: -1, T: t, Reads: reads, Writes: []Region{mat(h, r0*H, n, H, H)},
			run: func() { tree.TanhBias(n, H, g.F32[s0*H:], bias.F32, bil, h.F32, r0) }})

	case tree.BinaryLSTM:
		g := b.g
		if leaves {
			src, off := b.wordVectors(t, grp, r0, s0)
			w, bias := p.w, p.b
			G := 5 * H
			b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(w), mat(src, off, n, E, E)}, Writes: []Region{mat(g, s0*G, n, 3*H, 3*H)},
				run: func() { tree.MatMulT(n, 3*H, E, src.F32[off:], E, w.F32, E, 0, g.F32[s0*G:], 3*H) }})
			b.add(Step{Kernel: KTreeCell, Layer: -1, T: t, Reads: []Region{mat(g, s0*G, n, 3*H, 3*H), all(bias)},
				Writes: []Region{mat(h, r0*H, n, H, H), mat(c, r0*H, n, H, H)},
				run:    func() { tree.BinaryLeaf(n, H, g.F32[s0*G:], bias.F32, h.F32, c.F32, r0) }})
			return
		}
		kid := b.gatherKids(t, grp, s0)
		u, ub := p.u, p.ub
		left, right := b.kidRows(grp, 0), b.kidRows(grp, 1)
		G := 5 * H
		b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(u), mat(kid, s0*2*H, n, 2*H, 2*H)}, Writes: []Region{mat(g, s0*G, n, G, G)},
			run: func() { tree.MatMulT(n, G, 2*H, kid.F32[s0*2*H:], 2*H, u.F32, 2*H, 0, g.F32[s0*G:], G) }})
		reads := append([]Region{mat(g, s0*G, n, G, G), all(ub)}, rows(c, left, H)...)
		reads = append(reads, rows(c, right, H)...)
		b.add(Step{Kernel: KTreeCell, Layer: -1, T: t, Reads: reads, Writes: []Region{mat(h, r0*H, n, H, H), mat(c, r0*H, n, H, H)},
			run: func() { tree.BinaryInner(n, H, g.F32[s0*G:], ub.F32, left, right, h.F32, c.F32, r0) }})

	case tree.ChildSumLSTM:
		b.childSum(t, grp, r0, s0, k0)
	}
}

// gatherKids copies the group's two children's h side by side into kid
// rows from s0: [h_l; h_r].
func (b *treeBuilder) gatherKids(t int, grp []int32, s0 int) *Buffer {
	H, n := b.prog.Model.Hidden, len(grp)
	kid, h := b.kid, b.h
	left, right := b.kidRows(grp, 0), b.kidRows(grp, 1)
	reads := append(rows(h, left, H), rows(h, right, H)...)
	b.add(Step{Kernel: KCopy, Layer: -1, T: t, Reads: reads, Writes: []Region{mat(kid, s0*2*H, n, 2*H, 2*H)},
		run: func() {
			tree.GatherRows(H, kid.F32[s0*2*H:], 2*H, 0, h.F32, left)
			tree.GatherRows(H, kid.F32[s0*2*H:], 2*H, H, h.F32, right)
		}})
	return kid
}

func (b *treeBuilder) childSum(t int, grp []int32, r0, s0, k0 int) {
	m, p := b.prog.Model, b.prog
	E, H, n := m.Embed, m.Hidden, len(grp)
	h, c, g := b.h, b.c, b.g
	G := 4 * H
	// W x for every node (zero for nodes without a word).
	src, off := b.wordVectors(t, grp, r0, s0)
	w := p.w
	if src == nil {
		b.add(Step{Kernel: KCopy, Layer: -1, T: t, Writes: []Region{mat(g, s0*G, n, G, G)},
			run: func() { clear(g.F32[s0*G : (s0+n)*G]) }})
	} else {
		b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(w), mat(src, off, n, E, E)}, Writes: []Region{mat(g, s0*G, n, G, G)},
			run: func() { tree.MatMulT(n, G, E, src.F32[off:], E, w.F32, E, 0, g.F32[s0*G:], G) }})
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
	hsum, iou, u := b.hsum, b.iou, p.u
	b.add(Step{Kernel: KCopy, Layer: -1, T: t, Reads: rows(h, flatKids, H), Writes: []Region{mat(hsum, s0*H, n, H, H)},
		run: func() { tree.SumRows(H, hsum.F32[s0*H:], h.F32, kids) }})
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(u), mat(hsum, s0*H, n, H, H)}, Writes: []Region{mat(iou, s0*3*H, n, 3*H, 3*H)},
		run: func() { tree.MatMulT(n, 3*H, H, hsum.F32[s0*H:], H, u.F32, H, 0, iou.F32[s0*3*H:], 3*H) }})
	// U_f h_k for every child.
	K := len(flatKids)
	kidh, uf, wf := b.kidh, b.uf, p.uf
	if K > 0 {
		b.add(Step{Kernel: KCopy, Layer: -1, T: t, Reads: rows(h, flatKids, H), Writes: []Region{mat(kidh, k0*H, K, H, H)},
			run: func() { tree.GatherRows(H, kidh.F32[k0*H:], H, 0, h.F32, flatKids) }})
		b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(wf), mat(kidh, k0*H, K, H, H)}, Writes: []Region{mat(uf, k0*H, K, H, H)},
			run: func() { tree.MatMulT(K, H, H, kidh.F32[k0*H:], H, wf.F32, H, 0, uf.F32[k0*H:], H) }})
	}
	bias := p.b
	reads := append([]Region{mat(g, s0*G, n, G, G), all(bias), mat(iou, s0*3*H, n, 3*H, 3*H)}, rows(c, flatKids, H)...)
	if K > 0 {
		reads = append(reads, mat(uf, k0*H, K, H, H))
	}
	b.add(Step{Kernel: KTreeCell, Layer: -1, T: t, Reads: reads, Writes: []Region{mat(h, r0*H, n, H, H), mat(c, r0*H, n, H, H)},
		run: func() {
			var ufs []float32
			if K > 0 {
				ufs = uf.F32[k0*H:]
			}
			tree.ChildSum(n, H, g.F32[s0*G:], bias.F32, iou.F32[s0*3*H:], ufs, kids, h.F32, c.F32, r0)
		}})
}

// classify emits the classifier of n state rows from r0 into probability
// rows from dst.
func (b *treeBuilder) classify(t, r0, n, dst int) {
	m, p := b.prog.Model, b.prog
	H, C := m.Hidden, m.Classes
	h, pr, w, bias := b.h, b.pr, p.clsW, p.clsB
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t, Reads: []Region{all(w), mat(h, r0*H, n, H, H)}, Writes: []Region{mat(pr, dst*C, n, C, C)},
		run: func() { tree.MatMulT(n, C, H, h.F32[r0*H:], H, w.F32, H, 0, pr.F32[dst*C:], C) }})
	b.add(Step{Kernel: KHead, Layer: -1, T: t, Reads: []Region{mat(pr, dst*C, n, C, C), all(bias)}, Writes: []Region{mat(pr, dst*C, n, C, C)},
		run: func() { tree.Classify(n, C, pr.F32[dst*C:(dst+n)*C], bias.F32) }})
}

func (b *treeBuilder) gatherRoots(roots map[int32]int) {
	H := b.prog.Model.Hidden
	idx := make([]int32, len(b.tp.Trees))
	for g, t := range roots {
		idx[t] = b.tp.rowOf[g]
	}
	rh, h := b.rootH, b.h
	b.add(Step{Kernel: KCopy, Layer: -1, T: -1, Reads: rows(h, idx, H), Writes: []Region{all(rh)},
		run: func() { tree.GatherRows(H, rh.F32, H, 0, h.F32, idx) }})
}

func (b *treeBuilder) classifyRows(src *Buffer, n int) {
	m, p := b.prog.Model, b.prog
	H, C := m.Hidden, m.Classes
	pr, w, bias := b.pr, p.clsW, p.clsB
	b.add(Step{Kernel: KMatMul, Layer: -1, T: -1, Reads: []Region{all(w), all(src)}, Writes: []Region{mat(pr, 0, n, C, C)},
		run: func() { tree.MatMulT(n, C, H, src.F32, H, w.F32, H, 0, pr.F32, C) }})
	b.add(Step{Kernel: KHead, Layer: -1, T: -1, Reads: []Region{mat(pr, 0, n, C, C), all(bias)}, Writes: []Region{mat(pr, 0, n, C, C)},
		run: func() { tree.Classify(n, C, pr.F32[:n*C], bias.F32) }})
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
	if tp.Executor == DepthBatched || tp.Workers <= 1 || len(tp.leaves) <= 1 {
		for i := range p.Steps {
			p.Steps[i].run()
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
						p.Steps[i].run()
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
