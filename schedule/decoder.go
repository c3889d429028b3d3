package schedule

import (
	"errors"
	"fmt"

	"rnnserve/internal/f32"
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

	weightList
	emb, wa, wc, hw, hb   *Buffer
	layers                []decoderLayer
	dry                   bool
	vocab, embed, hidden  int
	memory, rows, nlayers int
}

type decoderLayer struct {
	l        *rnn.Layer
	g        *Buffer // [In+H][Rows], input-major, as Schedule A's
	bias     *Buffer // LSTM and Elman: b_ih + b_hh
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
	mem := d.Memory()
	p.emb = p.weight("dec.embedding", d.Vocab*d.Embed, d.Embedding, mem)
	for k, dirs := range n.Layers {
		l := dirs[0]
		name := fmt.Sprintf("dec.l%d", k)
		lw := decoderLayer{l: l, g: p.derived(name+".G", l.Rows()*(l.Input+l.Out()), concatG(l))}
		if l.Cell.SumsBias() {
			lw.bias = p.derived(name+".bias", l.Rows(), sumBias(l))
		} else {
			lw.bih = p.weight(name+".bias_ih", l.Rows(), l.Bih, mem)
			lw.bhh = p.weight(name+".bias_hh", l.Rows(), l.Bhh, mem)
		}
		p.layers = append(p.layers, lw)
	}
	p.wa = p.weight("dec.attn.W_a", p.memory*p.hidden, d.Attn.Wa, mem)
	p.wc = p.weight("dec.attn.W_c", p.hidden*(p.memory+p.hidden), d.Attn.Wc, mem)
	p.hw = p.weight("dec.head.weight", d.Vocab*p.hidden, n.HeadW, mem)
	p.hb = p.weight("dec.head.bias", d.Vocab, n.HeadB, mem)
	if err := checkOwners(mem, p.weights); err != nil {
		return nil, err
	}
	return p, nil
}

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
// Each gather step's regions come from the ids in the feed buffer it reads,
// so Walk after Run is the traffic of that run (before Run, steps after
// the first name row 0). A dry plan's feed holds Start and then
// DecodeInput.Tokens, so a dry plan given the tokens a run chose walks
// exactly as that run did.
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
	// The encoder's steps run in plan order on the calling goroutine (a
	// parallel encoder's phases one after another), so they all become
	// worker 0's, in phase 0, before the decoder's.
	b.plan.Steps = append([]Step(nil), enc.Steps...)
	for i := range b.plan.Steps {
		b.plan.Steps[i].Worker, b.plan.Steps[i].Phase = 0, 0
	}
	b.build(&in)
	b.plan.index(1)
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
	recorder
	prog    *DecoderProgram
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

// idRow is row t of an [S][B] id buffer.
func idRow(buf *Buffer, t, B int) Mat { return Dense(buf, t*B, 1, B) }

func (b *decoderBuilder) build(in *DecodeInput) {
	p, B, S := b.prog, b.B, b.S
	H, W, V, R := p.hidden, p.memory, p.vocab, p.rows
	b.feed = b.ids("dec.feed", KindActivation, S*B, nil)
	if b.plan.dry {
		// The rows the gathers read: Start, then the tokens the run is
		// taken to choose.
		for i := range B {
			b.feed.I64[i] = in.Start
		}
		copy(b.feed.I64[B:], in.Tokens[:(S-1)*B])
	}
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

	b.pos(-1, 0, -1)
	b.add(&fillOp{idRow(b.feed, 0, B), in.Start})
	for k := range p.layers {
		b.pos(k, 0, -1)
		b.add(&zeroOp{Whole(b.xh[k])})
		if b.c != nil {
			b.add(&zeroOp{Whole(b.c[k])})
		}
	}
	for t := range S {
		b.embed(t)
		for k := range p.layers {
			b.layer(k, t)
		}
		b.attend(t)
		b.head(t)
	}
	for k, lw := range p.layers {
		I := lw.l.Input
		b.pos(k, 0, -1)
		b.add(newCopy(Dense(b.hn, k*B*H, B, H), M(b.xh[k], I, B, H, I+H)))
		if b.cn != nil {
			b.add(newCopy(Dense(b.cn, k*B*H, B, H), Dense(b.c[k], 0, B, H)))
		}
	}
}

// embed gathers the embedding rows of the tokens fed at step t into
// layer 0's x. The rows it reads are those of the ids in the feed buffer
// when it runs or is walked (see DecoderPlan).
func (b *decoderBuilder) embed(t int) {
	p, B := b.prog, b.B
	E, ld := p.embed, p.embed+2*p.hidden
	b.pos(-1, 0, t)
	b.add(newGather(M(b.xh[0], 0, B, E, ld), Dense(p.emb, 0, p.vocab, E), idRow(b.feed, t, B)))
}

// layer adds one step of layer k: x from the layer below (k > 0), then
// Schedule A's product over G and the gate kernel.
func (b *decoderBuilder) layer(k, t int) {
	p, B, H, R := b.prog, b.B, b.prog.hidden, b.prog.rows
	lw := &p.layers[k]
	I := lw.l.Input
	ld := I + H
	xh := b.xh[k]
	hs := M(xh, I, B, H, ld)
	y := Dense(b.y, 0, B, R)
	g := Dense(lw.g, 0, I+H, R)
	b.pos(k, 0, t)
	if k > 0 {
		Ib := p.layers[k-1].l.Input
		b.add(newCopy(M(xh, 0, B, H, ld), M(b.xh[k-1], Ib, B, H, Ib+H)))
	}
	if lw.l.Cell == rnn.LSTM {
		b.add(newGemmNN(y, Dense(xh, 0, B, ld), g, 0))
		b.add(newLSTM(y, Whole(lw.bias), Dense(b.c[k], 0, B, H), hs))
		return
	}
	if lw.l.Cell.Elman() {
		b.add(newGemmNN(y, Dense(xh, 0, B, ld), g, 0))
		b.add(newElman(lw.l.Cell, y, Whole(lw.bias), hs))
		return
	}
	yh := Dense(b.yh, 0, B, R)
	b.add(newGemmNN(y, M(xh, 0, B, I, ld), g.RowRange(0, I), 0))
	b.add(newGemmNN(yh, hs, g.RowRange(I, I+H), 0))
	b.add(newGRU(y, yh, Whole(lw.bih), Whole(lw.bhh), hs, hs))
}

