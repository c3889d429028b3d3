package schedule

import (
	"errors"
	"fmt"

	"rnnserve/rnn"
)

// DecoderProgram is an attention decoder (rnn.Decoder) prepared to run
// after an encoder plan, as the decoder of a sequence-to-sequence model
// such as GNMT. Its inputs arrive one step at a time, because each step
// feeds back the token the previous step chose, so Schedule A+ cannot
// apply: every layer keeps Schedule A's concatenated G = [W; U] and each
// output step multiplies [x; h] by it, layer after layer.
//
// A DecoderProgram is immutable and safe for concurrent use; each run gets
// its own DecoderPlan.
type DecoderProgram struct {
	Dec *rnn.Decoder

	weights               []*Buffer
	emb, wa, wc, hw, hb   *Buffer
	layers                []decoderLayer
	dry                   bool
	vocab, embed, hidden  int
	memory, rows, nlayers int
}

type decoderLayer struct {
	l        *rnn.Layer
	g        *Buffer // [In+H][Rows], input-major, as Schedule A's
	bias     *Buffer // LSTM: b_ih + b_hh
	bih, bhh *Buffer // GRU
}

// ErrDecoder is wrapped by every error about a decoder that cannot be
// built or planned.
var ErrDecoder = errors.New("schedule: decoder")

// NewDecoderProgram prepares d. Its stack must be unidirectional and
// without projection. A dry decoder gives a dry program, whose plans can
// be walked but not run.
func NewDecoderProgram(d *rnn.Decoder) (*DecoderProgram, error) {
	n := d.Stack
	switch {
	case n.Bidirectional:
		return nil, fmt.Errorf("%w: a decoder runs one step at a time and cannot be bidirectional", ErrDecoder)
	case n.Proj > 0:
		return nil, fmt.Errorf("%w: projection (proj_size %d) is not supported", ErrDecoder, n.Proj)
	case n.HeadOut != d.Vocab || n.Input != d.Embed+n.Hidden:
		return nil, fmt.Errorf("%w: stack shape (input %d, head %d) does not match embedding %d + hidden %d and vocabulary %d",
			ErrDecoder, n.Input, n.HeadOut, d.Embed, n.Hidden, d.Vocab)
	case d.Attn.Query != n.Hidden:
		return nil, fmt.Errorf("%w: attention query width %d, want the hidden size %d", ErrDecoder, d.Attn.Query, n.Hidden)
	}
	p := &DecoderProgram{Dec: d, dry: d.Dry(), vocab: d.Vocab, embed: d.Embed, hidden: n.Hidden,
		memory: d.Attn.Memory, rows: n.Cell.Gates() * n.Hidden, nlayers: n.NumLayers}
	p.emb = p.weight("dec.embedding", d.Vocab*d.Embed, d.Embedding)
	for k, dirs := range n.Layers {
		l := dirs[0]
		name := fmt.Sprintf("dec.l%d", k)
		lw := decoderLayer{l: l, g: p.weight(name+".G", l.Rows()*(l.Input+l.Out()), concatG(l))}
		if l.Cell == rnn.LSTM {
			lw.bias = p.weight(name+".bias", l.Rows(), sumBias(l))
		} else {
			lw.bih = p.weight(name+".bias_ih", l.Rows(), l.Bih)
			lw.bhh = p.weight(name+".bias_hh", l.Rows(), l.Bhh)
		}
		p.layers = append(p.layers, lw)
	}
	p.wa = p.weight("dec.attn.W_a", p.memory*p.hidden, d.Attn.Wa)
	p.wc = p.weight("dec.attn.W_c", p.hidden*(p.memory+p.hidden), d.Attn.Wc)
	p.hw = p.weight("dec.head.weight", d.Vocab*p.hidden, n.HeadW)
	p.hb = p.weight("dec.head.bias", d.Vocab, n.HeadB)
	return p, nil
}

func (p *DecoderProgram) weight(name string, elems int, data []float32) *Buffer {
	b := &Buffer{Name: name, Kind: KindWeight, Elems: elems, ElemSize: 4, F32: data}
	p.weights = append(p.weights, b)
	return b
}

