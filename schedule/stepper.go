package schedule

import (
	"errors"
	"fmt"

	"rnnserve/rnn"
)

// Stepper runs many sequences of one unidirectional network together, one
// time step at a time: cellular batching (Gao et al., BatchMaker, EuroSys
// 2018). Sequences join and leave between steps; at each step the
// recurrent product of every layer is one matrix-matrix product over all
// active rows.
//
// Layer 0's input projections X' = W_ih·x are computed once for all of a
// sequence's known inputs when it joins or is extended (Schedule A+). The
// layers above get their input one step at a time, so they read W_ih and
// W_hh at every step, as Schedule A does.
//
// A Stepper's steps are schedule Steps over its own buffers: LastStep
// returns the steps of the most recent Step for the traffic analysis.
//
// A Stepper is not safe for concurrent use: one goroutine owns it.
type Stepper struct {
	net  *rnn.Network
	max  int
	seqs []*Sequence // active, seqs[i].slot == i

	bias    []*Buffer // per layer: b_ih + b_hh (LSTM)
	h, c    []*Buffer // per layer: [max][Out], [max][Hidden]
	y, yh   *Buffer   // [max][Rows]
	hfull   *Buffer   // [max][Hidden], projection only
	head    *Buffer   // [max][HeadOut]
	weights map[*[]float32]*Buffer

	steps   []Step
	tracing bool // keep every step run in trace (TraceStepper)
	trace   []Step
}

// HeadMode says which of a sequence's steps get head outputs.
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

	xp    *Buffer // [known][Rows]: layer 0's input projections
	known int     // input steps known so far
	t     int     // next time step
	slot  int
}

// Known is the number of input steps given so far; Steps is how many have run.
func (q *Sequence) Known() int { return q.known }
func (q *Sequence) Steps() int { return q.t }

// Pending reports whether the sequence has input left for another step.
func (q *Sequence) Pending() bool { return q.t < q.known }

// ErrStepper is wrapped by errors from Add and Extend.
var ErrStepper = errors.New("schedule: stepper")

// NewStepper prepares net for cellular batching of up to maxRows sequences.
func NewStepper(net *rnn.Network, maxRows int) (*Stepper, error) {
	if !net.Uniform() {
		return nil, ErrMixedStack
	}
	if net.Bidirectional {
		return nil, fmt.Errorf("%w: a bidirectional network needs its whole input; run it as a Plan", ErrStepper)
	}
	if net.Dry() {
		return nil, fmt.Errorf("%w: the network has no weights", ErrStepper)
	}
	if maxRows < 1 || maxRows > MaxBatch {
		return nil, fmt.Errorf("%w: max rows %d, want 1..%d", ErrStepper, maxRows, MaxBatch)
	}
	s := &Stepper{net: net, max: maxRows, weights: map[*[]float32]*Buffer{}}
	R, O, H := net.Cell.Gates()*net.Hidden, net.Out(), net.Hidden
	for k, dirs := range net.Layers {
		l := dirs[0]
		if l.Cell == rnn.LSTM {
			s.bias = append(s.bias, &Buffer{Name: fmt.Sprintf("l%d.bias", k), Kind: KindWeight, Elems: R, ElemSize: 4, F32: sumBias(l)})
		}
		s.h = append(s.h, s.state(fmt.Sprintf("l%d.h", k), maxRows*O))
		if l.Cell == rnn.LSTM {
			s.c = append(s.c, s.state(fmt.Sprintf("l%d.c", k), maxRows*H))
		}
	}
	s.y = s.state("y", maxRows*R)
	if net.Cell == rnn.GRU {
		s.yh = s.state("yh", maxRows*R)
	}
	if net.Proj > 0 {
		s.hfull = s.state("hfull", maxRows*H)
	}
	if net.HeadOut > 0 {
		s.head = s.state("head", maxRows*net.HeadOut)
	}
	return s, nil
}

