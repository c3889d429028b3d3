package schedule

import (
	"fmt"
	"runtime"

	"rnnserve/rnn"
)

// The partitioned schedule (DeepCPU: Zhang, Rajbhandari, Ren and He,
// "DeepCPU: Serving RNN-based Deep Learning Models 10x Faster", USENIX
// ATC 2018, Section 4): A+'s order of work, with every layer's hidden units
// split across the workers of a Pool, one per core. Worker w owns units
// [u0, u1) of every layer and direction, and with them the rows of W_ih
// and W_hh that feed those units' gates (all 4 of an LSTM's, all 3 of a
// GRU's), copied gate-major into memory the worker itself allocates and
// first touches. Each time step it multiplies the previous h (all units)
// by its rows of W_hh, which stay in its core's private L2 from one step
// to the next when the slice fits, finishes the gates of its own units
// (so c never leaves the worker) and writes h for those units straight
// into the layer's output sequence, which is the next step's input: h
// makes no extra trip. One barrier ends every step.
//
// Per layer and direction the phases are:
//
//	proj   X'_w = X·W_ih,wᵀ for all T·B rows (the worker's gate columns only)
//	t...   Y_w = X'_w[t] + h_{t-1}·W_hh,wᵀ; gates of units [u0,u1) → out[t]
//	       (LSTM with projection: gates → hfull, barrier, then rows
//	       [p0,p1) of h = W_hr·hfull, split like the units)
//
// With a zero initial state the first step skips the recurrent product.
// The embedding gather, the head product (split by output rows) and its
// softmax (split by time steps) are phases too.
//
// The plan lists every worker's steps with the regions it touches, phase
// by phase and worker by worker within a phase, so the traffic analysis
// replays them as one serial trace; each step's Worker says whose it is,
// so one worker's part can also be replayed alone (through one core's
// private cache). Its first step runs the whole job on the pool; the
// others' run functions do nothing.

// PartitionOptions configure NewPartitioned. Zero values mean defaults.
type PartitionOptions struct {
	// Workers is the number of cores the units are split over: 0 means
	// the Pool's size, or runtime.GOMAXPROCS(0) without a Pool. One worker
	// runs on the calling goroutine with no pool at all.
	Workers int
	// Pool runs the workers; it must have exactly Workers workers. nil
	// means DefaultPool(Workers) when the program has weights and more
	// than one worker.
	Pool *Pool
	// Precision of the stored recurrent weights.
	Precision Precision
}

type partProgram struct {
	workers int
	pool    *Pool
	prec    Precision
	units   []span // worker w's hidden units, the same in every layer
	prow    []span // worker w's rows of W_hr (projection only)
	layers  [][]partLayer
}

type partLayer struct {
	l *rnn.Layer
	w []partSlice
}

// partSlice is one worker's share of one layer and direction: the rows of
// each weight matrix for its units, gate-major (row g*nu+j is the source's
// row g*H+u0+j). With BF16 precision the data is in the *16 slices and the
// Buffers have 2-byte elements and no F32 data.
type partSlice struct {
	wih, whh, whr       *Buffer
	wih16, whh16, whr16 []uint16
	bias                *Buffer // LSTM: b_ih + b_hh
	bih, bhh            *Buffer // GRU
}

// span is the index range [lo, hi).
type span struct{ lo, hi int }

func (s span) n() int { return s.hi - s.lo }

// split divides [0, n) into parts contiguous spans, as even as possible,
// with boundaries on multiples of 8 when every part can still get at least
// 16: the gate kernels do 8 units at a time.
func split(n, parts int) []span {
	align := 1
	if n >= 16*parts {
		align = 8
	}
	s := make([]span, parts)
	lo := 0
	for w := range s {
		hi := n
		if w < parts-1 {
			hi = (n*(w+1)/parts + align/2) / align * align
			hi = min(max(hi, lo), n)
		}
		s[w] = span{lo, hi}
		lo = hi
	}
	return s
}

