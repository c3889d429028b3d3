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
	return p.build(in, opt), nil
}

// build builds the plan of a checked input.
func (p *Program) build(in Input, opt PlanOptions) *Plan {
	if p.part != nil {
		return p.part.plan(p, &in, opt)
	}
	b := &builder{prog: p, net: p.Net, B: in.B, T: in.T, in: &in}
	b.plan = &Plan{Schedule: p.Schedule, B: in.B, T: in.T, dry: p.dry}
	b.plan.Buffers = append(b.plan.Buffers, p.weights...)
	b.build(&in, opt)
	b.plan.index(1)
	return b.plan
}

// recorder is what every builder shares: it adds buffers to a plan and
// appends steps at the current position (layer, direction, time step,
// worker, phase).
type recorder struct {
	plan *Plan
	at   Step // position of the next step: Layer, Dir, T, Worker, Phase
}

// buffer adds a float32 buffer to the plan, allocated unless the plan is dry.
func (r *recorder) buffer(name string, kind BufferKind, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4}
	if !r.plan.dry {
		buf.F32 = make([]float32, elems)
	}
	r.plan.Buffers = append(r.plan.Buffers, buf)
	return buf
}

// bytes adds a buffer of bytes (ElemSize 1), allocated unless the plan is
// dry.
func (r *recorder) bytes(name string, kind BufferKind, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 1}
	if !r.plan.dry {
		buf.U8 = make([]uint8, elems)
	}
	r.plan.Buffers = append(r.plan.Buffers, buf)
	return buf
}

// input adds a float32 buffer that wraps a caller's slice, and makes it
// the plan's input slot (which Acquire binds the next input to).
func (r *recorder) input(slot **Buffer, name string, data []float32, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: KindInput, Elems: elems, ElemSize: 4, F32: data}
	r.plan.Buffers = append(r.plan.Buffers, buf)
	*slot = buf
	return buf
}

// ids adds an int64 buffer: data when given, else allocated (even in a dry
// plan: ids decide which rows are read).
func (r *recorder) ids(name string, kind BufferKind, elems int, data []int64) *Buffer {
	if data == nil {
		data = make([]int64, elems)
	}
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 8, I64: data}
	r.plan.Buffers = append(r.plan.Buffers, buf)
	return buf
}

// pos sets the position of the steps that follow.
func (r *recorder) pos(layer, dir, t int) { r.at.Layer, r.at.Dir, r.at.T = layer, dir, t }

// add appends the step of o at the current position.
func (r *recorder) add(o op) {
	s := r.at
	s.Kernel, s.op = o.kernel(), o
	r.plan.Steps = append(r.plan.Steps, s)
}

type builder struct {
	recorder
	prog *Program
	net  *rnn.Network
	B, T int
	in   *Input // for the rows each step runs (Input.Lengths)

	// Inputs and scratch shared by all layers, sized for the widest.
	h0, c0 *Buffer
	xh, y  *Buffer // A: [x_t; h], gate pre-activations
	yh     *Buffer // GRU: W_hh h
	xp     *Buffer // A+: X' for every step
	h, c   *Buffer // A+: recurrent state h; both: cell state c
	hfull  *Buffer // LSTM with projection: h before W_hr
	hn, cn *Buffer
}

// widths is the largest per-layer size of each scratch a stack needs.
type widths struct {
	in, out, hidden, rows, seq int // layer input, Out, H, Gates*H, Dirs*Out
	gru, lstm, proj            bool
}

func stackWidths(n *rnn.Network) widths {
	var w widths
	for k, dirs := range n.Layers {
		l := dirs[0]
		w.in, w.out, w.hidden = max(w.in, l.Input), max(w.out, l.Out()), max(w.hidden, l.Hidden)
		w.rows = max(w.rows, l.Rows())
		if k < len(n.Layers)-1 {
			w.seq = max(w.seq, len(dirs)*l.Out())
		}
		w.gru = w.gru || l.Cell == rnn.GRU
		w.lstm = w.lstm || l.Cell == rnn.LSTM
		w.proj = w.proj || l.Proj > 0
	}
	return w
}

