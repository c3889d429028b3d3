package schedule

import (
	"rnnserve/internal/f32"
	"rnnserve/rnn"
	"rnnserve/rnn/tree"
)

// An op is one kernel call over typed operands. run calls the kernel on
// the slices of its operands; regions visits the same operands' regions,
// every read and then every write, in the order the traffic analysis
// replays them. Each op type is the only place that pairs a kernel with
// its operands, so a builder cannot declare one thing and run another.
type op interface {
	kernel() Kernel
	run()
	regions(fn func(r Region, write bool))
}

// mustShape panics when a builder hands a kernel operands of the wrong
// shape: a programmer error, caught on the first run of the builder.
func mustShape(ok bool) {
	if !ok {
		panic("schedule: operand shapes do not match the kernel")
	}
}

// copyOp copies src into dst (same rows and columns).
type copyOp struct{ dst, src Mat }

func newCopy(dst, src Mat) *copyOp {
	mustShape(dst.Rows == src.Rows && dst.Cols == src.Cols)
	return &copyOp{dst, src}
}

func (o *copyOp) kernel() Kernel { return KCopy }
func (o *copyOp) run() {
	rnn.CopyRows(o.dst.Rows, o.dst.Cols, o.dst.F32(), o.dst.LD, o.src.F32(), o.src.LD)
}
func (o *copyOp) regions(fn func(Region, bool)) { emit(fn, o.src, false); emit(fn, o.dst, true) }

// zeroOp sets dst to zero.
type zeroOp struct{ dst Mat }

func (o *zeroOp) kernel() Kernel { return KCopy }
func (o *zeroOp) run() {
	if o.dst.Buf.I64 != nil {
		clear(o.dst.I64())
		return
	}
	rnn.ZeroRows(o.dst.Rows, o.dst.Cols, o.dst.F32(), o.dst.LD)
}
func (o *zeroOp) regions(fn func(Region, bool)) { emit(fn, o.dst, true) }

// fillOp sets every id of dst (an int64 buffer, one row) to v.
type fillOp struct {
	dst Mat
	v   int64
}

func (o *fillOp) kernel() Kernel { return KCopy }
func (o *fillOp) run() {
	for i := range o.dst.I64() {
		o.dst.Buf.I64[o.dst.Off+i] = o.v
	}
}
func (o *fillOp) regions(fn func(Region, bool)) { emit(fn, o.dst, true) }

// gatherOp copies row ids[i] of table into row i of dst: an embedding
// lookup. The ids are read from their buffer when the op runs and when it
// is walked, so the rows it declares are the rows it reads; a negative id
// gives a row of zeros (a tree node without a word).
type gatherOp struct {
	dst, table, ids Mat
}

func newGather(dst, table, ids Mat) *gatherOp {
	mustShape(ids.Rows == 1 && ids.Cols == dst.Rows && dst.Cols == table.Cols && table.Cols == table.LD && ids.Buf.ElemSize == 8)
	return &gatherOp{dst, table, ids}
}

func (o *gatherOp) kernel() Kernel { return KEmbed }
func (o *gatherOp) run() {
	d, t, w := o.dst.F32(), o.table.Buf.F32, o.table.Cols
	for i, id := range o.ids.I64() {
		row := d[i*o.dst.LD : i*o.dst.LD+w]
		if id < 0 {
			clear(row)
			continue
		}
		copy(row, t[o.table.Off+int(id)*w:o.table.Off+int(id+1)*w])
	}
}
func (o *gatherOp) regions(fn func(Region, bool)) {
	emit(fn, o.ids, false)
	if o.ids.Buf.I64 != nil {
		for _, id := range o.ids.I64() {
			if id >= 0 {
				emit(fn, o.table.Row(int(id)), false)
			}
		}
	}
	emit(fn, o.dst, true)
}