// Weights lists the decoder's weight buffers in layout order.
func (p *DecoderProgram) Weights() []*Buffer { return p.weights }

// DecodeInput says how many tokens to decode and from which start token.
type DecodeInput struct {
	// Steps is the number of output tokens, 1..MaxSteps. Decoding does
	// not stop early at an end-of-sentence token, so that the plan's
	// steps are known before it runs.
	Steps int
	// Start is the token fed at the first step (a GO or BOS symbol).
	Start int64
	// Tokens is, for a dry plan only, the token each step is taken to
	// choose, [Steps][B]: the choices of steps 0..Steps-2 are fed back
	// and so decide which embedding rows are read. A plan that runs
	// chooses its own tokens and must leave Tokens nil.
	Tokens []int64
}

// DecoderPlan is one run of an encoder and a decoder: the encoder plan's
// steps, then the decoder's steps for every output token. Plan is an
// ordinary Plan (its Schedule, B and T are the encoder's, and the encoder
// program's weights come first), so the traffic analysis walks it like any
// other.
//
// Each output step t, for the B rows of the batch:
//
//  1. gather the embedding of the token fed at step t into layer 0's
//     input, beside the previous step's attentional vector h̃ (input
//     feeding; h̃ is zero at step 0);
//  2. for every layer k in turn: copy the layer below's h into x (k > 0),
//     Y = [x; h]·G_k, then the gate kernel updates h (and c);
//  3. attention over the encoder outputs with the top layer's h (see
//     rnn.Attention): q = W_a h, scores, their softmax, the context, and
//     h̃ = tanh(W_c [ctx; h]), written where layer 0 reads it next step;
//  4. the head over h̃: logits, bias, log-softmax, and the argmax token,
//     which is fed back at step t+1 (greedy decoding).
//
// A plan that runs learns which embedding rows it gathers only as it runs:
// each gather step sets its read region to the row of the token it
// actually reads, so Walk after Run is the traffic of that run (before
// Run, steps after the first name row 0). A dry plan takes the choices
// from DecodeInput.Tokens, so a dry plan given the tokens a run chose
// walks exactly as that run did.
type DecoderPlan struct {
	Plan        *Plan
	OutputSteps int

	tokens, att, logits, hn, cn *Buffer
}

// DecoderResult holds the outputs of a decoding run. The slices belong to
// the plan.
type DecoderResult struct {
	Encoder     Result    // the encoder plan's outputs
	Tokens      []int64   // [Steps][B]: each step's argmax token
	Attentional []float32 // [Steps][B][Hidden]: h̃, the head's input, of every step
	LogProbs    []float32 // [B][Vocab]: the last step's log-probabilities
	HN          []float32 // [Layers][B][Hidden]: the decoder's final h
	CN          []float32 // [Layers][B][Hidden]: its final c (LSTM only)
}

// Run executes the encoder's and the decoder's steps in order.
func (d *DecoderPlan) Run() (DecoderResult, error) {
	enc, err := d.Plan.Run()
	if err != nil {
		return DecoderResult{}, err
	}
	r := DecoderResult{Encoder: enc, Tokens: d.tokens.I64, Attentional: d.att.F32, LogProbs: d.logits.F32, HN: d.hn.F32}
	if d.cn != nil {
		r.CN = d.cn.F32
	}
	return r, nil
}

