package schedule

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"rnnserve/internal/f32"
	"rnnserve/internal/hugepage"
	"rnnserve/internal/invariants"
	"rnnserve/rnn"
)

// Stepper runs many sequences of one unidirectional network together, one
// time step at a time: cellular batching (Gao et al., BatchMaker, EuroSys
// 2018). Sequences join and leave between steps; at each step the
// recurrent product of every layer is one matrix-matrix product over all
// active rows.
//
// Layer 0's input projections X' = W_ih·x are computed once for all of a
// sequence's known inputs when it joins or is extended (Schedule A+). For
// a network with an embedding and float32 weights whose table of every
// token's projection, [Vocab][Rows], fits in tokenTableBytes, the stepper
// computes that table once and a step reads each row's projection from it
// by token id: a request then pays neither the product nor a buffer of
// its own projections. The layers above get their input one step at a
// time, so they read W_ih and W_hh at every step, as Schedule A does.
//
// A Stepper's steps are schedule Steps over its own buffers, built from
// the same ops as a Plan's; TraceStepper records one sequence's as a Plan
// for the traffic analysis.
//
// With Int8 precision (NewStepperPrecision) the recurrent weights (W_ih,
// W_hh, W_hr) are packed int8 copies and every product quantizes its rows
// as it runs; each row is quantized on its own, so a sequence's results
// do not depend on the others in the batch.
//
// A Stepper is not safe for concurrent use: one goroutine owns it.
type Stepper struct {
	net  *rnn.Network
	max  int
	prec Precision
	seqs []*Sequence // active, seqs[i].slot == i

	bias    []*Buffer // per layer: b_ih + b_hh (LSTM and Elman; nil for a GRU layer)
	h, c    []*Buffer // per layer: [max][Out], [max][Hidden] (c nil for a GRU layer)
	y, yh   *Buffer   // [max][Rows]
	hfull   *Buffer   // [max][Hidden], projection only
	head    *Buffer   // [max][HeadOut]
	xtab    *Buffer   // [Vocab][Rows of layer 0]: every token's input projection, or nil
	q, qs   *Buffer   // Int8: [max] quantized rows of the widest layer, their scales
	weights map[*[]float32]*Buffer

	steps   []Step
	srcs    []Mat // the last step's gather sources (buildStep)
	checked bool  // check every step against its regions (tests; always with the invariants build tag)
	tracing bool  // keep every step run in trace (TraceStepper)
	trace   []Step
}

// HeadMode says which of a sequence's steps get head outputs. A network
// whose head reads one row per sequence (rnn.HeadLastStep or
// rnn.HeadFinalState, the same thing in one direction) takes HeadLast
// only: its head row is the last step's.
type HeadMode uint8

const (
	HeadNone HeadMode = iota
	HeadLast          // only the last step of the known input
	HeadAll           // every step
)

// Sequence is one row of a Stepper: its inputs, state and outputs. Set the
// exported input fields before Add; read the outputs after Remove (HN, CN)
// or after each Step (Head, Output).
type Sequence struct {
	Tokens   []int64   // [T], for a network with an embedding
	Features []float32 // [T][Input], for one without
	H0, C0   []float32 // optional initial state [Layers][Out], [Layers][Hidden]
	Head     HeadMode  // which steps get a head row
	Outputs  bool      // keep the last layer's output of every step

	HeadOut []float32 // rows of HeadOut values, one per step that got one, in order
	Output  []float32 // [steps run][Out] when Outputs is set
	HN, CN  []float32 // final state after Remove: [Layers][Out], [Layers][Hidden]

	xp    *Buffer // [known-xp0][Rows]: layer 0's input projections (nil with the token table)
	xp0   int     // the step of xp's first row: the rows of steps run go as input arrives
	known int     // input steps known so far
	t     int     // next time step
	slot  int
}

// Steps is the number of the sequence's steps that have run.
func (q *Sequence) Steps() int { return q.t }

// Pending reports whether the sequence has input left for another step.
func (q *Sequence) Pending() bool { return q.t < q.known }

// ErrStepper is wrapped by errors from Add and Extend.
var ErrStepper = errors.New("schedule: stepper")

// NewStepper prepares net for cellular batching of up to maxRows
// sequences, with float32 weights.
func NewStepper(net *rnn.Network, maxRows int) (*Stepper, error) {
	return NewStepperPrecision(net, maxRows, F32)
}