// gatherRowsOp copies listed rows of other buffers into dst: part j's row
// i goes to columns [j·w, (j+1)·w) of dst's row i, w the part's width; a
// negative index gives zeros. With one source Mat per row instead (srcs),
// row i of dst is srcs[i]. It is how trees gather children's states and
// how cellular batching gathers each sequence's input projection.
type gatherRowsOp struct {
	dst   Mat
	parts []Rows32
	srcs  []Mat
}

func (o *gatherRowsOp) kernel() Kernel { return KCopy }
func (o *gatherRowsOp) run() {
	d := o.dst.F32()
	col := 0
	for _, p := range o.parts {
		tree.GatherRows(p.Width, d, o.dst.LD, col, p.Buf.F32, p.Idx)
		col += p.Width
	}
	for i, s := range o.srcs {
		copy(d[i*o.dst.LD:i*o.dst.LD+s.Cols], s.F32())
	}
}
func (o *gatherRowsOp) regions(fn func(Region, bool)) {
	for _, p := range o.parts {
		p.regions(fn, false)
	}
	for _, s := range o.srcs {
		emit(fn, s, false)
	}
	emit(fn, o.dst, true)
}

// newGatherMats copies srcs[i] into row i of dst.
func newGatherMats(dst Mat, srcs []Mat) *gatherRowsOp {
	mustShape(len(srcs) == dst.Rows)
	for _, s := range srcs {
		mustShape(s.Rows == 1 && s.Cols == dst.Cols)
	}
	return &gatherRowsOp{dst: dst, srcs: srcs}
}

func newGatherRows(dst Mat, parts ...Rows32) *gatherRowsOp {
	w := 0
	for _, p := range parts {
		mustShape(len(p.Idx) == dst.Rows)
		w += p.Width
	}
	mustShape(w == dst.Cols)
	return &gatherRowsOp{dst: dst, parts: parts}
}

// sumRowsOp writes into row i of dst the sum of rows[i] of src (zeros for none).
type sumRowsOp struct {
	dst  Mat
	src  *Buffer
	rows [][]int32
	flat Rows32 // every row read, in order
}

func (o *sumRowsOp) kernel() Kernel { return KCopy }
func (o *sumRowsOp) run()           { tree.SumRows(o.dst.Cols, o.dst.F32(), o.src.F32, o.rows) }
func (o *sumRowsOp) regions(fn func(Region, bool)) {
	o.flat.regions(fn, false)
	emit(fn, o.dst, true)
}

// gemmOp is C = A·Wᵀ + beta·C (nt) or C = A·W + beta·C (nn, W stored
// input-major as Schedule A's G is) with A [m][k], C [m][n]. W is float32
// or, in a buffer of 2-byte elements, bf16. With stable set the product
// goes through the kernel whose results do not depend on m (the tree
// executors compare a node run alone with the same node in a batch).
// With tanh set, tanh is applied to C afterwards (the attention decoder's
// h̃ = tanh(W_c [ctx; h])).
type gemmOp struct {
	c, a, w Mat
	beta    float32
	nn      bool
	stable  bool
	tanh    bool
	once    bool        // W is read once per plan (an input projection): f32.GemmNTOnce
	near    func() bool // with once, whether a packed W lies in a cache: f32.GemmNTPackedNear
	// reverse takes W's rows (float32, nt) in chunks of reverseRows from
	// the last, each chunk's rows in order: the same results, W read
	// backwards (see alternates).
	reverse bool
}

// reverseRows is the rows of W a reversed gemmOp takes at a time: the
// rows of f32.StepChunk units of a four-gate cell, a multiple of 8 (16
// for int8) so that a packed W's chunks are whole panels.
const reverseRows = 4 * f32.StepChunk

// reversed marks a product of one row whose W (float32 or bf16) is read
// backwards (at an odd step of a GRU, and of an LSTM whose step is not
// one lstmStepOp, as lstmStepOp's reverse does); W's rows must be a
// multiple of 8.
func reversed(o *gemmOp) *gemmOp {
	mustShape(o.c.Rows == 1 && !o.nn && (o.w.Buf.ElemSize == 4 || o.w.Buf.ElemSize == 2) && o.w.Rows%8 == 0)
	o.reverse = true
	return o
}