// Plan builds the plan that runs enc, a plan of an encoder whose output
// width is the attention's memory width, then decodes in.Steps tokens
// attending over enc's output. The new plan shares enc's buffers and steps:
// run only one of the two at a time.
func (p *DecoderProgram) Plan(enc *Plan, in DecodeInput) (*DecoderPlan, error) {
	if enc == nil || enc.output == nil {
		return nil, fmt.Errorf("%w: no encoder plan", ErrDecoder)
	}
	if enc.dry != p.dry {
		return nil, fmt.Errorf("%w: encoder plan dry = %v, decoder dry = %v", ErrDecoder, enc.dry, p.dry)
	}
	B, T := enc.B, enc.T
	if w := enc.output.Elems / (T * B); w != p.memory {
		return nil, fmt.Errorf("%w: encoder outputs are %d wide, the attention's memory is %d", ErrDecoder, w, p.memory)
	}
	if err := p.check(&in, B); err != nil {
		return nil, err
	}
	b := &decoderBuilder{prog: p, B: B, T: T, S: in.Steps, mem: enc.output}
	b.plan = &Plan{Schedule: enc.Schedule, B: B, T: T, dry: enc.dry,
		output: enc.output, hn: enc.hn, cn: enc.cn, head: enc.head}
	b.plan.Buffers = append(append([]*Buffer(nil), enc.Buffers...), p.weights...)
	b.plan.Steps = append([]Step(nil), enc.Steps...)
	b.build(&in)
	return &DecoderPlan{Plan: b.plan, OutputSteps: in.Steps, tokens: b.tokens, att: b.att, logits: b.logits, hn: b.hn, cn: b.cn}, nil
}

func (p *DecoderProgram) check(in *DecodeInput, B int) error {
	switch {
	case in.Steps < 1:
		return inputErr("steps", "%d output steps, want at least 1", in.Steps)
	case in.Steps > MaxSteps:
		return inputErr("steps", "%d output steps exceeds %d", in.Steps, MaxSteps)
	case int64(in.Steps)*int64(B)*int64(max(p.hidden, p.memory)) > maxElems || int64(B)*int64(p.vocab) > maxElems:
		return inputErr("steps", "%d steps x batch %d is too large", in.Steps, B)
	}
	if in.Start < 0 || in.Start >= int64(p.vocab) {
		return inputErr("start", "id %d is outside the vocabulary [0, %d)", in.Start, p.vocab)
	}
	switch {
	case !p.dry && in.Tokens != nil:
		return inputErr("tokens", "a plan that runs chooses its own tokens")
	case p.dry && len(in.Tokens) != in.Steps*B:
		return inputErr("tokens", "%d ids, want steps*B = %d*%d = %d (a dry plan needs the tokens it feeds back)", len(in.Tokens), in.Steps, B, in.Steps*B)
	}
	for i, id := range in.Tokens {
		if id < 0 || id >= int64(p.vocab) {
			return inputErr("tokens", "id %d at [t=%d][b=%d] is outside the vocabulary [0, %d)", id, i/B, i%B, p.vocab)
		}
	}
	return nil
}

type decoderBuilder struct {
	prog    *DecoderProgram
	plan    *Plan
	B, T, S int
	mem     *Buffer // the encoder's output [T][B][W]

	feed           *Buffer   // [S][B] int64: the token fed at each step
	xh, c          []*Buffer // per layer: [B][In+H] = [x; h], [B][H]
	y, yh          *Buffer   // [B][Rows]
	q, scores, cat *Buffer   // [B][W], [B][T], [B][W+H]
	logits         *Buffer   // [B][V]
	tokens, att    *Buffer   // outputs [S][B] int64, [S][B][H]
	hn, cn         *Buffer   // outputs [L][B][H]
}

func (b *decoderBuilder) buffer(name string, kind BufferKind, elems int) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4}
	if !b.plan.dry {
		buf.F32 = make([]float32, elems)
	}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

func (b *decoderBuilder) ids(name string, kind BufferKind, elems int, data []int64) *Buffer {
	buf := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 8, I64: data}
	if data == nil && !b.plan.dry {
		buf.I64 = make([]int64, elems)
	}
	b.plan.Buffers = append(b.plan.Buffers, buf)
	return buf
}

func (b *decoderBuilder) add(s Step) { b.plan.Steps = append(b.plan.Steps, s) }

// idRows is the region of B int64 ids at row t of an [S][B] id buffer.
func idRows(buf *Buffer, t, B int) Region {
	return Region{Buf: buf, Off: 8 * int64(t*B), Len: 8 * int64(B), Count: 1}
}

