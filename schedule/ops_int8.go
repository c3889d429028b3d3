package schedule

import (
	"errors"
	"fmt"

	"rnnserve/internal/f32"
	"rnnserve/rnn"
)

// ErrInt8Width is returned for int8 weights on a layer wider than the
// int8 products take (f32.MaxI8K inputs).
var ErrInt8Width = errors.New("schedule: layer too wide for int8 weights")

// i8Fits checks that every product of net is narrow enough for int8.
func i8Fits(net *rnn.Network) error {
	for k, dirs := range net.Layers {
		l := dirs[0]
		if w := max(l.Input, l.Out(), l.Hidden); w > f32.MaxI8K {
			return fmt.Errorf("%w: layer %d is %d wide, the most is %d", ErrInt8Width, k, w, f32.MaxI8K)
		}
	}
	return nil
}

// gemmI8Op is C = A·Wᵀ + beta·C with W stored int8: A's rows are
// quantized into q and their scales into s (f32.QuantizeI8), then
// multiplied by W (f32.GemmNTI8). w's Mat gives W's logical rows and
// columns; its buffer (1-byte elements) holds W packed by f32.PackI8,
// scales included, and is read whole but for the rows that pad its last
// panel (wr lists the regions). q and s are scratch the op writes before
// it reads them.
type gemmI8Op struct {
	c, a, w Mat
	wr      []Mat
	q, s    Mat
	beta    float32
	// reverse takes W's rows in chunks of reverseRows from the last (see
	// gemmOp's reverse and alternates): the same results, W read
	// backwards, and wr lists the chunks in that order.
	reverse bool
}

// reversedI8 marks an int8 product of one row whose W is read backwards;
// W's rows must be a multiple of 16 (whole panels in every chunk).
func reversedI8(o *gemmI8Op) *gemmI8Op {
	mustShape(o.c.Rows == 1 && o.w.Rows%16 == 0)
	o.reverse = true
	o.wr = o.wr[:0]
	pb := f32.I8PanelBytes(o.w.Cols)
	f32.BackChunks(o.w.Rows, reverseRows, func(lo, hi int) {
		o.wr = append(o.wr, i8Panels(o.w.Buf, lo/16*pb, (hi-lo)/16, o.w.Cols)...)
	})
	return o
}

// i8Regions is what a product reads of a packed int8 W [n][k] (buffer
// buf): every whole panel (i8Panels), then the last panel's n%16 real
// rows of each quad (as i8Panels says), their sums where the products
// read them, and their scales. The rows that pad the last panel are
// loaded with its quads (the same cache lines) but change no result, so
// they are not declared: the region checker could not tell.
func i8Regions(buf *Buffer, n, k int) []Mat {
	pb, full, r := f32.I8PanelBytes(k), n/16, n%16
	rs := i8Panels(buf, 0, full, k)
	if r > 0 {
		kq, at := f32.I8Stride(k), full*pb
		if f32.I8ReadsSums() {
			rs = append(rs, M(buf, at, kq/4, 4*r, 64), Dense(buf, at+16*kq, 1, 4*r))
		} else {
			if q := k / 4; q > 0 {
				rs = append(rs, M(buf, at, q, 4*r, 64))
			}
			if k%4 != 0 {
				rs = append(rs, M(buf, at+k/4*64, r, k%4, 4))
			}
		}
		rs = append(rs, Dense(buf, at+16*kq+64, 1, 4*r))
	}
	return rs
}

// i8Panels is what a product reads of panels whole panels of k columns
// from byte off. The VNNI and AVX2 products read all of each: its
// weights, the columns that pad the last quad (A's bytes are 64 there,
// so they count) and the sums that take the 64s back out. The pure-Go
// product multiplies the padding by A's zeros and reads no sums: of each
// panel, its weights but the padding, and its scales.
func i8Panels(buf *Buffer, off, panels, k int) []Mat {
	pb, kq, q := f32.I8PanelBytes(k), f32.I8Stride(k), k/4
	switch {
	case panels == 0:
		return nil
	case f32.I8ReadsSums():
		return []Mat{Dense(buf, off, 1, panels*pb)}
	}
	var rs []Mat
	if q > 0 {
		rs = append(rs, M(buf, off, panels, 64*q, pb))
	}
	for j := 0; j < 16 && k%4 != 0; j++ {
		rs = append(rs, M(buf, off+64*q+4*j, panels, k%4, pb))
	}
	return append(rs, M(buf, off+16*kq+64, panels, 64, pb))
}

// newGemmI8 multiplies a by the int8 W whose buffer w names, quantizing a
// into the first a.Rows rows of scratch q (bytes) and s (float32).
func newGemmI8(c, a, w Mat, q, s *Buffer, beta float32) *gemmI8Op {
	kq := f32.I8Stride(a.Cols)
	mustShape(c.Rows == a.Rows && a.Cols == w.Cols && c.Cols == w.Rows && w.Buf.ElemSize == 1 && w.Off == 0 &&
		w.Buf.Elems == f32.PackedI8Bytes(w.Rows, w.Cols) && q.ElemSize == 1 && q.Elems >= a.Rows*kq &&
		s.ElemSize == 4 && s.Elems >= a.Rows)
	return &gemmI8Op{c: c, a: a, w: w, wr: i8Regions(w.Buf, w.Rows, w.Cols), q: Dense(q, 0, a.Rows, kq), s: Dense(s, 0, 1, a.Rows), beta: beta}
}

func (o *gemmI8Op) kernel() Kernel { return KMatMul }
func (o *gemmI8Op) run() {
	m, n, k := o.c.Rows, o.c.Cols, o.a.Cols
	f32.QuantizeI8(m, k, o.a.F32(), o.a.LD, o.q.U8(), o.q.LD, o.s.F32())
	if !o.reverse {
		f32.GemmNTI8(m, n, k, o.q.U8(), o.q.LD, o.s.F32(), o.w.Buf.U8, o.beta, o.c.F32(), o.c.LD)
		return
	}
	pb, c := f32.I8PanelBytes(k), o.c.F32()
	f32.BackChunks(n, reverseRows, func(lo, hi int) {
		f32.GemmNTI8(m, hi-lo, k, o.q.U8(), o.q.LD, o.s.F32(), o.w.Buf.U8[lo/16*pb:], o.beta, c[lo:], o.c.LD)
	})
}
func (o *gemmI8Op) regions(fn func(Region, bool)) {
	for _, r := range o.wr {
		emit(fn, r, false)
	}
	emit(fn, o.a, false)
	if o.beta != 0 {
		emit(fn, o.c, false)
	}
	emit(fn, o.q, true)
	emit(fn, o.s, true)
	emit(fn, o.c, true)
}

// i8Scratch is the quantized rows (q) and their scales (s) an int8 product
// needs: room for rows rows of every width in cols.
func i8ScratchSize(rows int, cols ...int) (q, s int) {
	w := 0
	for _, c := range cols {
		w = max(w, f32.I8Stride(c))
	}
	return rows * w, rows
}