// NewStepperPrecision is NewStepper with the recurrent weights stored at
// precision prec: F32 (the network's own slices) or Int8 (packed copies).
func NewStepperPrecision(net *rnn.Network, maxRows int, prec Precision) (*Stepper, error) {
	return newStepper(net, maxRows, prec, nil)
}

// Sibling returns a new Stepper of s's network and precision for up to
// maxRows sequences that reads s's weight buffers (the token table, the
// int8 packings, the summed biases) rather than making its own: the
// lanes of one model hold them once. Each Stepper is still owned by one
// goroutine; the buffers they share are only read.
func (s *Stepper) Sibling(maxRows int) (*Stepper, error) {
	return newStepper(s.net, maxRows, s.prec, s)
}

// newStepper is NewStepperPrecision, reading src's weight buffers where
// src is not nil.
func newStepper(net *rnn.Network, maxRows int, prec Precision, src *Stepper) (*Stepper, error) {
	if prec != F32 && prec != Int8 {
		return nil, fmt.Errorf("%w: %w %v (a stepper stores f32 or int8 weights)", ErrStepper, ErrUnknownPrecision, prec)
	}
	if prec == Int8 {
		if err := i8Fits(net); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStepper, err)
		}
	}
	if !net.Unidirectional() {
		return nil, fmt.Errorf("%w: a bidirectional network needs its whole input; run it as a Plan", ErrStepper)
	}
	if net.Dry() {
		return nil, fmt.Errorf("%w: the network has no weights", ErrStepper)
	}
	if maxRows < 1 || maxRows > MaxBatch {
		return nil, fmt.Errorf("%w: max rows %d, want 1..%d", ErrStepper, maxRows, MaxBatch)
	}
	s := &Stepper{net: net, max: maxRows, prec: prec, weights: map[*[]float32]*Buffer{}}
	if src != nil {
		s.weights = maps.Clone(src.weights)
	}
	w := stackWidths(net)
	if prec == Int8 {
		var cols []int
		for _, dirs := range net.Layers {
			cols = append(cols, dirs[0].Input, dirs[0].Out(), dirs[0].Hidden)
		}
		qn, sn := i8ScratchSize(maxRows, cols...)
		s.q = &Buffer{Name: "q", Kind: KindActivation, Elems: qn, ElemSize: 1, U8: make([]uint8, qn)}
		s.qs = s.state("qs", sn)
	}
	for k, dirs := range net.Layers {
		l := dirs[0]
		var bias, c *Buffer
		switch {
		case src != nil:
			bias = src.bias[k]
		case l.Cell.SumsBias():
			bias = &Buffer{Name: fmt.Sprintf("l%d.bias", k), Kind: KindWeight, Elems: l.Rows(), ElemSize: 4, F32: sumBias(l)}
		}
		if l.Cell == rnn.LSTM {
			c = s.state(fmt.Sprintf("l%d.c", k), maxRows*l.Hidden)
		}
		s.bias = append(s.bias, bias)
		s.h = append(s.h, s.state(fmt.Sprintf("l%d.h", k), maxRows*l.Out()))
		s.c = append(s.c, c)
	}
	s.y = s.state("y", maxRows*w.rows)
	if w.gru {
		s.yh = s.state("yh", maxRows*w.rows)
	}
	if w.proj {
		s.hfull = s.state("hfull", maxRows*w.hidden)
	}
	if net.HeadOut > 0 {
		s.head = s.state("head", maxRows*net.HeadOut)
	}
	if src != nil {
		s.xtab = src.xtab
	} else if l0 := net.Layers[0][0]; prec == F32 && net.Vocab > 0 && int64(net.Vocab)*int64(l0.Rows())*4 <= tokenTableBytes {
		// Every token's X' = embedding row · W_ihᵀ, by the product a
		// sequence's arrival steps would run (the same kernel, so the
		// same sums).
		R, I := l0.Rows(), net.Input
		s.xtab = &Buffer{Name: "l0.xtab", Kind: KindWeight, Elems: net.Vocab * R, ElemSize: 4}
		s.xtab.F32 = hugepage.Floats(s.xtab, s.xtab.Elems)
		f32.GemmNT(net.Vocab, R, I, net.Embedding, I, l0.Wih, I, 0, s.xtab.F32, R)
	}
	// Every matrix now, not at the first step that reads it: a copy or
	// packing of a large one takes milliseconds a request would wait.
	for k, dirs := range net.Layers {
		s.whh(k)
		s.wih(k)
		if dirs[0].Proj > 0 {
			s.whr(k)
		}
	}
	if net.HeadOut > 0 {
		s.headW()
	}
	bufs := []*Buffer{s.xtab}
	for _, b := range s.weights {
		bufs = append(bufs, b)
	}
	if err := checkOwners(net.Memory(), bufs); err != nil {
		return nil, err
	}
	return s, nil
}