// chunks calls f for W's rows [lo, hi) in the order a reversed op reads
// them, or once for all of them.
func (o *gemmOp) chunks(f func(lo, hi int)) {
	if !o.reverse {
		f(0, o.w.Rows)
		return
	}
	f32.BackChunks(o.w.Rows, reverseRows, f)
}

func newGemmNT(c, a, w Mat, beta float32) *gemmOp {
	mustShape(c.Rows == a.Rows && a.Cols == w.Cols && c.Cols == w.Rows)
	mustShape(!w.Buf.Packed || w.Off == 0 && w.LD == w.Cols && w.Rows*w.Cols == w.Buf.Elems)
	return &gemmOp{c: c, a: a, w: w, beta: beta}
}

// readOnce marks a product whose W the plan reads once (an input
// projection's W_ih, all T steps at once), so that with a few rows the
// kernels pull W in as a stream (f32.GemmNTOnce).
func readOnce(o *gemmOp) *gemmOp {
	o.once = true
	return o
}

func newGemmNN(c, a, w Mat, beta float32) *gemmOp {
	mustShape(c.Rows == a.Rows && a.Cols == w.Rows && c.Cols == w.Cols && w.Buf.ElemSize == 4)
	return &gemmOp{c: c, a: a, w: w, beta: beta, nn: true}
}

func (o *gemmOp) kernel() Kernel { return KMatMul }
func (o *gemmOp) run() {
	m, n, k := o.c.Rows, o.c.Cols, o.a.Cols
	switch {
	case o.nn:
		f32.GemmNN(m, n, k, o.a.F32(), o.a.LD, o.w.F32(), o.w.LD, o.beta, o.c.F32(), o.c.LD)
	case o.stable:
		f32.GemmNT(m, n, k, o.a.F32(), o.a.LD, o.w.F32(), o.w.LD, o.beta, o.c.F32(), o.c.LD)
	case o.w.Buf.ElemSize == 2:
		w, c := o.w.U16(), o.c.F32()
		o.chunks(func(lo, hi int) {
			f32.GemmNTBF16(m, hi-lo, k, o.a.F32(), o.a.LD, w[lo*o.w.LD:], o.w.LD, o.beta, c[lo:], o.c.LD)
		})
	case o.reverse && o.w.Buf.Packed:
		w, c := o.w.F32(), o.c.F32()
		o.chunks(func(lo, hi int) {
			f32.GemmNTPacked(m, hi-lo, k, o.a.F32(), o.a.LD, w[lo*k:], o.beta, c[lo:], o.c.LD)
		})
	case o.reverse:
		w, c := o.w.F32(), o.c.F32()
		o.chunks(func(lo, hi int) {
			f32.GemmNT(m, hi-lo, k, o.a.F32(), o.a.LD, w[lo*o.w.LD:], o.w.LD, o.beta, c[lo:], o.c.LD)
		})
	case o.w.Buf.Packed && o.near != nil && o.near():
		f32.GemmNTPackedNear(m, n, k, o.a.F32(), o.a.LD, o.w.F32(), o.beta, o.c.F32(), o.c.LD)
	case o.w.Buf.Packed:
		f32.GemmNTPacked(m, n, k, o.a.F32(), o.a.LD, o.w.F32(), o.beta, o.c.F32(), o.c.LD)
	case o.once:
		f32.GemmNTOnce(m, n, k, o.a.F32(), o.a.LD, o.w.F32(), o.w.LD, o.beta, o.c.F32(), o.c.LD)
	default:
		f32.GemmNT(m, n, k, o.a.F32(), o.a.LD, o.w.F32(), o.w.LD, o.beta, o.c.F32(), o.c.LD)
	}
	if o.tanh {
		c := o.c.F32()
		for r := range m {
			row := c[r*o.c.LD : r*o.c.LD+n]
			f32.TanhTo(row, row)
		}
	}
}
func (o *gemmOp) regions(fn func(Region, bool)) {
	o.chunks(func(lo, hi int) { emit(fn, o.w.RowRange(lo, hi), false) })
	emit(fn, o.a, false)
	if o.beta != 0 {
		emit(fn, o.c, false)
	}
	emit(fn, o.c, true)
}