// inputs adds the plan's input buffers (the embedding gather for token
// ids) and returns the first layer's input sequence [T][B][Input].
func (b *recorder) inputs(n *rnn.Network, emb *Buffer, in *Input, T, B int) (x *Buffer) {
	if n.Vocab == 0 {
		return b.input(&b.plan.in.features, "features", in.Features, T*B*n.Input)
	}
	tok := b.ids("tokens", KindInput, T*B, in.Tokens)
	b.plan.in.tokens = tok
	x = b.buffer("x", KindActivation, T*B*n.Input)
	b.pos(-1, 0, -1)
	b.add(newGather(Whole(x).reshape(T*B, n.Input), Dense(emb, 0, n.Vocab, n.Input), Whole(tok)))
	return x
}

// reshape views a whole-buffer Mat as rows×cols contiguous elements.
func (m Mat) reshape(rows, cols int) Mat { return Dense(m.Buf, m.Off, rows, cols) }

func (b *builder) build(in *Input, opt PlanOptions) {
	n, B, T := b.net, b.B, b.T
	x := b.inputs(n, b.prog.emb, in, T, B)
	if in.H0 != nil {
		b.h0 = b.input(&b.plan.in.h0, "h0", in.H0, n.StateSize(B))
	}
	if in.C0 != nil {
		b.c0 = b.input(&b.plan.in.c0, "c0", in.C0, n.CellSize(B))
	}

	w := stackWidths(n)
	if b.prog.Schedule == A {
		b.xh = b.buffer("xh", KindActivation, B*(w.in+w.out))
		b.y = b.buffer("y", KindActivation, B*w.rows)
	} else {
		b.xp = b.buffer("xp", KindActivation, T*B*w.rows)
		b.h = b.buffer("h", KindActivation, B*w.out)
	}
	if w.gru {
		b.yh = b.buffer("yh", KindActivation, B*w.rows)
	}
	if w.lstm {
		b.c = b.buffer("c", KindActivation, B*w.hidden)
	}
	if w.proj {
		b.hfull = b.buffer("hfull", KindActivation, B*w.hidden)
	}
	var seq [2]*Buffer
	var out *Buffer
	seq, out, b.hn, b.cn = b.stackBuffers(n, T, B, w)

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
		b.plan.head = b.headSteps(out, b.prog.headW, b.prog.headB)
	}
}

// stackBuffers adds the buffers every sequence plan's stack writes: the
// two sequences layers pass on to the next (ping-pong, as many as the
// stack needs), the last layer's output and the final states.
func (r *recorder) stackBuffers(n *rnn.Network, T, B int, w widths) (seq [2]*Buffer, out, hn, cn *Buffer) {
	if n.NumLayers > 1 {
		seq[0] = r.buffer("seq0", KindActivation, T*B*w.seq)
	}
	if n.NumLayers > 2 {
		seq[1] = r.buffer("seq1", KindActivation, T*B*w.seq)
	}
	out = r.buffer("output", KindOutput, T*B*n.OutputWidth())
	hn = r.buffer("h_n", KindOutput, n.StateSize(B))
	if n.HasCell() {
		cn = r.buffer("c_n", KindOutput, n.CellSize(B))
	}
	return seq, out, hn, cn
}

// times lists the time steps of direction d in the order they run.
func times(T, d int) []int {
	ts := make([]int, T)
	for i := range ts {
		if d == 0 {
			ts[i] = i
		} else {
			ts[i] = T - 1 - i
		}
	}
	return ts
}