// tokenTableBytes bounds a stepper's table of every token's layer-0 input
// projection (see Stepper): bytelm's (256 tokens, 768 rows) is 768 KiB.
// A larger table would push the recurrent weights out of the cache for
// what a step reads from it, and cost its memory once per stepper.
const tokenTableBytes = 4 << 20

func (s *Stepper) state(name string, elems int) *Buffer {
	return &Buffer{Name: name, Kind: KindActivation, Elems: elems, ElemSize: 4, F32: make([]float32, elems)}
}

// weight wraps one of the network's weight slices in a Buffer, once: the
// slice itself, holding the network's Memory that owns it (see
// weightList.weight).
func (s *Stepper) weight(name string, data *[]float32) *Buffer {
	if b, ok := s.weights[data]; ok {
		return b
	}
	b := &Buffer{Name: name, Kind: KindWeight, Elems: len(*data), ElemSize: 4, F32: *data, owner: s.net.Memory(), model: true}
	s.weights[data] = b
	return b
}

// layerWeight is weight for layer k's weight what ("bias_ih"), named
// "l<k>.<what>" when it is first wrapped: every step asks for it.
func (s *Stepper) layerWeight(k int, what string, data *[]float32) *Buffer {
	if b, ok := s.weights[data]; ok {
		return b
	}
	return s.weight(fmt.Sprintf("l%d.%s", k, what), data)
}

// matrix wraps layer k's rows×cols weight matrix what ("weight_hh"),
// role, in a Buffer, once: the slice itself for float32, a packed copy
// for int8.
func (s *Stepper) matrix(role Role, k int, what string, data *[]float32, rows, cols int) Mat {
	if s.prec != Int8 {
		b := s.layerWeight(k, what, data)
		if b.Role != role { // set once: Siblings read the same buffer
			b.Role = role
		}
		return Dense(b, 0, rows, cols)
	}
	b, ok := s.weights[data]
	if !ok {
		b = &Buffer{Name: fmt.Sprintf("l%d.%s", k, what), Kind: KindWeight, Role: role, Elems: f32.PackedI8Bytes(rows, cols), ElemSize: 1}
		b.U8 = hugepage.Bytes(b, b.Elems)
		f32.PackI8(b.U8, rows, cols, *data, cols)
		s.weights[data] = b
	}
	return Dense(b, 0, rows, cols)
}

// The network's matrices as the steps read them.
func (s *Stepper) whh(k int) Mat {
	l := s.net.Layers[k][0]
	return s.matrix(RoleWHH, k, "weight_hh", &l.Whh, l.Rows(), l.Out())
}

func (s *Stepper) wih(k int) Mat {
	l := s.net.Layers[k][0]
	return s.matrix(RoleWIH, k, "weight_ih", &l.Wih, l.Rows(), l.Input)
}

func (s *Stepper) whr(k int) Mat {
	l := s.net.Layers[k][0]
	return s.matrix(RoleWHR, k, "weight_hr", &l.Whr, l.Proj, l.Hidden)
}

func (s *Stepper) headW() Mat {
	return Dense(s.weight("head.weight", &s.net.HeadW), 0, s.net.HeadOut, s.net.Out())
}

// product is c = a·wᵀ + beta·c through the op w's precision needs; q and
// qs are the scratch of an int8 product.
func product(c, a, w Mat, q, qs *Buffer, beta float32) op {
	if w.Buf.ElemSize == 1 {
		return newGemmI8(c, a, w, q, qs, beta)
	}
	return newGemmNT(c, a, w, beta)
}

// Weights lists the buffers of weights the stepper's steps read: the
// token table (if any), the summed biases and the matrices, in no
// particular order.
func (s *Stepper) Weights() []*Buffer {
	var bufs []*Buffer
	if s.xtab != nil {
		bufs = append(bufs, s.xtab)
	}
	for _, b := range s.bias {
		if b != nil {
			bufs = append(bufs, b)
		}
	}
	for _, b := range s.weights {
		bufs = append(bufs, b)
	}
	return bufs
}