// lstmOp finishes an LSTM step for y.Rows rows of H = h.Cols units: y
// [B][4H] holds the four gates' products without bias, bias [4H] is
// b_ih + b_hh, c [B][H] (contiguous) is updated in place and h receives
// o⊙tanh(c).
type lstmOp struct {
	y, bias, c, h Mat
	// chunked: y's and bias's gate columns are in f32's chunked order
	// (f32.ChunkRow; a Partitioned slice's, partSlice.chunked).
	chunked bool
}

func newLSTM(y, bias, c, h Mat) *lstmOp {
	H := h.Cols
	mustShape(y.Rows == h.Rows && y.Cols == 4*H && bias.Cols == 4*H && c.Rows == h.Rows && c.Cols == H && (c.LD == H || c.Rows == 1))
	return &lstmOp{y: y, bias: bias, c: c, h: h}
}

// chunkedGates marks gates whose y and bias are in the chunked order (H
// a multiple of f32.StepChunk).
func chunkedGates(o *lstmOp) *lstmOp {
	mustShape(o.h.Cols%f32.StepChunk == 0)
	o.chunked = true
	return o
}

func (o *lstmOp) kernel() Kernel { return KLSTM }
func (o *lstmOp) run() {
	H := o.h.Cols
	y, bias, c, h := o.y.F32(), o.bias.F32(), o.c.F32(), o.h.F32()
	for r := range o.h.Rows {
		yr, cr, hr := y[r*o.y.LD:r*o.y.LD+4*H], c[r*H:r*H+H], h[r*o.h.LD:r*o.h.LD+H]
		if o.chunked {
			f32.LSTMGatesChunked(H, yr, bias, cr, hr)
		} else {
			f32.LSTMGates(H, H, yr, bias, cr, hr)
		}
	}
}
func (o *lstmOp) regions(fn func(Region, bool)) {
	emit(fn, o.y, false)
	emit(fn, o.bias, false)
	emit(fn, o.c, false)
	emit(fn, o.c, true)
	emit(fn, o.h, true)
}

// lstmStepOp is a whole LSTM step of one row in one kernel call
// (f32.LSTMStep, or f32.LSTMStepPacked for a packed w): y += h·wᵀ, then
// the gates of lstmOp (c updated, h_t into hout), with the results and
// the regions of that gemmOp and lstmOp. w is float32; hout must not
// overlap h. With reverse (H a multiple of 8) the units go in chunks of
// f32.StepChunk from the last (f32.LSTMStepReverse or
// f32.LSTMStepPackedReverse), and the regions of w say so, chunk by
// chunk, in the order f32.BackChunks gives, which is the kernels' own
// (under the invariants build tag the region checker compares them with
// the chunks the kernel reports reading). With chunked, w (packed), y
// and bias have their gate rows in f32's chunked order
// (f32.LSTMStepPackedChunked): a reversed step reads each chunk's rows of
// w as one run.
type lstmStepOp struct {
	y, h, w, bias, c, hout Mat
	reverse, chunked       bool
}