// initState fills h (B rows of layer k's Out at hs) and c from h0/c0, or
// zeroes them.
func (b *builder) initState(l *rnn.Layer, k, d int, hs Mat) {
	n, B := b.net, b.B
	b.pos(k, d, -1)
	if b.h0 != nil {
		b.add(newCopy(hs, Dense(b.h0, n.StateOffset(k, d, B), B, l.Out())))
	} else {
		b.add(&zeroOp{hs})
	}
	if l.Cell != rnn.LSTM {
		return
	}
	c := Dense(b.c, 0, B, l.Hidden)
	if b.c0 != nil {
		b.add(newCopy(c, Dense(b.c0, n.CellOffset(k, d, B), B, l.Hidden)))
	} else {
		b.add(&zeroOp{c})
	}
}

// finalState copies h (at hs) and c into h_n and c_n.
func (b *builder) finalState(l *rnn.Layer, k, d int, hs Mat) {
	n, B := b.net, b.B
	b.pos(k, d, -1)
	b.add(newCopy(Dense(b.hn, n.StateOffset(k, d, B), B, l.Out()), hs))
	if l.Cell == rnn.LSTM {
		b.add(newCopy(Dense(b.cn, n.CellOffset(k, d, B), B, l.Hidden), Dense(b.c, 0, B, l.Hidden)))
	}
}

// seqRows is step t, direction d of a layer's output sequence out
// [T][B][dirs·O]: B rows of O values.
func seqRows(out *Buffer, t, d, B, O, dirs int) Mat {
	W := dirs * O
	return M(out, t*B*W+d*O, B, O, W)
}

// lstmGates adds the pointwise LSTM step reading pre-activations y and
// writing h, through W_hr when the layer has a projection.
func (b *builder) lstmGates(lw *layerWeights, y, h Mat) {
	l, n := lw.l, h.Rows
	H := l.Hidden
	c := Dense(b.c, 0, n, H)
	dst := h
	if l.Proj > 0 {
		dst = Dense(b.hfull, 0, n, H)
	}
	b.add(newLSTM(y, Whole(lw.bias), c, dst))
	if l.Proj > 0 {
		b.add(newGemmNT(h, dst, Dense(lw.whr, 0, l.Proj, H), 0))
	}
}

// layerA adds Schedule A's steps for one direction of one layer: per step,
// xh = [x_t; h], then Y = xh·G over the concatenated G [In+Out][Rows]. A
// GRU multiplies x and h by G's two row blocks apart (W_in x and W_hn h
// must stay apart); both blocks are contiguous, so G is still read whole.
func (b *builder) layerA(lw *layerWeights, k, d int, x, out *Buffer) {
	l, B, T := lw.l, b.B, b.T
	I, O, R := l.Input, l.Out(), l.Rows()
	ld := I + O // leading dimension of xh
	dirs := len(b.net.Layers[k])
	xin := M(b.xh, 0, B, I, ld)
	hs := M(b.xh, I, B, O, ld)
	xh := M(b.xh, 0, B, I+O, ld)
	y := Dense(b.y, 0, B, R)
	g := Dense(lw.g, 0, I+O, R)
	b.initState(l, k, d, hs)
	for _, t := range times(T, d) {
		b.pos(k, d, t)
		n := b.in.active(t)
		xin, hs, xh, y := xin.RowRange(0, n), hs.RowRange(0, n), xh.RowRange(0, n), y.RowRange(0, n)
		b.add(newCopy(xin, Dense(x, t*B*I, n, I)))
		switch {
		case l.Cell == rnn.LSTM:
			b.add(newGemmNN(y, xh, g, 0))
			b.lstmGates(lw, y, hs)
		case l.Cell.Elman():
			b.add(newGemmNN(y, xh, g, 0))
			b.add(newElman(l.Cell, y, Whole(lw.bias), hs))
		default:
			yh := Dense(b.yh, 0, n, R)
			b.add(newGemmNN(y, xin, g.RowRange(0, I), 0))
			b.add(newGemmNN(yh, hs, g.RowRange(I, I+O), 0))
			b.add(newGRU(y, yh, Whole(lw.bih), Whole(lw.bhh), hs, hs))
		}
		b.add(newCopy(seqRows(out, t, d, B, O, dirs).RowRange(0, n), hs))
	}
	b.finalState(l, k, d, hs)
}