// attend adds the attention of step t: the query from the top layer's h,
// the scores over the encoder outputs and their softmax, the context, and
// h̃ = tanh(W_c [ctx; h]) written into layer 0's input for the next step
// (and copied to the output sequence).
func (b *decoderBuilder) attend(t int) {
	p, B := b.prog, b.B
	H, E, W := p.hidden, p.embed, p.memory
	top := len(p.layers) - 1
	I := p.layers[top].l.Input
	ld0, ldc := E+2*H, W+H
	htop := M(b.xh[top], I, B, H, I+H)
	mem := attnMemory{buf: b.mem, T: b.T, W: W, B: B}
	scores := Dense(b.scores, 0, B, b.T)
	hTilde := M(b.xh[0], E, B, H, ld0)
	b.pos(-1, 0, t)
	b.add(newGemmNT(Dense(b.q, 0, B, W), htop, Dense(p.wa, 0, W, H), 0))
	b.add(&attnOp{mem: mem, in: Dense(b.q, 0, B, W), out: scores})
	b.add(newHead(scores, Mat{}, rnn.ActSoftmax))
	b.add(&attnOp{mem: mem, in: scores, out: M(b.cat, 0, B, W, ldc), context: true})
	b.add(newCopy(M(b.cat, W, B, H, ldc), htop))
	// One product that also applies tanh to the H values it writes.
	o := newGemmNT(hTilde, Dense(b.cat, 0, B, ldc), Dense(p.wc, 0, H, ldc), 0)
	o.tanh = true
	b.add(o)
	b.add(newCopy(Dense(b.att, t*B*H, B, H), hTilde))
}

// head adds the output layer of step t over h̃: logits, bias and
// activation, and the argmax token (fed back at t+1 by a greedy plan).
func (b *decoderBuilder) head(t int) {
	p, B, S := b.prog, b.B, b.S
	H, E, V := p.hidden, p.embed, p.vocab
	logits := Dense(b.logits, 0, B, V)
	b.pos(-1, 0, t)
	b.add(newGemmNT(logits, M(b.xh[0], E, B, H, E+2*H), Dense(p.hw, 0, V, H), 0))
	o := &argmaxOp{head: newHead(logits, Whole(p.hb), p.Dec.Stack.Activation), tokens: idRow(b.tokens, t, B)}
	if t+1 < S {
		o.feed = idRow(b.feed, t+1, B)
	}
	b.add(o)
}

// attnMemory is the encoder's output [T][B][W] that the attention reads:
// batch row i's T outputs, W wide, B·W apart.
type attnMemory struct {
	buf     *Buffer
	T, W, B int
}

func (m attnMemory) row(i int) Mat { return M(m.buf, i*m.W, m.T, m.W, m.B*m.W) }

// attnOp computes, for each batch row i, the attention scores of its
// query in (row i of in, W wide) over its T encoder outputs into row i of
// out, or with context set the context: row i of in holds the T weights
// and row i of out receives their weighted sum of the outputs.
type attnOp struct {
	mem     attnMemory
	in, out Mat
	context bool
}

func (o *attnOp) kernel() Kernel { return KMatMul }
func (o *attnOp) run() {
	m := o.mem
	for i := range m.B {
		memRow, inRow, outRow := o.mem.row(i), o.in.Row(i), o.out.Row(i)
		mem, in, out := memRow.F32(), inRow.F32(), outRow.F32()
		if o.context {
			// out[:W] = Σ_s in[s]·mem[s]: gonum's transposed Sgemv with
			// beta 0 would clear all of out, not only its first W values.
			f32.GemmNN(1, m.W, m.T, in, m.T, mem, m.B*m.W, 0, out[:m.W], m.W)
		} else {
			// out[s] = mem[s]·in, the general score's dot products.
			f32.GemmNT(1, m.T, m.W, in, m.W, mem, m.B*m.W, 0, out, m.T)
		}
	}
}
func (o *attnOp) regions(fn func(Region, bool)) {
	for i := range o.mem.B {
		emit(fn, o.mem.row(i), false)
	}
	emit(fn, o.in, false)
	emit(fn, o.out, true)
}

// argmaxOp is a head (bias and activation) followed by each row's argmax,
// written to tokens and, when it has one, to the next step's feed.
type argmaxOp struct {
	head         *headOp
	tokens, feed Mat
}

func (o *argmaxOp) kernel() Kernel { return KHead }
func (o *argmaxOp) run() {
	o.head.run()
	V := o.head.c.Cols
	c := o.head.c.F32()
	for i := range o.head.c.Rows {
		id := int64(rnn.Argmax(c[i*V : (i+1)*V]))
		o.tokens.Buf.I64[o.tokens.Off+i] = id
		if o.feed.Buf != nil {
			o.feed.Buf.I64[o.feed.Off+i] = id
		}
	}
}
func (o *argmaxOp) regions(fn func(Region, bool)) {
	o.head.regions(fn)
	emit(fn, o.tokens, true)
	if o.feed.Buf != nil {
		emit(fn, o.feed, true)
	}
}