// Precision is how the stepper stores its recurrent weights.
func (s *Stepper) Precision() Precision { return s.prec }

// Active is the number of sequences in the batch.
func (s *Stepper) Active() int { return len(s.seqs) }

// Capacity is the largest batch.
func (s *Stepper) Capacity() int { return s.max }

// Add puts q in the batch, computing the input projections of all its
// known input (it needs at least one step). It fails if the batch is full
// or the input is invalid; q is then not in the batch.
func (s *Stepper) Add(q *Sequence) error {
	n := s.net
	if len(s.seqs) >= s.max {
		return fmt.Errorf("%w: batch full (%d rows)", ErrStepper, s.max)
	}
	if q.Head == HeadAll && n.HeadOut > 0 && n.HeadInput != rnn.HeadEveryStep {
		return inputErr("head", "the head reads %v: one row per sequence, at its last step (HeadLast), not every step", n.HeadInput)
	}
	if q.H0 != nil {
		if err := checkFloats("h0", q.H0, n.StateSize(1), stateHow(n, n.Out(), "h")); err != nil {
			return err
		}
	}
	if q.C0 != nil {
		if !n.HasCell() {
			return inputErr("c0", "the model has no LSTM layer, so no cell state")
		}
		if err := checkFloats("c0", q.C0, n.CellSize(1), stateHow(n, n.Hidden, "c")); err != nil {
			return err
		}
	}
	q.xp, q.xp0, q.known, q.t = nil, 0, 0, 0
	if s.xtab == nil {
		q.xp = &Buffer{Name: "xp", Kind: KindActivation, ElemSize: 4}
	}
	q.HeadOut, q.Output, q.HN, q.CN = q.HeadOut[:0], q.Output[:0], nil, nil
	tokens, features := q.Tokens, q.Features
	q.Tokens, q.Features = nil, nil
	if err := s.Extend(q, tokens, features); err != nil {
		return err
	}
	if q.known == 0 {
		return inputErr("T", "sequence length 0, want at least 1")
	}
	q.slot = len(s.seqs)
	s.seqs = append(s.seqs, q)
	for k, dirs := range n.Layers {
		O, H := dirs[0].Out(), dirs[0].Hidden
		h := s.h[k].F32[q.slot*O : (q.slot+1)*O]
		if q.H0 != nil {
			copy(h, q.H0[n.StateOffset(k, 0, 1):])
		} else {
			clear(h)
		}
		if s.c[k] != nil {
			c := s.c[k].F32[q.slot*H : (q.slot+1)*H]
			if q.C0 != nil {
				copy(c, q.C0[n.CellOffset(k, 0, 1):])
			} else {
				clear(c)
			}
		}
	}
	return nil
}