func (b *decoderBuilder) build(in *DecodeInput) {
	p, B, S := b.prog, b.B, b.S
	H, W, V, R := p.hidden, p.memory, p.vocab, p.rows
	b.feed = b.ids("dec.feed", KindActivation, S*B, nil)
	for k, lw := range p.layers {
		b.xh = append(b.xh, b.buffer(fmt.Sprintf("dec.l%d.xh", k), KindActivation, B*(lw.l.Input+H)))
		if lw.l.Cell == rnn.LSTM {
			b.c = append(b.c, b.buffer(fmt.Sprintf("dec.l%d.c", k), KindActivation, B*H))
		}
	}
	b.y = b.buffer("dec.y", KindActivation, B*R)
	if p.Dec.Stack.Cell == rnn.GRU {
		b.yh = b.buffer("dec.yh", KindActivation, B*R)
	}
	b.q = b.buffer("dec.attn.q", KindActivation, B*W)
	b.scores = b.buffer("dec.attn.scores", KindActivation, B*b.T)
	b.cat = b.buffer("dec.attn.cat", KindActivation, B*(W+H))
	b.logits = b.buffer("dec.logits", KindActivation, B*V)
	b.tokens = b.ids("dec.tokens", KindOutput, S*B, nil)
	b.att = b.buffer("dec.attentional", KindOutput, S*B*H)
	b.hn = b.buffer("dec.h_n", KindOutput, p.nlayers*B*H)
	if p.Dec.Stack.Cell == rnn.LSTM {
		b.cn = b.buffer("dec.c_n", KindOutput, p.nlayers*B*H)
	}

	feed, start := b.feed, in.Start
	b.add(Step{Kernel: KCopy, Layer: -1, T: -1, Writes: []Region{idRows(feed, 0, B)},
		run: func() {
			for i := range B {
				feed.I64[i] = start
			}
		}})
	for k := range p.layers {
		xh := b.xh[k]
		b.add(Step{Kernel: KCopy, Layer: k, T: -1, Writes: []Region{all(xh)}, run: func() { clear(xh.F32) }})
		if b.c != nil {
			c := b.c[k]
			b.add(Step{Kernel: KCopy, Layer: k, T: -1, Writes: []Region{all(c)}, run: func() { clear(c.F32) }})
		}
	}
	for t := range S {
		b.embed(t, in)
		for k := range p.layers {
			b.layer(k, t)
		}
		b.attend(t)
		b.head(t)
	}
	for k, lw := range p.layers {
		I := lw.l.Input
		ld := I + H
		xh, hn, off := b.xh[k], b.hn, k*B*H
		b.add(Step{Kernel: KCopy, Layer: k, T: -1, Reads: []Region{mat(xh, I, B, H, ld)}, Writes: []Region{mat(hn, off, B, H, H)},
			run: func() { rnn.CopyRows(B, H, hn.F32[off:], H, xh.F32[I:], ld) }})
		if b.cn != nil {
			c, cn := b.c[k], b.cn
			b.add(Step{Kernel: KCopy, Layer: k, T: -1, Reads: []Region{all(c)}, Writes: []Region{mat(cn, off, B, H, H)},
				run: func() { copy(cn.F32[off:off+B*H], c.F32) }})
		}
	}
}

// embed gathers the embedding rows of the tokens fed at step t into
// layer 0's x. The rows read are set when the step runs, from the ids it
// actually reads; until then they are Start's at step 0, and after it
// those of in.Tokens (dry) or row 0.
func (b *decoderBuilder) embed(t int, in *DecodeInput) {
	p, B := b.prog, b.B
	E, ld := p.embed, p.embed+2*p.hidden
	emb, feed, xh := p.emb, b.feed, b.xh[0]
	reads := make([]Region, 1+B)
	reads[0] = idRows(feed, t, B)
	for i := range B {
		var id int64
		switch {
		case t == 0:
			id = in.Start
		case in.Tokens != nil:
			id = in.Tokens[(t-1)*B+i]
		}
		reads[1+i] = mat(emb, int(id)*E, 1, E, E)
	}
	b.add(Step{Kernel: KEmbed, Layer: -1, T: t, Reads: reads, Writes: []Region{mat(xh, 0, B, E, ld)},
		run: func() {
			for i := range B {
				id := int(feed.I64[t*B+i])
				reads[1+i].Off = 4 * int64(id*E)
				copy(xh.F32[i*ld:i*ld+E], emb.F32[id*E:(id+1)*E])
			}
		}})
}