func (s *Stepper) state(name string, elems int) *Buffer {
	return &Buffer{Name: name, Kind: KindActivation, Elems: elems, ElemSize: 4, F32: make([]float32, elems)}
}

// weight wraps one of the network's weight slices in a Buffer, once.
func (s *Stepper) weight(name string, data *[]float32) *Buffer {
	if b, ok := s.weights[data]; ok {
		return b
	}
	b := &Buffer{Name: name, Kind: KindWeight, Elems: len(*data), ElemSize: 4, F32: *data}
	s.weights[data] = b
	return b
}

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
	L, O, H := n.NumLayers, n.Out(), n.Hidden
	if q.H0 != nil {
		if err := checkFloats("h0", q.H0, L*O, fmt.Sprintf("layers*%d", O)); err != nil {
			return err
		}
	}
	if q.C0 != nil {
		if n.Cell != rnn.LSTM {
			return inputErr("c0", "a GRU has no cell state")
		}
		if err := checkFloats("c0", q.C0, L*H, fmt.Sprintf("layers*%d", H)); err != nil {
			return err
		}
	}
	q.xp, q.known, q.t = &Buffer{Name: "xp", Kind: KindActivation, ElemSize: 4}, 0, 0
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
	for k := range n.Layers {
		h := s.h[k].F32[q.slot*O : (q.slot+1)*O]
		if q.H0 != nil {
			copy(h, q.H0[k*O:])
		} else {
			clear(h)
		}
		if s.c != nil {
			c := s.c[k].F32[q.slot*H : (q.slot+1)*H]
			if q.C0 != nil {
				copy(c, q.C0[k*H:])
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
	xp := q.xp.F32
	if need := (q.known + steps) * R; cap(xp) < need {
		grown := make([]float32, need, max(need, 2*cap(xp)))
		copy(grown, xp)
		xp = grown
	}
	q.xp.F32, q.xp.Elems = xp[:(q.known+steps)*R], (q.known+steps)*R
	// The arrival steps: gather the embedding rows, then X' = x·W_ihᵀ.
	x := &Buffer{Name: "x", Kind: KindInput, Elems: steps * I, ElemSize: 4, F32: features}
	var arrival []Step
	if n.Vocab > 0 {
		x.Kind, x.F32 = KindActivation, make([]float32, steps*I)
		emb := s.weight("embedding", &n.Embedding)
		reads := make([]Region, len(tokens))
		for i, id := range tokens {
			reads[i] = mat(emb, int(id)*I, 1, I, I)
		}
		arrival = append(arrival, Step{Kernel: KEmbed, Layer: -1, T: -1, Reads: reads, Writes: []Region{all(x)},
			run: func() { rnn.Embed(x.F32, emb.F32, I, tokens) }})
	}
	wih, dst, off := s.weight("l0.weight_ih", &l0.Wih), q.xp, q.known*R
	arrival = append(arrival, Step{Kernel: KMatMul, Layer: 0, T: -1, Reads: []Region{all(wih), all(x)}, Writes: []Region{mat(dst, off, steps, R, R)},
		run: func() { rnn.MatMulT(steps, R, I, x.F32, I, wih.F32, I, 0, dst.F32[off:], R) }})
	for i := range arrival {
		arrival[i].run()
	}
	if s.tracing {
		s.trace = append(s.trace, arrival...)
	}
	q.known += steps
	return nil
}

// Remove takes q out of the batch and copies its final state to q.HN (and
// q.CN for an LSTM). The last sequence moves into q's slot.
func (s *Stepper) Remove(q *Sequence) {
	n, O, H := s.net, s.net.Out(), s.net.Hidden
	if q.slot >= len(s.seqs) || s.seqs[q.slot] != q {
		panic("schedule: Remove of a sequence not in the stepper")
	}
	q.HN, q.CN = make([]float32, n.NumLayers*O), nil
	if s.c != nil {
		q.CN = make([]float32, n.NumLayers*H)
	}
	last := len(s.seqs) - 1
	moved := s.seqs[last]
	for k := range n.Layers {
		copy(q.HN[k*O:], s.h[k].F32[q.slot*O:(q.slot+1)*O])
		copy(s.h[k].F32[q.slot*O:(q.slot+1)*O], s.h[k].F32[last*O:(last+1)*O])
		if s.c != nil {
			copy(q.CN[k*H:], s.c[k].F32[q.slot*H:(q.slot+1)*H])
			copy(s.c[k].F32[q.slot*H:(q.slot+1)*H], s.c[k].F32[last*H:(last+1)*H])
		}
	}
	s.seqs[q.slot], moved.slot = moved, q.slot
	s.seqs = s.seqs[:last]
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
	for i := range s.steps {
		s.steps[i].run()
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

// LastStep returns the steps the most recent Step ran, with their regions,
// for the traffic analysis. The slice is reused by the next Step.
func (s *Stepper) LastStep() []Step { return s.steps }

func (s *Stepper) add(st Step) { s.steps = append(s.steps, st) }

// buildStep lists the steps of one time step for the current batch.
func (s *Stepper) buildStep() {
	n := s.net
	B := len(s.seqs)
	H, O := n.Hidden, n.Out()
	R := n.Cell.Gates() * H
	y := s.y
	// Layer 0's pre-activations start from each sequence's input projection.
	reads := make([]Region, B)
	for i, q := range s.seqs {
		reads[i] = mat(q.xp, q.t*R, 1, R, R)
	}
	seqs := s.seqs
	s.add(Step{Kernel: KCopy, Layer: 0, T: -1, Reads: reads, Writes: []Region{mat(y, 0, B, R, R)},
		run: func() {
			for i, q := range seqs {
				copy(y.F32[i*R:(i+1)*R], q.xp.F32[q.t*R:(q.t+1)*R])
			}
		}})
	for k, dirs := range n.Layers {
		l := dirs[0]
		h := s.h[k]
		whh := s.weight(fmt.Sprintf("l%d.weight_hh", k), &l.Whh)
		if k > 0 {
			below := s.h[k-1]
			wih := s.weight(fmt.Sprintf("l%d.weight_ih", k), &l.Wih)
			I := l.Input
			s.add(Step{Kernel: KMatMul, Layer: k, T: -1, Reads: []Region{all(wih), mat(below, 0, B, I, I)}, Writes: []Region{mat(y, 0, B, R, R)},
				run: func() { rnn.MatMulT(B, R, I, below.F32, I, wih.F32, I, 0, y.F32, R) }})
		}
		if l.Cell == rnn.LSTM {
			c, bias := s.c[k], s.bias[k]
			s.add(Step{Kernel: KMatMul, Layer: k, T: -1, Reads: []Region{all(whh), mat(h, 0, B, O, O), mat(y, 0, B, R, R)}, Writes: []Region{mat(y, 0, B, R, R)},
				run: func() { rnn.MatMulT(B, R, O, h.F32, O, whh.F32, O, 1, y.F32, R) }})
			dst, ldd := h, O
			if l.Proj > 0 {
				dst, ldd = s.hfull, H
			}
			s.add(Step{Kernel: KLSTM, Layer: k, T: -1, Reads: []Region{mat(y, 0, B, R, R), all(bias), mat(c, 0, B, H, H)}, Writes: []Region{mat(c, 0, B, H, H), mat(dst, 0, B, H, ldd)},
				run: func() { rnn.LSTMPointwise(B, H, y.F32, R, bias.F32, c.F32, dst.F32, ldd) }})
			if l.Proj > 0 {
				hf := s.hfull
				whr := s.weight(fmt.Sprintf("l%d.weight_hr", k), &l.Whr)
				s.add(Step{Kernel: KMatMul, Layer: k, T: -1, Reads: []Region{all(whr), mat(hf, 0, B, H, H)}, Writes: []Region{mat(h, 0, B, O, O)},
					run: func() { rnn.MatMulT(B, O, H, hf.F32, H, whr.F32, H, 0, h.F32, O) }})
			}
		} else {
			yh := s.yh
			bih := s.weight(fmt.Sprintf("l%d.bias_ih", k), &l.Bih)
			bhh := s.weight(fmt.Sprintf("l%d.bias_hh", k), &l.Bhh)
			s.add(Step{Kernel: KMatMul, Layer: k, T: -1, Reads: []Region{all(whh), mat(h, 0, B, O, O)}, Writes: []Region{mat(yh, 0, B, R, R)},
				run: func() { rnn.MatMulT(B, R, O, h.F32, O, whh.F32, O, 0, yh.F32, R) }})
			s.add(Step{Kernel: KGRU, Layer: k, T: -1, Reads: []Region{mat(y, 0, B, R, R), mat(yh, 0, B, R, R), all(bih), all(bhh), mat(h, 0, B, O, O)}, Writes: []Region{mat(h, 0, B, O, O)},
				run: func() { rnn.GRUPointwise(B, H, y.F32, R, yh.F32, R, bih.F32, bhh.F32, h.F32, O) }})
		}
	}
	s.outputs(B)
}

// outputs adds the head (for the sequences that want it this step) and
// copies per-step outputs out.
func (s *Stepper) outputs(B int) {
	n, O := s.net, s.net.Out()
	top := s.h[n.NumLayers-1]
	seqs := s.seqs
	wantHead := false
	for _, q := range seqs {
		wantHead = wantHead || q.Head == HeadAll || q.Head == HeadLast && q.t == q.known-1
	}
	if wantHead && n.HeadOut > 0 {
		V, head := n.HeadOut, s.head
		hw := s.weight("head.weight", &n.HeadW)
		hb := s.weight("head.bias", &n.HeadB)
		act := n.Activation
		s.add(Step{Kernel: KMatMul, Layer: -1, T: -1, Reads: []Region{all(hw), mat(top, 0, B, O, O)}, Writes: []Region{mat(head, 0, B, V, V)},
			run: func() { rnn.MatMulT(B, V, O, top.F32, O, hw.F32, O, 0, head.F32, V) }})
		s.add(Step{Kernel: KHead, Layer: -1, T: -1, Reads: []Region{mat(head, 0, B, V, V), all(hb)}, Writes: []Region{mat(head, 0, B, V, V)},
			run: func() {
				rnn.AddBias(B, V, head.F32, V, hb.F32)
				switch act {
				case rnn.ActSoftmax:
					rnn.Softmax(B, V, head.F32)
				case rnn.ActLogSoftmax:
					rnn.LogSoftmax(B, V, head.F32)
				}
				for i, q := range seqs {
					if q.Head == HeadAll || q.Head == HeadLast && q.t == q.known-1 {
						q.HeadOut = append(q.HeadOut, head.F32[i*V:(i+1)*V]...)
					}
				}
			}})
	}
	s.add(Step{Kernel: KCopy, Layer: -1, T: -1, Reads: []Region{mat(top, 0, B, O, O)},
		run: func() {
			for i, q := range seqs {
				if q.Outputs {
					q.Output = append(q.Output, top.F32[i*O:(i+1)*O]...)
				}
			}
		}})
}

// TraceStepper runs q alone through a fresh Stepper of net until its input
// is used up and returns every step that ran, the arrival steps (embedding
// gather, layer 0's input projections) included, as a walk-only Plan
// (schedule Cellular): the memory traffic of serving that input through
// cellular batching, for the traffic analysis. Weights come first in its
// buffers.
func TraceStepper(net *rnn.Network, q *Sequence) (*Plan, error) {
	st, err := NewStepper(net, 1)
	if err != nil {
		return nil, err
	}
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