// Extend appends input steps to q (tokens for an embedding network, else
// features, a multiple of the input size) and computes their layer-0 input
// projections. It is how generation feeds a sampled token back. q.Tokens
// and q.Features keep all input given so far.
func (s *Stepper) Extend(q *Sequence, tokens []int64, features []float32) error {
	n := s.net
	l0 := n.Layers[0][0]
	I, R := n.Input, l0.Rows()
	var steps int
	if n.Vocab > 0 {
		if features != nil {
			return inputErr("features", "the model takes token ids, not features")
		}
		for i, id := range tokens {
			if id < 0 || id >= int64(n.Vocab) {
				return inputErr("tokens", "id %d at step %d is outside the vocabulary [0, %d)", id, q.known+i, n.Vocab)
			}
		}
		steps = len(tokens)
	} else {
		if tokens != nil {
			return inputErr("tokens", "the model takes features, not token ids")
		}
		if len(features)%I != 0 {
			return inputErr("features", "%d values is not a whole number of steps of %d", len(features), I)
		}
		steps = len(features) / I
		if err := checkFloats("features", features, steps*I, "steps*input_size"); err != nil {
			return err
		}
	}
	if steps == 0 {
		return nil
	}
	if q.known+steps > MaxSteps {
		return inputErr("T", "sequence length %d exceeds %d", q.known+steps, MaxSteps)
	}
	if n.Vocab > 0 {
		q.Tokens = append(q.Tokens, tokens...)
	} else {
		q.Features = append(q.Features, features...)
	}
	if s.xtab != nil {
		// A step reads the projection from the table by token id.
		q.known += steps
		return nil
	}
	xp := q.xp.F32
	if q.t > q.xp0 && !s.tracing {
		// The steps run need their projections no more: a generation
		// holds the rows of the steps ahead, not of every step so far
		// (a traced run keeps them, its steps' views pointing there).
		n := copy(xp, xp[(q.t-q.xp0)*R:(q.known-q.xp0)*R])
		xp, q.xp0 = xp[:n], q.t
	}
	rows := q.known - q.xp0 + steps
	if need := rows * R; cap(xp) < need || cap(xp) > 4*need && !s.tracing {
		// Grown by doubling; one a long prompt left large is let go.
		grown := make([]float32, need, max(need, min(2*cap(xp), 2*need)))
		copy(grown, xp)
		xp = grown
	}
	q.xp.F32, q.xp.Elems = xp[:rows*R], rows*R
	// The arrival steps: gather the embedding rows, then X' = x·W_ihᵀ.
	x := &Buffer{Name: "x", Kind: KindInput, Elems: steps * I, ElemSize: 4, F32: features}
	own := []*Buffer{x} // the arrival steps' own buffers, for the region checker
	arrival := make([]Step, 0, 2)
	at := Step{Layer: -1, T: -1}
	add := func(o op) {
		st := at
		st.Kernel, st.op = o.kernel(), o
		arrival = append(arrival, st)
	}
	if n.Vocab > 0 {
		x.Kind, x.F32 = KindActivation, make([]float32, steps*I)
		ids := &Buffer{Name: "arrival.tokens", Kind: KindInput, Elems: steps, ElemSize: 8, I64: tokens}
		own = append(own, ids)
		add(newGather(Dense(x, 0, steps, I), Dense(s.weight("embedding", &n.Embedding), 0, n.Vocab, I), Whole(ids)))
	}
	at.Layer = 0
	qa, qsa := s.q, s.qs
	if s.prec == Int8 && steps > s.max {
		qn := steps * f32.I8Stride(I)
		qa = &Buffer{Name: "arrival.q", Kind: KindActivation, Elems: qn, ElemSize: 1, U8: make([]uint8, qn)}
		qsa = &Buffer{Name: "arrival.qs", Kind: KindActivation, Elems: steps, ElemSize: 4, F32: make([]float32, steps)}
		own = append(own, qa, qsa)
	}
	add(product(Dense(q.xp, (q.known-q.xp0)*R, steps, R), Dense(x, 0, steps, I), s.wih(0), qa, qsa, 0))
	if err := s.runSteps(arrival, own...); err != nil {
		return err
	}
	if s.tracing {
		s.trace = append(s.trace, arrival...)
	}
	q.known += steps
	return nil
}

// runSteps runs steps in order; with the invariants build tag it checks
// each against its regions, over the stepper's buffers and own, the
// steps' own (the arrival steps' input and scratch).
func (s *Stepper) runSteps(steps []Step, own ...*Buffer) error {
	if invariants.Enabled || s.checked {
		return checkSteps(steps, 0, append(s.buffers(), own...))
	}
	for i := range steps {
		steps[i].op.run()
	}
	return nil
}

// buffers lists the stepper's own buffers and its sequences' (for the
// region checker).
func (s *Stepper) buffers() []*Buffer {
	var bs []*Buffer
	for _, b := range s.weights {
		bs = append(bs, b)
	}
	for k := range s.h {
		bs = append(bs, s.h[k])
		if s.c[k] != nil {
			bs = append(bs, s.c[k])
		}
		if s.bias[k] != nil {
			bs = append(bs, s.bias[k])
		}
	}
	for _, b := range []*Buffer{s.y, s.yh, s.hfull, s.head, s.q, s.qs} {
		if b != nil {
			bs = append(bs, b)
		}
	}
	if s.xtab != nil {
		bs = append(bs, s.xtab)
	}
	for _, q := range s.seqs {
		if q.xp != nil {
			bs = append(bs, q.xp)
		}
	}
	return bs
}

