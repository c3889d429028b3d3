package schedule

import (
	"rnnserve/rnn"
)

// Plan builds the plan that runs in on p's network. The plan reads the
// input slices in place. For a dry Program the plan can only be walked.
func (p *Program) Plan(in Input, opt PlanOptions) (*Plan, error) {
	if err := p.check(&in); err != nil {
		return nil, err
	}
	if p.part != nil {
		return p.part.plan(p, &in, opt), nil
	}
	b := &builder{prog: p, net: p.Net, B: in.B, T: in.T}
	b.plan = &Plan{Schedule: p.Schedule, B: in.B, T: in.T, dry: p.dry}
	b.plan.Buffers = append(b.plan.Buffers, p.weights...)
	b.build(&in, opt)
	return b.plan, nil
}

type builder struct {
	prog *Program
	net  *rnn.Network
	plan *Plan
	B, T int

	// Inputs and scratch shared by all layers.
	h0, c0    *Buffer
	xh, y, yh *Buffer // A: [x_t; h], gate pre-activations; GRU: W_hh h
	xp        *Buffer // A+: X' for every step
	h, c      *Buffer // A+: recurrent state h; both: cell state c
	hfull     *Buffer // LSTM with projection: h before W_hr
	hn, cn    *Buffer
}

// buffer adds a buffer to the plan, allocated unless the plan is dry.
func (b *builder) buffer(name string, kind BufferKind, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4}
	if !b.plan.dry {
		buf.F32 = make([]float32, elems)
	}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

// input adds a buffer that wraps a caller's slice.
func (b *builder) input(name string, data []float32, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: KindInput, Elems: elems, ElemSize: 4, F32: data}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

func (b *builder) add(s Step) { b.plan.Steps = append(b.plan.Steps, s) }

// mat is the region of a rows×cols float32 sub-matrix starting at element
// off of buf, with leading dimension ld.
func mat(buf *Buffer, off, rows, cols, ld int) Region {
	if cols == ld || rows == 1 {
		return Region{Buf: buf, Off: 4 * int64(off), Len: 4 * int64(rows*cols), Count: 1}
	}
	return Region{Buf: buf, Off: 4 * int64(off), Len: 4 * int64(cols), Count: rows, Stride: 4 * int64(ld)}
}

// all is the region of a whole buffer.
func all(buf *Buffer) Region { return Region{Buf: buf, Len: buf.Bytes(), Count: 1} }

func (b *builder) build(in *Input, opt PlanOptions) {
	n, B, T := b.net, b.B, b.T
	var x *Buffer // the first layer's input sequence [T][B][Input]
	if n.Vocab > 0 {
		tok := &Buffer{Name: "tokens", Kind: KindInput, Elems: T * B, ElemSize: 8, I64: in.Tokens}
		b.plan.Buffers = append(b.plan.Buffers, tok)
		x = b.buffer("x", KindActivation, T*B*n.Input)
		b.embed(tok, x, in.Tokens)
	} else {
		x = b.input("features", in.Features, T*B*n.Input)
	}
	states := n.NumLayers * n.Dirs() * B
	if in.H0 != nil {
		b.h0 = b.input("h0", in.H0, states*n.Out())
	}
	if in.C0 != nil {
		b.c0 = b.input("c0", in.C0, states*n.Hidden)
	}

	H, O, R := n.Hidden, n.Out(), n.Cell.Gates()*n.Hidden
	if b.prog.Schedule == A {
		b.xh = b.buffer("xh", KindActivation, B*(b.prog.maxIn+O))
		b.y = b.buffer("y", KindActivation, B*R)
	} else {
		b.xp = b.buffer("xp", KindActivation, T*B*R)
		b.h = b.buffer("h", KindActivation, B*O)
	}
	if n.Cell == rnn.GRU {
		b.yh = b.buffer("yh", KindActivation, B*R)
	} else {
		b.c = b.buffer("c", KindActivation, B*H)
	}
	if n.Proj > 0 {
		b.hfull = b.buffer("hfull", KindActivation, B*H)
	}
	var seq [2]*Buffer
	if n.NumLayers > 1 {
		seq[0] = b.buffer("seq0", KindActivation, T*B*n.OutputWidth())
	}
	if n.NumLayers > 2 {
		seq[1] = b.buffer("seq1", KindActivation, T*B*n.OutputWidth())
	}
	out := b.buffer("output", KindOutput, T*B*n.OutputWidth())
	b.hn = b.buffer("h_n", KindOutput, states*O)
	if n.Cell == rnn.LSTM {
		b.cn = b.buffer("c_n", KindOutput, states*H)
	}

	for k, dirs := range b.prog.layers {
		dst := out
		if k < n.NumLayers-1 {
			dst = seq[k%2]
		}
		for d := range dirs {
			lw := &dirs[d]
			if b.prog.Schedule == A {
				b.layerA(lw, k, d, x, dst)
			} else {
				b.layerAPlus(lw, k, d, x, dst)
			}
		}
		x = dst
	}
	b.plan.output, b.plan.hn, b.plan.cn = out, b.hn, b.cn
	if opt.Head && n.HeadOut > 0 {
		b.plan.head = b.headSteps(out)
	}
}