// NewPartitioned prepares net for the Partitioned schedule. With weights
// and more than one worker it copies every worker's share of the weights
// on that worker's thread, through the pool.
func NewPartitioned(net *rnn.Network, opt PartitionOptions) (*Program, error) {
	if !net.Uniform() {
		return nil, ErrMixedStack
	}
	dry := net.Dry()
	n := opt.Workers
	if n == 0 {
		if opt.Pool != nil {
			n = opt.Pool.Workers()
		} else {
			n = runtime.GOMAXPROCS(0)
		}
	}
	switch {
	case n < 1 || n > MaxWorkers:
		return nil, fmt.Errorf("%w: %d workers, want 1..%d", ErrPool, n, MaxWorkers)
	case opt.Pool != nil && opt.Pool.Workers() != n:
		return nil, fmt.Errorf("%w: %d workers but the pool has %d", ErrPool, n, opt.Pool.Workers())
	case opt.Precision != F32 && opt.Precision != BF16:
		return nil, fmt.Errorf("%w %v", ErrUnknownPrecision, opt.Precision)
	}
	pool := opt.Pool
	if pool == nil && !dry && n > 1 {
		var err error
		if pool, err = DefaultPool(n); err != nil {
			return nil, err
		}
	}
	p := &Program{Net: net, Schedule: Partitioned, dry: dry}
	pp := &partProgram{workers: n, pool: pool, prec: opt.Precision, units: split(net.Hidden, n)}
	if net.Proj > 0 {
		pp.prow = split(net.Proj, n)
	}
	p.part = pp
	if net.Vocab > 0 {
		p.emb = p.weight("embedding", net.Vocab*net.Input, net.Embedding)
	}
	es := opt.Precision.elemSize()
	for k, dirs := range net.Layers {
		var pls []partLayer
		for d, l := range dirs {
			p.maxIn = max(p.maxIn, l.Input)
			pl := partLayer{l: l, w: make([]partSlice, n)}
			for w := range pl.w {
				name := fmt.Sprintf("l%d", k)
				if d == 1 {
					name += "_reverse"
				}
				name += fmt.Sprintf(".w%d", w)
				rows := l.Cell.Gates() * pp.units[w].n()
				s := &pl.w[w]
				s.wih = p.addWeight(name+".weight_ih", rows*l.Input, es)
				s.whh = p.addWeight(name+".weight_hh", rows*l.Out(), es)
				if l.Cell == rnn.LSTM {
					s.bias = p.addWeight(name+".bias", rows, 4)
				} else {
					s.bih = p.addWeight(name+".bias_ih", rows, 4)
					s.bhh = p.addWeight(name+".bias_hh", rows, 4)
				}
				if l.Proj > 0 {
					s.whr = p.addWeight(name+".weight_hr", pp.prow[w].n()*l.Hidden, es)
				}
			}
			pls = append(pls, pl)
		}
		pp.layers = append(pp.layers, pls)
	}
	if net.HeadOut > 0 {
		p.headW = p.weight("head.weight", net.HeadOut*net.OutputWidth(), net.HeadW)
		p.headB = p.weight("head.bias", net.HeadOut, net.HeadB)
	}
	if !dry {
		if pool != nil {
			pool.Each(pp.fill)
		} else {
			for w := 0; w < n; w++ {
				pp.fill(w)
			}
		}
	}
	return p, nil
}

// Workers is the number of workers a Partitioned program splits every
// layer over; 1 for the other schedules, which run on one core.
func (p *Program) Workers() int {
	if p.part == nil {
		return 1
	}
	return p.part.workers
}

// Precision is how the program stores its recurrent weights: F32 except
// for a Partitioned program built with BF16.
func (p *Program) Precision() Precision {
	if p.part == nil {
		return F32
	}
	return p.part.prec
}

func (p *Program) addWeight(name string, elems, elemSize int) *Buffer {
	b := &Buffer{Name: name, Kind: KindWeight, Elems: elems, ElemSize: elemSize}
	p.weights = append(p.weights, b)
	return b
}