// Remove takes q out of the batch and copies its final state to q.HN (and
// q.CN for an LSTM). The last sequence moves into q's slot.
func (s *Stepper) Remove(q *Sequence) {
	n := s.net
	if q.slot >= len(s.seqs) || s.seqs[q.slot] != q {
		panic("schedule: Remove of a sequence not in the stepper")
	}
	q.HN, q.CN = make([]float32, n.StateSize(1)), nil
	if n.HasCell() {
		q.CN = make([]float32, n.CellSize(1))
	}
	last := len(s.seqs) - 1
	moved := s.seqs[last]
	for k, dirs := range n.Layers {
		O, H := dirs[0].Out(), dirs[0].Hidden
		h := s.h[k].F32
		copy(q.HN[n.StateOffset(k, 0, 1):], h[q.slot*O:(q.slot+1)*O])
		copy(h[q.slot*O:(q.slot+1)*O], h[last*O:(last+1)*O])
		if s.c[k] != nil {
			c := s.c[k].F32
			copy(q.CN[n.CellOffset(k, 0, 1):], c[q.slot*H:(q.slot+1)*H])
			copy(c[q.slot*H:(q.slot+1)*H], c[last*H:(last+1)*H])
		}
	}
	s.seqs[q.slot], moved.slot = moved, q.slot
	s.seqs[last] = nil // the backing array must not keep a sequence (its input and projections) alive
	s.seqs = s.seqs[:last]
	if last == 0 {
		// Nor must the last step's operands, which point into the
		// sequences' buffers, outlive the batch.
		clear(s.steps[:cap(s.steps)])
		s.steps = s.steps[:0]
		clear(s.srcs)
	}
}

// Step advances every active sequence by one time step. Every active
// sequence must have input pending (see Pending); it returns the sequences
// whose known input is now used up, which the caller must Extend or Remove
// before the next Step.
func (s *Stepper) Step() (done []*Sequence) {
	if len(s.seqs) == 0 {
		return nil
	}
	for _, q := range s.seqs {
		if !q.Pending() {
			panic("schedule: Step with a sequence that has no pending input")
		}
	}
	s.steps = s.steps[:0]
	s.buildStep()
	if err := s.runSteps(s.steps); err != nil {
		panic(err) // only with the invariants build tag
	}
	if s.tracing {
		s.trace = append(s.trace, s.steps...)
	}
	for _, q := range s.seqs {
		q.t++
		if !q.Pending() {
			done = append(done, q)
		}
	}
	return done
}

func (s *Stepper) add(layer int, o op) {
	s.steps = append(s.steps, Step{Kernel: o.kernel(), Layer: layer, T: -1, op: o})
}

// buildStep lists the steps of one time step for the current batch.
func (s *Stepper) buildStep() {
	n := s.net
	B := len(s.seqs)
	R0 := n.Layers[0][0].Rows()
	// Layer 0's pre-activations start from each sequence's input
	// projection: its own, or its token's row of the table.
	// The gather's sources are rebuilt each step in one slice (the
	// previous step's op is done with it), unless the steps are kept.
	srcs := s.srcs[:0]
	if s.tracing {
		srcs = nil
	}
	srcs = slices.Grow(srcs, B)[:B]
	if !s.tracing {
		s.srcs = srcs
		clear(srcs[B:cap(srcs)]) // rows gone since: their projections may go
	}
	for i, q := range s.seqs {
		if s.xtab != nil {
			srcs[i] = Dense(s.xtab, int(q.Tokens[q.t])*R0, 1, R0)
		} else {
			srcs[i] = Dense(q.xp, (q.t-q.xp0)*R0, 1, R0)
		}
	}
	s.add(0, &gatherRowsOp{dst: Dense(s.y, 0, B, R0), srcs: srcs})
	live := s.liveRows()
	for k, dirs := range n.Layers {
		l := dirs[0]
		O, H, R := l.Out(), l.Hidden, l.Rows()
		h := Dense(s.h[k], 0, B, O)
		y := Dense(s.y, 0, B, R)
		whh := s.whh(k)
		// The recurrent product adds h·W_hhᵀ, zero for the rows whose
		// state is still zero: it runs over the rows before them.
		recur := func() {
			if live > 0 {
				s.add(k, product(Dense(s.y, 0, live, R), Dense(s.h[k], 0, live, O), whh, s.q, s.qs, 1))
			}
		}
		if k > 0 {
			I := l.Input
			below := Dense(s.h[k-1], 0, B, I)
			s.add(k, product(y, below, s.wih(k), s.q, s.qs, 0))
		}
		if l.Cell == rnn.LSTM {
			recur()
			dst := h
			if l.Proj > 0 {
				dst = Dense(s.hfull, 0, B, H)
			}
			s.add(k, newLSTM(y, Whole(s.bias[k]), Dense(s.c[k], 0, B, H), dst))
			if l.Proj > 0 {
				s.add(k, product(h, dst, s.whr(k), s.q, s.qs, 0))
			}
		} else if l.Cell.Elman() {
			recur()
			s.add(k, newElman(l.Cell, y, Whole(s.bias[k]), h))
		} else {
			yh := Dense(s.yh, 0, B, R)
			bih := s.layerWeight(k, "bias_ih", &l.Bih)
			bhh := s.layerWeight(k, "bias_hh", &l.Bhh)
			s.add(k, product(yh, h, whh, s.q, s.qs, 0))
			s.add(k, newGRU(y, yh, Whole(bih), Whole(bhh), h, h))
		}
	}
	s.outputs(B)
}