func (b *builder) embed(tok, x *Buffer, ids []int64) {
	n := b.net
	emb, dim := b.prog.emb, n.Input
	reads := make([]Region, 0, len(ids)+1)
	reads = append(reads, all(tok))
	for _, id := range ids {
		reads = append(reads, mat(emb, int(id)*dim, 1, dim, dim))
	}
	b.add(Step{Kernel: KEmbed, Layer: -1, T: -1, Reads: reads, Writes: []Region{all(x)},
		run: func() { rnn.Embed(x.F32, emb.F32, dim, tok.I64) }})
}

// times lists the time steps of direction d in the order they run.
func (b *builder) times(d int) []int {
	ts := make([]int, b.T)
	for i := range ts {
		if d == 0 {
			ts[i] = i
		} else {
			ts[i] = b.T - 1 - i
		}
	}
	return ts
}

// initState fills h (rows of width Out at off with leading dimension ldh)
// and c from h0/c0, or zeroes them.
func (b *builder) initState(k, d int, h *Buffer, off, ldh int) {
	n, B, O, H := b.net, b.B, b.net.Out(), b.net.Hidden
	idx := (k*n.Dirs() + d) * B
	hs := mat(h, off, B, O, ldh)
	if b.h0 != nil {
		h0 := b.h0
		b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: -1, Reads: []Region{mat(h0, idx*O, B, O, O)}, Writes: []Region{hs},
			run: func() { rnn.CopyRows(B, O, h.F32[off:], ldh, h0.F32[idx*O:], O) }})
	} else {
		b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: -1, Writes: []Region{hs},
			run: func() { rnn.ZeroRows(B, O, h.F32[off:], ldh) }})
	}
	if b.c == nil {
		return
	}
	c := b.c
	if b.c0 != nil {
		c0 := b.c0
		b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: -1, Reads: []Region{mat(c0, idx*H, B, H, H)}, Writes: []Region{all(c)},
			run: func() { copy(c.F32, c0.F32[idx*H:(idx+B)*H]) }})
	} else {
		b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: -1, Writes: []Region{all(c)},
			run: func() { clear(c.F32) }})
	}
}

// finalState copies h and c into h_n and c_n.
func (b *builder) finalState(k, d int, h *Buffer, off, ldh int) {
	n, B, O, H := b.net, b.B, b.net.Out(), b.net.Hidden
	idx := (k*n.Dirs() + d) * B
	hn := b.hn
	b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: -1, Reads: []Region{mat(h, off, B, O, ldh)}, Writes: []Region{mat(hn, idx*O, B, O, O)},
		run: func() { rnn.CopyRows(B, O, hn.F32[idx*O:], O, h.F32[off:], ldh) }})
	if b.c == nil {
		return
	}
	c, cn := b.c, b.cn
	b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: -1, Reads: []Region{all(c)}, Writes: []Region{mat(cn, idx*H, B, H, H)},
		run: func() { copy(cn.F32[idx*H:(idx+B)*H], c.F32) }})
}