// layer adds one step of layer k: x from the layer below (k > 0), then
// Schedule A's product over G and the gate kernel.
func (b *decoderBuilder) layer(k, t int) {
	p, B, H, R := b.prog, b.B, b.prog.hidden, b.prog.rows
	lw := &p.layers[k]
	I := lw.l.Input
	ld := I + H
	xh, y, g := b.xh[k], b.y, lw.g
	if k > 0 {
		below, Ib := b.xh[k-1], p.layers[k-1].l.Input
		ldb := Ib + H
		b.add(Step{Kernel: KCopy, Layer: k, T: t, Reads: []Region{mat(below, Ib, B, H, ldb)}, Writes: []Region{mat(xh, 0, B, H, ld)},
			run: func() { rnn.CopyRows(B, H, xh.F32, ld, below.F32[Ib:], ldb) }})
	}
	if lw.l.Cell == rnn.LSTM {
		c, bias := b.c[k], lw.bias
		b.add(Step{Kernel: KMatMul, Layer: k, T: t,
			Reads:  []Region{all(g), mat(xh, 0, B, ld, ld)},
			Writes: []Region{all(y)},
			run:    func() { rnn.MatMul(B, R, ld, xh.F32, ld, g.F32, R, 0, y.F32, R) }})
		b.add(Step{Kernel: KLSTM, Layer: k, T: t,
			Reads:  []Region{all(y), all(bias), all(c)},
			Writes: []Region{all(c), mat(xh, I, B, H, ld)},
			run:    func() { rnn.LSTMPointwise(B, H, y.F32, R, bias.F32, c.F32, xh.F32[I:], ld) }})
		return
	}
	yh, bih, bhh := b.yh, lw.bih, lw.bhh
	b.add(Step{Kernel: KMatMul, Layer: k, T: t,
		Reads:  []Region{mat(g, 0, I, R, R), mat(xh, 0, B, I, ld)},
		Writes: []Region{all(y)},
		run:    func() { rnn.MatMul(B, R, I, xh.F32, ld, g.F32, R, 0, y.F32, R) }})
	b.add(Step{Kernel: KMatMul, Layer: k, T: t,
		Reads:  []Region{mat(g, I*R, H, R, R), mat(xh, I, B, H, ld)},
		Writes: []Region{all(yh)},
		run:    func() { rnn.MatMul(B, R, H, xh.F32[I:], ld, g.F32[I*R:], R, 0, yh.F32, R) }})
	b.add(Step{Kernel: KGRU, Layer: k, T: t,
		Reads:  []Region{all(y), all(yh), all(bih), all(bhh), mat(xh, I, B, H, ld)},
		Writes: []Region{mat(xh, I, B, H, ld)},
		run:    func() { rnn.GRUPointwise(B, H, y.F32, R, yh.F32, R, bih.F32, bhh.F32, xh.F32[I:], ld) }})
}

// memRows lists the regions of the encoder outputs of every batch row:
// row i's T outputs, W wide, B*W apart.
func (b *decoderBuilder) memRows() []Region {
	W := b.prog.memory
	rs := make([]Region, b.B)
	for i := range rs {
		rs[i] = mat(b.mem, i*W, b.T, W, b.B*W)
	}
	return rs
}