// liveRows is the number of rows before the batch's trailing run of
// fresh rows: sequences at their first step with no initial state, whose
// h is zero in every layer. Rows are added at the end, so the rows a lane
// admits between two steps are such a run, and their recurrent products
// (two of bytelm's three products at a request's first step) are skipped.
// For finite weights that adds nothing the product would: it added zeros.
// A traced stepper (TraceStepper) runs every product over every row, as a
// batch with older rows does.
func (s *Stepper) liveRows() int {
	live := len(s.seqs)
	if s.tracing {
		return live
	}
	for live > 0 {
		if q := s.seqs[live-1]; q.t != 0 || q.H0 != nil {
			break
		}
		live--
	}
	return live
}

// outputs adds the head (for the sequences that want it this step) and
// copies per-step outputs out.
func (s *Stepper) outputs(B int) {
	n, O := s.net, s.net.Out()
	top := Dense(s.h[n.NumLayers-1], 0, B, O)
	seqs := s.seqs
	wantHead := false
	for _, q := range seqs {
		wantHead = wantHead || q.Head == HeadAll || q.Head == HeadLast && q.t == q.known-1
	}
	if wantHead && n.HeadOut > 0 {
		V := n.HeadOut
		head := Dense(s.head, 0, B, V)
		hw := s.headW()
		s.add(-1, newGemmNT(head, top, hw, 0))
		o := newHead(head, Whole(s.weight("head.bias", &n.HeadB)), n.Activation)
		o.after = func() {
			h := head.F32()
			for i, q := range seqs {
				if q.Head == HeadAll || q.Head == HeadLast && q.t == q.known-1 {
					q.HeadOut = append(q.HeadOut, h[i*V:(i+1)*V]...)
				}
			}
		}
		s.add(-1, o)
	}
	s.add(-1, &collectOp{src: top, fn: func() {
		t := top.F32()
		for i, q := range seqs {
			if q.Outputs {
				q.Output = append(q.Output, t[i*O:(i+1)*O]...)
			}
		}
	}})
}

// TraceStepper runs q alone through a fresh Stepper of net (weights at
// precision prec) until its input is used up and returns every step that
// ran, the arrival steps (embedding gather, layer 0's input projections)
// included, as a walk-only Plan (schedule Cellular): the memory traffic
// of serving that input through cellular batching, for the traffic
// analysis. Weights come first in its buffers.
func TraceStepper(net *rnn.Network, q *Sequence, prec Precision) (*Plan, error) {
	st, err := NewStepperPrecision(net, 1, prec)
	if err != nil {
		return nil, err
	}
	return st.traceRun(q)
}

// Trace is TraceStepper run on a Sibling of s: over s's weight buffers
// (its token table, int8 packings), with none of its own made for the
// trace.
func (s *Stepper) Trace(q *Sequence) (*Plan, error) {
	st, err := s.Sibling(1)
	if err != nil {
		return nil, err
	}
	return st.traceRun(q)
}

// traceRun runs q alone through st, a fresh stepper, for TraceStepper.
func (st *Stepper) traceRun(q *Sequence) (*Plan, error) {
	st.tracing = true
	if err := st.Add(q); err != nil {
		return nil, err
	}
	for q.Pending() {
		st.Step()
	}
	st.Remove(q)
	p := &Plan{Schedule: Cellular, B: 1, T: q.known, Steps: st.trace, dry: true}
	seen := map[*Buffer]bool{}
	var weights, others []*Buffer
	p.Walk(func(r Region, _ bool) {
		if seen[r.Buf] {
			return
		}
		seen[r.Buf] = true
		if r.Buf.Kind == KindWeight {
			weights = append(weights, r.Buf)
		} else {
			others = append(others, r.Buf)
		}
	})
	p.Buffers = append(weights, others...)
	return p, nil
}