func newLSTMStep(y, h, w, bias, c, hout Mat, reverse, chunked bool) *lstmStepOp {
	H := hout.Cols
	mustShape(y.Rows == 1 && h.Rows == 1 && c.Rows == 1 && hout.Rows == 1 && y.Cols == 4*H && c.Cols == H &&
		bias.Cols == 4*H && w.Rows == 4*H && w.Cols == h.Cols && w.Buf.ElemSize == 4 &&
		(!w.Buf.Packed || w.Off == 0 && w.LD == w.Cols && w.Rows*w.Cols == w.Buf.Elems) && (!reverse || H%8 == 0) &&
		(!chunked || w.Buf.Packed && H%f32.StepChunk == 0) &&
		(h.Buf != hout.Buf || h.Off+h.Cols <= hout.Off || hout.Off+hout.Cols <= h.Off))
	return &lstmStepOp{y, h, w, bias, c, hout, reverse, chunked}
}

func (o *lstmStepOp) kernel() Kernel { return KLSTMStep }
func (o *lstmStepOp) run() {
	H, k := o.hout.Cols, o.h.Cols
	switch {
	case o.chunked:
		f32.LSTMStepPackedChunked(H, k, o.h.F32(), o.w.F32(), o.y.F32(), o.bias.F32(), o.c.F32(), o.hout.F32(), o.reverse)
	case o.w.Buf.Packed && o.reverse:
		f32.LSTMStepPackedReverse(H, k, o.h.F32(), o.w.F32(), o.y.F32(), o.bias.F32(), o.c.F32(), o.hout.F32())
	case o.w.Buf.Packed:
		f32.LSTMStepPacked(H, k, o.h.F32(), o.w.F32(), o.y.F32(), o.bias.F32(), o.c.F32(), o.hout.F32())
	case o.reverse:
		f32.LSTMStepReverse(H, k, o.h.F32(), o.w.F32(), o.w.LD, o.y.F32(), o.bias.F32(), o.c.F32(), o.hout.F32())
	default:
		f32.LSTMStep(H, k, o.h.F32(), o.w.F32(), o.w.LD, o.y.F32(), o.bias.F32(), o.c.F32(), o.hout.F32())
	}
}
func (o *lstmStepOp) regions(fn func(Region, bool)) {
	if o.reverse && o.chunked {
		f32.BackChunks(o.hout.Cols, f32.StepChunk, func(lo, _ int) {
			emit(fn, o.w.RowRange(4*lo, 4*(lo+f32.StepChunk)), false)
		})
	} else if o.reverse {
		H := o.hout.Cols
		f32.BackChunks(H, f32.StepChunk, func(lo, hi int) {
			for g := range 4 {
				emit(fn, o.w.RowRange(g*H+lo, g*H+hi), false)
			}
		})
	} else {
		emit(fn, o.w, false)
	}
	emit(fn, o.h, false)
	emit(fn, o.y, false)
	emit(fn, o.bias, false)
	emit(fn, o.c, false)
	emit(fn, o.y, true)
	emit(fn, o.c, true)
	emit(fn, o.hout, true)
}

// gruOp finishes a GRU step for H = hout.Cols units: x [B][3H] holds
// W_ih x and hp [B][3H] W_hh h, both without biases; h_{t-1} is read from
// hprev and h_t written to hout (the same Mat for an update in place).
type gruOp struct{ x, hp, bih, bhh, hprev, hout Mat }

func newGRU(x, hp, bih, bhh, hprev, hout Mat) *gruOp {
	H := hout.Cols
	mustShape(x.Cols == 3*H && hp.Cols == 3*H && bih.Cols == 3*H && bhh.Cols == 3*H && hprev.Cols == H &&
		x.Rows == hout.Rows && hp.Rows == hout.Rows && hprev.Rows == hout.Rows)
	return &gruOp{x, hp, bih, bhh, hprev, hout}
}