// emit copies the step's h into the layer output at time t, direction d.
func (b *builder) emit(k, d, t int, h *Buffer, off, ldh int, out *Buffer) {
	B, O, W := b.B, b.net.Out(), b.net.OutputWidth()
	dst := t*B*W + d*O
	b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: t, Reads: []Region{mat(h, off, B, O, ldh)}, Writes: []Region{mat(out, dst, B, O, W)},
		run: func() { rnn.CopyRows(B, O, out.F32[dst:], W, h.F32[off:], ldh) }})
}

// lstmGates adds the pointwise LSTM step reading pre-activations y (rows at
// yoff, leading dimension R) and writing h (at hoff, leading dimension ldh),
// through W_hr when the layer has a projection.
func (b *builder) lstmGates(lw *layerWeights, k, d, t int, y *Buffer, yoff int, h *Buffer, hoff, ldh int) {
	l, B := lw.l, b.B
	H, O, R := l.Hidden, l.Out(), l.Rows()
	c, bias := b.c, lw.bias
	dst, doff, ldd := h, hoff, ldh
	if l.Proj > 0 {
		dst, doff, ldd = b.hfull, 0, H
	}
	b.add(Step{Kernel: KLSTM, Layer: k, Dir: d, T: t,
		Reads:  []Region{mat(y, yoff, B, R, R), all(bias), all(c)},
		Writes: []Region{all(c), mat(dst, doff, B, H, ldd)},
		run:    func() { rnn.LSTMPointwise(B, H, y.F32[yoff:], R, bias.F32, c.F32, dst.F32[doff:], ldd) }})
	if l.Proj == 0 {
		return
	}
	hf, whr := b.hfull, lw.whr
	b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: t,
		Reads:  []Region{all(whr), all(hf)},
		Writes: []Region{mat(h, hoff, B, O, ldh)},
		run:    func() { rnn.MatMulT(B, O, H, hf.F32, H, whr.F32, H, 0, h.F32[hoff:], ldh) }})
}

// layerA adds Schedule A's steps for one direction of one layer: per step,
// xh = [x_t; h], then Y = xh·G over the concatenated G [In+Out][Rows]. A
// GRU multiplies x and h by G's two row blocks apart (W_in x and W_hn h
// must stay apart); both blocks are contiguous, so G is still read whole.
func (b *builder) layerA(lw *layerWeights, k, d int, x, out *Buffer) {
	l, B := lw.l, b.B
	I, O, R := l.Input, l.Out(), l.Rows()
	ld := I + O // leading dimension of xh
	xh, y, g := b.xh, b.y, lw.g
	b.initState(k, d, xh, I, ld)
	for _, t := range b.times(d) {
		xoff := t * B * I
		b.add(Step{Kernel: KCopy, Layer: k, Dir: d, T: t, Reads: []Region{mat(x, xoff, B, I, I)}, Writes: []Region{mat(xh, 0, B, I, ld)},
			run: func() { rnn.CopyRows(B, I, xh.F32, ld, x.F32[xoff:], I) }})
		if l.Cell == rnn.LSTM {
			b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: t,
				Reads:  []Region{all(g), mat(xh, 0, B, ld, ld)},
				Writes: []Region{mat(y, 0, B, R, R)},
				run:    func() { rnn.MatMul(B, R, ld, xh.F32, ld, g.F32, R, 0, y.F32, R) }})
			b.lstmGates(lw, k, d, t, y, 0, xh, I, ld)
		} else {
			yh, bih, bhh := b.yh, lw.bih, lw.bhh
			b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: t,
				Reads:  []Region{mat(g, 0, I, R, R), mat(xh, 0, B, I, ld)},
				Writes: []Region{mat(y, 0, B, R, R)},
				run:    func() { rnn.MatMul(B, R, I, xh.F32, ld, g.F32, R, 0, y.F32, R) }})
			b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: t,
				Reads:  []Region{mat(g, I*R, O, R, R), mat(xh, I, B, O, ld)},
				Writes: []Region{mat(yh, 0, B, R, R)},
				run:    func() { rnn.MatMul(B, R, O, xh.F32[I:], ld, g.F32[I*R:], R, 0, yh.F32, R) }})
			b.add(Step{Kernel: KGRU, Layer: k, Dir: d, T: t,
				Reads:  []Region{mat(y, 0, B, R, R), mat(yh, 0, B, R, R), all(bih), all(bhh), mat(xh, I, B, O, ld)},
				Writes: []Region{mat(xh, I, B, O, ld)},
				run:    func() { rnn.GRUPointwise(B, l.Hidden, y.F32, R, yh.F32, R, bih.F32, bhh.F32, xh.F32[I:], ld) }})
		}
		b.emit(k, d, t, xh, I, ld, out)
	}
	b.finalState(k, d, xh, I, ld)
}

