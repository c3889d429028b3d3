package schedule

import (
	"rnnserve/rnn"
	"rnnserve/rnn/tree"
)

// The tree cells' kernels as ops. Node states live in rows of the plan's
// h and c buffers; a cell reads its children's rows by index (Rows32) and
// writes its nodes' rows (a Mat of consecutive rows).

// tanhBiasOp is the TreeRNN and RNTN nonlinearity: h = tanh(g + b (+ bil)).
type tanhBiasOp struct {
	g, b, bil, h Mat // bil has no buffer for a TreeRNN
}

func (o *tanhBiasOp) kernel() Kernel { return KTreeCell }
func (o *tanhBiasOp) run() {
	tree.TanhBias(o.h.Rows, o.h.Cols, o.g.F32(), o.b.F32(), o.bil.maybeF32(), o.h.F32(), 0)
}
func (o *tanhBiasOp) regions(fn func(Region, bool)) {
	emit(fn, o.g, false)
	emit(fn, o.b, false)
	if o.bil.Buf != nil {
		emit(fn, o.bil, false)
	}
	emit(fn, o.h, true)
}

// maybeF32 is F32, or nil for a Mat without a buffer.
func (m Mat) maybeF32() []float32 {
	if m.Buf == nil {
		return nil
	}
	return m.F32()
}

// bilinearOp is the RNTN's tensor term: out[r][k] = Σ_j v[r][j]·u[r][j·H+k].
type bilinearOp struct{ v, u, out Mat }

func (o *bilinearOp) kernel() Kernel { return KBilinear }
func (o *bilinearOp) run() {
	tree.Bilinear(o.out.Rows, o.out.Cols, o.v.F32(), o.u.F32(), o.out.F32())
}
func (o *bilinearOp) regions(fn func(Region, bool)) {
	emit(fn, o.v, false)
	emit(fn, o.u, false)
	emit(fn, o.out, true)
}

// binaryLeafOp finishes Binary TreeLSTM leaves from g = W x (3H wide).
type binaryLeafOp struct{ g, b, h, c Mat }

func (o *binaryLeafOp) kernel() Kernel { return KTreeCell }
func (o *binaryLeafOp) run() {
	tree.BinaryLeaf(o.h.Rows, o.h.Cols, o.g.F32(), o.b.F32(), o.h.F32(), o.c.F32(), 0)
}
func (o *binaryLeafOp) regions(fn func(Region, bool)) {
	emit(fn, o.g, false)
	emit(fn, o.b, false)
	emit(fn, o.h, true)
	emit(fn, o.c, true)
}

// binaryInnerOp finishes Binary TreeLSTM inner nodes from g = U [h_l; h_r]
// (5H wide) and the children's memories, rows left and right of c.
type binaryInnerOp struct {
	g, b        Mat
	left, right Rows32
	h, c        Mat
}

func (o *binaryInnerOp) kernel() Kernel { return KTreeCell }
func (o *binaryInnerOp) run() {
	// The kernel indexes c by absolute row; h and c are the rows from
	// o.h.Off/H on.
	H := o.h.Cols
	tree.BinaryInner(o.h.Rows, H, o.g.F32(), o.b.F32(), o.left.Idx, o.right.Idx, o.h.Buf.F32, o.c.Buf.F32, o.h.Off/H)
}
func (o *binaryInnerOp) regions(fn func(Region, bool)) {
	emit(fn, o.g, false)
	emit(fn, o.b, false)
	o.left.regions(fn, false)
	o.right.regions(fn, false)
	emit(fn, o.h, true)
	emit(fn, o.c, true)
}

// childSumOp finishes Child-Sum TreeLSTM nodes: wx = W x (4H), iou =
// U_iou h̃ (3H), uf = U_f h_k for every child in order, the children's
// memories rows kids of c.
type childSumOp struct {
	wx, b, iou Mat
	kids       [][]int32
	flat       Rows32 // the children's rows of c, in order
	uf         Mat    // no buffer without children
	h, c       Mat
}

func (o *childSumOp) kernel() Kernel { return KTreeCell }
func (o *childSumOp) run() {
	H := o.h.Cols
	tree.ChildSum(o.h.Rows, H, o.wx.F32(), o.b.F32(), o.iou.F32(), o.uf.maybeF32(), o.kids, o.h.Buf.F32, o.c.Buf.F32, o.h.Off/H)
}
func (o *childSumOp) regions(fn func(Region, bool)) {
	// A node's forget gate (the last H of wx and b) is read once per
	// child: not at all for a leaf.
	H, parents := o.h.Cols, 0
	for _, k := range o.kids {
		if len(k) > 0 {
			parents++
		}
	}
	switch parents {
	case len(o.kids):
		emit(fn, o.wx, false)
		emit(fn, o.b, false)
	case 0:
		emit(fn, o.wx.ColRange(0, 3*H), false)
		emit(fn, o.b.ColRange(0, 3*H), false)
	default:
		for r, k := range o.kids {
			if len(k) > 0 {
				emit(fn, o.wx.Row(r), false)
			} else {
				emit(fn, o.wx.Row(r).ColRange(0, 3*H), false)
			}
		}
		emit(fn, o.b, false)
	}
	emit(fn, o.iou, false)
	o.flat.regions(fn, false)
	if o.uf.Buf != nil {
		emit(fn, o.uf, false)
	}
	emit(fn, o.h, true)
	emit(fn, o.c, true)
}

// decideOp adds the bias to one row of logits and writes its argmax to
// out (one id): a top-down generator's decision, which the generator
// reads from there.
type decideOp struct{ logits, b, out Mat }

func (o *decideOp) kernel() Kernel { return KArgmax }
func (o *decideOp) run() {
	l := o.logits.F32()
	rnn.AddBias(1, len(l), l, len(l), o.b.F32())
	o.out.Buf.I64[o.out.Off] = int64(rnn.Argmax(l))
}
func (o *decideOp) regions(fn func(Region, bool)) {
	emit(fn, o.logits, false)
	emit(fn, o.b, false)
	emit(fn, o.logits, true)
	emit(fn, o.out, true)
}