func (o *gruOp) kernel() Kernel { return KGRU }
func (o *gruOp) run() {
	H := o.hout.Cols
	x, hp, bih, bhh, hprev, hout := o.x.F32(), o.hp.F32(), o.bih.F32(), o.bhh.F32(), o.hprev.F32(), o.hout.F32()
	for r := range o.hout.Rows {
		f32.GRUGates(H, H, x[r*o.x.LD:r*o.x.LD+3*H], hp[r*o.hp.LD:r*o.hp.LD+3*H], bih, bhh,
			hprev[r*o.hprev.LD:r*o.hprev.LD+H], hout[r*o.hout.LD:r*o.hout.LD+H])
	}
}
func (o *gruOp) regions(fn func(Region, bool)) {
	emit(fn, o.x, false)
	emit(fn, o.hp, false)
	emit(fn, o.bih, false)
	emit(fn, o.bhh, false)
	emit(fn, o.hprev, false)
	emit(fn, o.hout, true)
}

// elmanOp finishes an Elman (nn.RNN) step for h.Rows rows of H = h.Cols
// units: y [B][H] holds W_ih x + W_hh h without biases, bias [H] is
// b_ih + b_hh, and h receives tanh(y + bias), or max(y + bias, 0) for
// rnn.RNNReLU. h may be y.
type elmanOp struct {
	y, bias, h Mat
	cell       rnn.CellKind
}

func newElman(cell rnn.CellKind, y, bias, h Mat) *elmanOp {
	mustShape(cell.Elman() && y.Rows == h.Rows && y.Cols == h.Cols && bias.Cols == h.Cols && bias.Rows == 1)
	return &elmanOp{y, bias, h, cell}
}

func (o *elmanOp) kernel() Kernel { return KElman }
func (o *elmanOp) run() {
	H, relu := o.h.Cols, o.cell == rnn.RNNReLU
	y, bias, h := o.y.F32(), o.bias.F32(), o.h.F32()
	for r := range o.h.Rows {
		f32.ElmanGates(H, relu, y[r*o.y.LD:r*o.y.LD+H], bias, h[r*o.h.LD:r*o.h.LD+H])
	}
}
func (o *elmanOp) regions(fn func(Region, bool)) {
	emit(fn, o.y, false)
	emit(fn, o.bias, false)
	emit(fn, o.h, true)
}

// headOp adds bias (when it has one) to every row of c (contiguous rows)
// and applies the activation in place; then, if set, after copies results
// out of c into the caller's memory (cellular batching's per-sequence
// outputs).
type headOp struct {
	c, bias Mat
	act     rnn.Activation
	after   func()
}

func newHead(c, bias Mat, act rnn.Activation) *headOp {
	mustShape((c.LD == c.Cols || c.Rows == 1) && (bias.Buf == nil || bias.Cols == c.Cols))
	return &headOp{c: c, bias: bias, act: act}
}

func (o *headOp) kernel() Kernel { return KHead }
func (o *headOp) run() {
	o.compute()
	o.out()
}
func (o *headOp) out() {
	if o.after != nil {
		o.after()
	}
}
func (o *headOp) compute() {
	m, n, c := o.c.Rows, o.c.Cols, o.c.F32()
	if o.bias.Buf != nil {
		rnn.AddBias(m, n, c, n, o.bias.F32())
	}
	switch o.act {
	case rnn.ActSoftmax:
		rnn.Softmax(m, n, c)
	case rnn.ActLogSoftmax:
		rnn.LogSoftmax(m, n, c)
	}
}
func (o *headOp) regions(fn func(Region, bool)) {
	emit(fn, o.c, false)
	if o.bias.Buf != nil {
		emit(fn, o.bias, false)
	}
	emit(fn, o.c, true)
}

// collectOp reads src and hands it to fn, which copies what it needs into
// the caller's memory (cellular batching's per-step outputs).
type collectOp struct {
	src Mat
	fn  func()
}

func (o *collectOp) kernel() Kernel                { return KCopy }
func (o *collectOp) run()                          { o.fn() }
func (o *collectOp) compute()                      {}
func (o *collectOp) out()                          { o.fn() }
func (o *collectOp) regions(fn func(Region, bool)) { emit(fn, o.src, false) }