// fill allocates and copies worker w's share of every layer's weights. It
// runs on worker w's thread, so the pages are first touched there.
func (pp *partProgram) fill(w int) {
	u := pp.units[w]
	for _, dirs := range pp.layers {
		for _, pl := range dirs {
			l, s := pl.l, &pl.w[w]
			G := l.Cell.Gates()
			gather := func(src []float32, cols int) []float32 {
				dst := make([]float32, G*u.n()*cols)
				for g := 0; g < G; g++ {
					from := (g*l.Hidden + u.lo) * cols
					copy(dst[g*u.n()*cols:(g+1)*u.n()*cols], src[from:from+u.n()*cols])
				}
				return dst
			}
			wih, whh := gather(l.Wih, l.Input), gather(l.Whh, l.Out())
			var whr []float32
			if l.Proj > 0 {
				r := pp.prow[w]
				whr = append([]float32(nil), l.Whr[r.lo*l.Hidden:r.hi*l.Hidden]...)
			}
			if pp.prec == BF16 {
				s.wih16, s.whh16 = toBF16(wih), toBF16(whh)
				if whr != nil {
					s.whr16 = toBF16(whr)
				}
			} else {
				s.wih.F32, s.whh.F32 = wih, whh
				if whr != nil {
					s.whr.F32 = whr
				}
			}
			if l.Cell == rnn.LSTM {
				s.bias.F32 = gather(sumBias(l), 1)
			} else {
				s.bih.F32, s.bhh.F32 = gather(l.Bih, 1), gather(l.Bhh, 1)
			}
		}
	}
}

func toBF16(v []float32) []uint16 {
	b := make([]uint16, len(v))
	rnn.ToBF16(b, v)
	return b
}

// matMulT is C = A·Wᵀ + beta·C over one of the worker's weight matrices,
// float32 or bf16.
func matMulT(m, n, k int, a []float32, lda int, w []float32, w16 []uint16, beta float32, c []float32, ldc int) {
	if w16 != nil {
		rnn.MatMulTBF16(m, n, k, a, lda, w16, k, beta, c, ldc)
		return
	}
	rnn.MatMulT(m, n, k, a, lda, w, k, beta, c, ldc)
}

func (pp *partProgram) run(phases []func(w int)) {
	if pp.pool == nil {
		for _, f := range phases {
			f(0)
		}
		return
	}
	pp.pool.Run(phases)
}

// pbuilder builds one Partitioned plan.
type pbuilder struct {
	pp     *partProgram
	prog   *Program
	net    *rnn.Network
	plan   *Plan
	B, T   int
	dry    bool
	phases []func(w int)
	regs   []Region // backing store for the steps' regions

	h0, c0, hn, cn *Buffer
	xp, c, yh      []*Buffer // per worker
	hfull, zero    *Buffer
}

func nop() {}

func (b *pbuilder) buffer(name string, kind BufferKind, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4}
	if !b.dry {
		buf.F32 = make([]float32, elems)
	}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

func (b *pbuilder) input(name string, data []float32, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: KindInput, Elems: elems, ElemSize: 4, F32: data}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

// step records worker w's kernel call with its regions.
func (b *pbuilder) step(w int, k Kernel, layer, dir, t int, reads, writes []Region) {
	at := len(b.regs)
	b.regs = append(b.regs, reads...)
	b.regs = append(b.regs, writes...)
	rs := b.regs[at : at+len(reads) : at+len(reads)]
	ws := b.regs[at+len(reads) : len(b.regs) : len(b.regs)]
	b.plan.Steps = append(b.plan.Steps, Step{Kernel: k, Layer: layer, Dir: dir, T: t, Worker: w, Reads: rs, Writes: ws, run: nop})
}

// phase adds the code of one phase; a dry plan keeps none.
func (b *pbuilder) phase(f func(w int)) {
	if !b.dry {
		b.phases = append(b.phases, f)
	}
}