// layerAPlus adds Schedule A+'s steps for one direction of one layer:
// X' = I'·G1ᵀ for every step at once, then per step Y = X'[t] + h·G2ᵀ.
func (b *builder) layerAPlus(lw *layerWeights, k, d int, x, out *Buffer) {
	l, B, T := lw.l, b.B, b.T
	I, O, R := l.Input, l.Out(), l.Rows()
	xp, h, wih, whh := b.xp, b.h, lw.wih, lw.whh
	b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: -1,
		Reads:  []Region{all(wih), mat(x, 0, T*B, I, I)},
		Writes: []Region{mat(xp, 0, T*B, R, R)},
		run:    func() { rnn.MatMulT(T*B, R, I, x.F32, I, wih.F32, I, 0, xp.F32, R) }})
	b.initState(k, d, h, 0, O)
	for _, t := range b.times(d) {
		yoff := t * B * R
		if l.Cell == rnn.LSTM {
			b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: t,
				Reads:  []Region{all(whh), all(h), mat(xp, yoff, B, R, R)},
				Writes: []Region{mat(xp, yoff, B, R, R)},
				run:    func() { rnn.MatMulT(B, R, O, h.F32, O, whh.F32, O, 1, xp.F32[yoff:], R) }})
			b.lstmGates(lw, k, d, t, xp, yoff, h, 0, O)
		} else {
			yh, bih, bhh := b.yh, lw.bih, lw.bhh
			b.add(Step{Kernel: KMatMul, Layer: k, Dir: d, T: t,
				Reads:  []Region{all(whh), all(h)},
				Writes: []Region{mat(yh, 0, B, R, R)},
				run:    func() { rnn.MatMulT(B, R, O, h.F32, O, whh.F32, O, 0, yh.F32, R) }})
			b.add(Step{Kernel: KGRU, Layer: k, Dir: d, T: t,
				Reads:  []Region{mat(xp, yoff, B, R, R), mat(yh, 0, B, R, R), all(bih), all(bhh), all(h)},
				Writes: []Region{all(h)},
				run:    func() { rnn.GRUPointwise(B, l.Hidden, xp.F32[yoff:], R, yh.F32, R, bih.F32, bhh.F32, h.F32, O) }})
		}
		b.emit(k, d, t, h, 0, O, out)
	}
	b.finalState(k, d, h, 0, O)
}

// headSteps applies the head to every time step of out: one product over
// all T*B rows, then the bias and the activation.
func (b *builder) headSteps(out *Buffer) *Buffer {
	n := b.net
	rows, V, W := b.T*b.B, n.HeadOut, n.OutputWidth()
	head := b.buffer("head", KindOutput, rows*V)
	hw, hb, act := b.prog.headW, b.prog.headB, n.Activation
	b.add(Step{Kernel: KMatMul, Layer: -1, T: -1,
		Reads:  []Region{all(hw), all(out)},
		Writes: []Region{all(head)},
		run:    func() { rnn.MatMulT(rows, V, W, out.F32, W, hw.F32, W, 0, head.F32, V) }})
	b.add(Step{Kernel: KHead, Layer: -1, T: -1,
		Reads:  []Region{all(head), all(hb)},
		Writes: []Region{all(head)},
		run: func() {
			rnn.AddBias(rows, V, head.F32, V, hb.F32)
			switch act {
			case rnn.ActSoftmax:
				rnn.Softmax(rows, V, head.F32)
			case rnn.ActLogSoftmax:
				rnn.LogSoftmax(rows, V, head.F32)
			}
		}})
	return head
}