// attend adds the attention of step t: the query from the top layer's h,
// the scores over the encoder outputs and their softmax, the context, and
// h̃ = tanh(W_c [ctx; h]) written into layer 0's input for the next step
// (and copied to the output sequence).
func (b *decoderBuilder) attend(t int) {
	p, B, T := b.prog, b.B, b.T
	H, E, W := p.hidden, p.embed, p.memory
	top := len(p.layers) - 1
	I := p.layers[top].l.Input
	ld, ld0, ldc := I+H, E+2*H, W+H
	xt, x0, mem := b.xh[top], b.xh[0], b.mem
	q, scores, cat, wa, wc, att := b.q, b.scores, b.cat, p.wa, p.wc, b.att
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t,
		Reads:  []Region{all(wa), mat(xt, I, B, H, ld)},
		Writes: []Region{all(q)},
		run:    func() { rnn.MatMulT(B, W, H, xt.F32[I:], ld, wa.F32, H, 0, q.F32, W) }})
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t,
		Reads:  append(b.memRows(), all(q)),
		Writes: []Region{all(scores)},
		run: func() {
			for i := range B {
				rnn.AttentionScores(T, W, mem.F32[i*W:], B*W, q.F32[i*W:(i+1)*W], scores.F32[i*T:(i+1)*T])
			}
		}})
	b.add(Step{Kernel: KHead, Layer: -1, T: t,
		Reads:  []Region{all(scores)},
		Writes: []Region{all(scores)},
		run:    func() { rnn.Softmax(B, T, scores.F32) }})
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t,
		Reads:  append(b.memRows(), all(scores)),
		Writes: []Region{mat(cat, 0, B, W, ldc)},
		run: func() {
			for i := range B {
				rnn.AttentionContext(T, W, mem.F32[i*W:], B*W, scores.F32[i*T:(i+1)*T], cat.F32[i*ldc:])
			}
		}})
	b.add(Step{Kernel: KCopy, Layer: -1, T: t,
		Reads:  []Region{mat(xt, I, B, H, ld)},
		Writes: []Region{mat(cat, W, B, H, ldc)},
		run:    func() { rnn.CopyRows(B, H, cat.F32[W:], ldc, xt.F32[I:], ld) }})
	// One matmul step that also applies tanh to the H values it wrote.
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t,
		Reads:  []Region{all(wc), all(cat)},
		Writes: []Region{mat(x0, E, B, H, ld0)},
		run: func() {
			rnn.MatMulT(B, H, ldc, cat.F32, ldc, wc.F32, ldc, 0, x0.F32[E:], ld0)
			rnn.TanhRows(B, H, x0.F32[E:], ld0)
		}})
	off := t * B * H
	b.add(Step{Kernel: KCopy, Layer: -1, T: t,
		Reads:  []Region{mat(x0, E, B, H, ld0)},
		Writes: []Region{mat(att, off, B, H, H)},
		run:    func() { rnn.CopyRows(B, H, att.F32[off:], H, x0.F32[E:], ld0) }})
}

// head adds the output layer of step t over h̃: logits, bias and
// activation, and the argmax token (fed back at t+1 by a greedy plan).
func (b *decoderBuilder) head(t int) {
	p, B, S := b.prog, b.B, b.S
	H, E, V := p.hidden, p.embed, p.vocab
	ld0 := E + 2*H
	x0, hw, hb, logits, tokens, feed := b.xh[0], p.hw, p.hb, b.logits, b.tokens, b.feed
	act := p.Dec.Stack.Activation
	b.add(Step{Kernel: KMatMul, Layer: -1, T: t,
		Reads:  []Region{all(hw), mat(x0, E, B, H, ld0)},
		Writes: []Region{all(logits)},
		run:    func() { rnn.MatMulT(B, V, H, x0.F32[E:], ld0, hw.F32, H, 0, logits.F32, V) }})
	writes := []Region{all(logits), idRows(tokens, t, B)}
	feedBack := t+1 < S
	if feedBack {
		writes = append(writes, idRows(feed, t+1, B))
	}
	b.add(Step{Kernel: KHead, Layer: -1, T: t,
		Reads:  []Region{all(logits), all(hb)},
		Writes: writes,
		run: func() {
			rnn.AddBias(B, V, logits.F32, V, hb.F32)
			switch act {
			case rnn.ActSoftmax:
				rnn.Softmax(B, V, logits.F32)
			case rnn.ActLogSoftmax:
				rnn.LogSoftmax(B, V, logits.F32)
			}
			for i := range B {
				id := int64(rnn.Argmax(logits.F32[i*V : (i+1)*V]))
				tokens.I64[t*B+i] = id
				if feedBack {
					feed.I64[(t+1)*B+i] = id
				}
			}
		}})
}