// layerAPlus adds Schedule A+'s steps for one direction of one layer:
// X' = I'·G1ᵀ for every step at once, then per step Y = X'[t] + h·G2ᵀ.
func (b *builder) layerAPlus(lw *layerWeights, k, d int, x, out *Buffer) {
	l, B, T := lw.l, b.B, b.T
	I, O, R := l.Input, l.Out(), l.Rows()
	dirs := len(b.net.Layers[k])
	h := Dense(b.h, 0, B, O)
	whh := Dense(lw.whh, 0, R, O)
	b.pos(k, d, -1)
	b.add(readOnce(newGemmNT(Dense(b.xp, 0, T*B, R), Dense(x, 0, T*B, I), Dense(lw.wih, 0, R, I), 0)))
	b.initState(l, k, d, h)
	for _, t := range times(T, d) {
		b.pos(k, d, t)
		n := b.in.active(t)
		xp, h := Dense(b.xp, t*B*R, n, R), h.RowRange(0, n)
		switch {
		case l.Cell == rnn.LSTM:
			b.add(newGemmNT(xp, h, whh, 1))
			b.lstmGates(lw, xp, h)
		case l.Cell.Elman():
			b.add(newGemmNT(xp, h, whh, 1))
			b.add(newElman(l.Cell, xp, Whole(lw.bias), h))
		default:
			yh := Dense(b.yh, 0, n, R)
			b.add(newGemmNT(yh, h, whh, 0))
			b.add(newGRU(xp, yh, Whole(lw.bih), Whole(lw.bhh), h, h))
		}
		b.add(newCopy(seqRows(out, t, d, B, O, dirs).RowRange(0, n), h))
	}
	b.finalState(l, k, d, h)
}

// headSteps applies the head to what it reads (Network.HeadInput): one
// product over its rows, then the bias and the activation.
func (b *builder) headSteps(out, hw, hb *Buffer) *Buffer {
	n := b.net
	V, W := n.HeadOut, n.OutputWidth()
	src := b.headInput(n, b.in, out, b.hn)
	head := b.buffer("head", KindOutput, src.Rows*V)
	b.pos(-1, 0, -1)
	b.add(newGemmNT(Dense(head, 0, src.Rows, V), src, Dense(hw, 0, V, W), 0))
	b.add(newHead(Dense(head, 0, src.Rows, V), Whole(hb), n.Activation))
	return head
}

// headInput returns the rows the head reads, [rows][OutputWidth]: every
// step of the output (T·B rows), or one row per sequence, gathered by
// steps added here where they are not already contiguous: each row's
// last step (its Lengths) of the output, or the last layer's final h of
// each direction side by side, as torch.cat(h_n[-2], h_n[-1]) lays
// them.
func (r *recorder) headInput(n *rnn.Network, in *Input, out, hn *Buffer) Mat {
	T, B, W := in.T, in.B, n.OutputWidth()
	top := len(n.Layers) - 1
	switch {
	case n.HeadInput == rnn.HeadEveryStep:
		return Dense(out, 0, T*B, W)
	case n.HeadInput == rnn.HeadLastStep && in.Lengths == nil:
		return Dense(out, (T-1)*B*W, B, W)
	case n.HeadInput == rnn.HeadFinalState && n.Dirs() == 1:
		return Dense(hn, n.StateOffset(top, 0, B), B, W)
	}
	dst := Dense(r.buffer("head_in", KindActivation, B*W), 0, B, W)
	r.pos(-1, 0, -1)
	if n.HeadInput == rnn.HeadLastStep {
		srcs := make([]Mat, B)
		for i, l := range in.Lengths {
			srcs[i] = Dense(out, ((l-1)*B+i)*W, 1, W)
		}
		r.add(newGatherMats(dst, srcs))
		return dst
	}
	O := n.Out()
	for d := range n.Layers[top] {
		r.add(newCopy(dst.ColRange(d*O, (d+1)*O), Dense(hn, n.StateOffset(top, d, B), B, O)))
	}
	return dst
}