func (pp *partProgram) plan(prog *Program, in *Input, opt PlanOptions) *Plan {
	n := prog.Net
	b := &pbuilder{pp: pp, prog: prog, net: n, B: in.B, T: in.T, dry: prog.dry}
	b.plan = &Plan{Schedule: Partitioned, B: in.B, T: in.T, dry: prog.dry}
	b.plan.Buffers = append(b.plan.Buffers, prog.weights...)
	perStep := 12 * pp.workers * n.NumLayers * n.Dirs()
	b.regs = make([]Region, 0, perStep*(in.T+2)+16)
	b.plan.Steps = make([]Step, 0, 3*pp.workers*n.NumLayers*n.Dirs()*(in.T+2)+8)
	B, T, N := in.B, in.T, pp.workers

	var x *Buffer
	if n.Vocab > 0 {
		tok := &Buffer{Name: "tokens", Kind: KindInput, Elems: T * B, ElemSize: 8, I64: in.Tokens}
		b.plan.Buffers = append(b.plan.Buffers, tok)
		x = b.buffer("x", KindActivation, T*B*n.Input)
		b.embed(tok, x)
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
	G := n.Cell.Gates()
	b.xp = make([]*Buffer, N)
	b.c = make([]*Buffer, N)
	b.yh = make([]*Buffer, N)
	for w := 0; w < N; w++ {
		rows := G * pp.units[w].n()
		b.xp[w] = b.buffer(fmt.Sprintf("xp.w%d", w), KindActivation, T*B*rows)
		if n.Cell == rnn.LSTM {
			b.c[w] = b.buffer(fmt.Sprintf("c.w%d", w), KindActivation, B*pp.units[w].n())
		} else {
			b.yh[w] = b.buffer(fmt.Sprintf("yh.w%d", w), KindActivation, B*rows)
		}
	}
	if n.Proj > 0 {
		b.hfull = b.buffer("hfull", KindActivation, B*n.Hidden)
	}
	if n.Cell == rnn.GRU && in.H0 == nil {
		b.zero = b.buffer("zero", KindActivation, B*n.Out())
	}
	var seq [2]*Buffer
	if n.NumLayers > 1 {
		seq[0] = b.buffer("seq0", KindActivation, T*B*n.OutputWidth())
	}
	if n.NumLayers > 2 {
		seq[1] = b.buffer("seq1", KindActivation, T*B*n.OutputWidth())
	}
	out := b.buffer("output", KindOutput, T*B*n.OutputWidth())
	b.hn = b.buffer("h_n", KindOutput, states*n.Out())
	if n.Cell == rnn.LSTM {
		b.cn = b.buffer("c_n", KindOutput, states*n.Hidden)
	}
	for k, dirs := range pp.layers {
		dst := out
		if k < n.NumLayers-1 {
			dst = seq[k%2]
		}
		for d := range dirs {
			b.layer(k, d, x, dst)
		}
		x = dst
	}
	b.plan.output, b.plan.hn, b.plan.cn = out, b.hn, b.cn
	if opt.Head && n.HeadOut > 0 {
		b.plan.head = b.head(out)
	}
	if !b.dry {
		phases := b.phases
		b.plan.Steps[0].run = func() { pp.run(phases) }
	}
	return b.plan
}

// embed gathers the embedding rows of tokens [i0, i1) of T·B per worker.
func (b *pbuilder) embed(tok, x *Buffer) {
	emb, dim := b.prog.emb, b.net.Input
	parts := split(b.T*b.B, b.pp.workers)
	for w, s := range parts {
		var reads []Region
		if s.n() > 0 {
			reads = append(reads, Region{Buf: tok, Off: 8 * int64(s.lo), Len: 8 * int64(s.n()), Count: 1})
		}
		for _, id := range tok.I64[s.lo:s.hi] {
			reads = append(reads, mat(emb, int(id)*dim, 1, dim, dim))
		}
		b.step(w, KEmbed, -1, 0, -1, reads, []Region{mat(x, s.lo*dim, s.n(), dim, dim)})
	}
	b.phase(func(w int) {
		s := parts[w]
		rnn.Embed(x.F32[s.lo*dim:], emb.F32, dim, tok.I64[s.lo:s.hi])
	})
}

// layer adds the phases of layer k, direction d: input projections, then
// one phase per time step (two with a projection).
func (b *pbuilder) layer(k, d int, x, out *Buffer) {
	n, pp, B, T := b.net, b.pp, b.B, b.T
	pl := &pp.layers[k][d]
	l := pl.l
	I, O, H, W := l.Input, l.Out(), l.Hidden, n.OutputWidth()
	G := l.Cell.Gates()
	idx := (k*n.Dirs() + d) * B // first state row of this layer and direction
	lstm := l.Cell == rnn.LSTM

	// Input projections and the initial cell state.
	for w := range pl.w {
		u, s := pp.units[w], &pl.w[w]
		rows := G * u.n()
		b.step(w, KMatMul, k, d, -1, []Region{all(s.wih), mat(x, 0, T*B, I, I)}, []Region{mat(b.xp[w], 0, T*B, rows, rows)})
		if lstm {
			if b.c0 != nil {
				b.step(w, KCopy, k, d, -1, []Region{mat(b.c0, idx*H+u.lo, B, u.n(), H)}, []Region{all(b.c[w])})
			} else {
				b.step(w, KCopy, k, d, -1, nil, []Region{all(b.c[w])})
			}
		}
	}
	c0 := b.c0
	b.phase(func(w int) {
		u, s := pp.units[w], &pl.w[w]
		rows := G * u.n()
		if rows == 0 {
			return
		}
		matMulT(T*B, rows, I, x.F32, I, s.wih.F32, s.wih16, 0, b.xp[w].F32, rows)
		if lstm {
			c := b.c[w].F32
			if c0 != nil {
				rnn.CopyRows(B, u.n(), c, u.n(), c0.F32[idx*H+u.lo:], H)
			} else {
				clear(c)
			}
		}
	})

	for i := 0; i < T; i++ {
		t, tprev := i, i-1
		if d == 1 {
			t, tprev = T-1-i, T-i
		}
		// h_{t-1}: the previous step's output, h0, or nothing (zero).
		var hb *Buffer
		hoff, ldh := 0, W
		switch {
		case i > 0:
			hb, hoff = out, tprev*B*W+d*O
		case b.h0 != nil:
			hb, hoff, ldh = b.h0, idx*O, O
		}
		last := i == T-1
		b.stepPhase(pl, k, d, t, hb, hoff, ldh, out, last)
	}
}

// stepPhase adds time step t of layer k, direction d. hb (at hoff, leading
// dimension ldh) holds h_{t-1} for all units, or is nil for a zero state.
func (b *pbuilder) stepPhase(pl *partLayer, k, d, t int, hb *Buffer, hoff, ldh int, out *Buffer, last bool) {
	n, pp, B := b.net, b.pp, b.B
	l := pl.l
	O, H, W := l.Out(), l.Hidden, n.OutputWidth()
	G := l.Cell.Gates()
	lstm, proj := l.Cell == rnn.LSTM, l.Proj > 0
	idx := (k*n.Dirs() + d) * B
	ooff := t*B*W + d*O // this step's h in out
	for w := range pl.w {
		u, s := pp.units[w], &pl.w[w]
		rows := G * u.n()
		xp := mat(b.xp[w], t*B*rows, B, rows, rows)
		if lstm {
			if hb != nil {
				b.step(w, KMatMul, k, d, t, []Region{all(s.whh), mat(hb, hoff, B, O, ldh), xp}, []Region{xp})
			}
			hdst := mat(out, ooff+u.lo, B, u.n(), W)
			if proj {
				hdst = mat(b.hfull, u.lo, B, u.n(), H)
			}
			b.step(w, KLSTM, k, d, t, []Region{xp, all(s.bias), all(b.c[w])}, []Region{all(b.c[w]), hdst})
			if last {
				b.step(w, KCopy, k, d, -1, []Region{all(b.c[w])}, []Region{mat(b.cn, idx*H+u.lo, B, u.n(), H)})
				if !proj {
					b.step(w, KCopy, k, d, -1, []Region{hdst}, []Region{mat(b.hn, idx*O+u.lo, B, u.n(), O)})
				}
			}
		} else {
			yh := all(b.yh[w])
			var hprev Region
			if hb != nil {
				b.step(w, KMatMul, k, d, t, []Region{all(s.whh), mat(hb, hoff, B, O, ldh)}, []Region{yh})
				hprev = mat(hb, hoff+u.lo, B, u.n(), ldh)
			} else {
				b.step(w, KCopy, k, d, t, nil, []Region{yh})
				hprev = mat(b.zero, u.lo, B, u.n(), O)
			}
			hdst := mat(out, ooff+u.lo, B, u.n(), W)
			b.step(w, KGRU, k, d, t, []Region{xp, yh, all(s.bih), all(s.bhh), hprev}, []Region{hdst})
			if last {
				b.step(w, KCopy, k, d, -1, []Region{hdst}, []Region{mat(b.hn, idx*O+u.lo, B, u.n(), O)})
			}
		}
	}
	hfull, zero, c, yh, xpb, hn, cn := b.hfull, b.zero, b.c, b.yh, b.xp, b.hn, b.cn
	b.phase(func(w int) {
		u, s := pp.units[w], &pl.w[w]
		nu := u.n()
		rows := G * nu
		if nu == 0 {
			return
		}
		xp := xpb[w].F32[t*B*rows:]
		var h []float32
		if hb != nil {
			h = hb.F32[hoff:]
		}
		if lstm {
			if h != nil {
				matMulT(B, rows, O, h, ldh, s.whh.F32, s.whh16, 1, xp, rows)
			}
			var dst []float32
			ldd := W
			if proj {
				dst, ldd = hfull.F32[u.lo:], H
			} else {
				dst = out.F32[ooff+u.lo:]
			}
			rnn.LSTMPointwise(B, nu, xp, rows, s.bias.F32, c[w].F32, dst, ldd)
			if last {
				rnn.CopyRows(B, nu, cn.F32[idx*H+u.lo:], H, c[w].F32, nu)
				if !proj {
					rnn.CopyRows(B, nu, hn.F32[idx*O+u.lo:], O, dst, ldd)
				}
			}
			return
		}
		y := yh[w].F32
		hp, ldp := h, ldh
		if h != nil {
			matMulT(B, rows, O, h, ldh, s.whh.F32, s.whh16, 0, y, rows)
		} else {
			clear(y)
			hp, ldp = zero.F32, O
		}
		rnn.GRUPointwiseTo(B, nu, nu, xp, rows, y, rows, s.bih.F32, s.bhh.F32, hp[u.lo:], ldp, out.F32[ooff+u.lo:], W)
		if last {
			rnn.CopyRows(B, nu, hn.F32[idx*O+u.lo:], O, out.F32[ooff+u.lo:], W)
		}
	})
	if !proj {
		return
	}
	// h = W_hr·hfull, rows [p0, p1) per worker, once every unit's hfull is in.
	for w := range pl.w {
		r, s := pp.prow[w], &pl.w[w]
		hdst := mat(out, ooff+r.lo, B, r.n(), W)
		b.step(w, KMatMul, k, d, t, []Region{all(s.whr), all(b.hfull)}, []Region{hdst})
		if last {
			b.step(w, KCopy, k, d, -1, []Region{hdst}, []Region{mat(b.hn, idx*O+r.lo, B, r.n(), O)})
		}
	}
	b.phase(func(w int) {
		r, s := pp.prow[w], &pl.w[w]
		if r.n() == 0 {
			return
		}
		matMulT(B, r.n(), H, hfull.F32, H, s.whr.F32, s.whr16, 0, out.F32[ooff+r.lo:], W)
		if last {
			rnn.CopyRows(B, r.n(), hn.F32[idx*O+r.lo:], O, out.F32[ooff+r.lo:], W)
		}
	})
}

// head applies the head to every time step: the product split by output
// rows, then bias and activation split by time steps.
func (b *pbuilder) head(out *Buffer) *Buffer {
	n, N := b.net, b.pp.workers
	rows, V, W := b.T*b.B, n.HeadOut, n.OutputWidth()
	head := b.buffer("head", KindOutput, rows*V)
	hw, hb, act := b.prog.headW, b.prog.headB, n.Activation
	cols, parts := split(V, N), split(rows, N)
	for w, v := range cols {
		b.step(w, KMatMul, -1, 0, -1, []Region{mat(hw, v.lo*W, v.n(), W, W), all(out)}, []Region{mat(head, v.lo, rows, v.n(), V)})
	}
	b.phase(func(w int) {
		v := cols[w]
		if v.n() > 0 {
			rnn.MatMulT(rows, v.n(), W, out.F32, W, hw.F32[v.lo*W:], W, 0, head.F32[v.lo:], V)
		}
	})
	for w, r := range parts {
		reg := mat(head, r.lo*V, r.n(), V, V)
		b.step(w, KHead, -1, 0, -1, []Region{reg, all(hb)}, []Region{reg})
	}
	b.phase(func(w int) {
		r := parts[w]
		if r.n() == 0 {
			return
		}
		c := head.F32[r.lo*V:]
		rnn.AddBias(r.n(), V, c, V, hb.F32)
		switch act {
		case rnn.ActSoftmax:
			rnn.Softmax(r.n(), V, c)
		case rnn.ActLogSoftmax:
			rnn.LogSoftmax(r.n(), V, c)
		}
	})
	return head
}
