package server

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
	"rnnserve/server/internal/infer"
)

// seqModel serves a recurrent stack (LSTM/GRU, uni- or bidirectional):
// whole-request plans of the schedule chosen for it, and, when it runs in
// one direction, a cellular batcher whose lanes step many requests'
// sequences together.
type seqModel struct {
	modelBase
	net *rnn.Network
	// form is what whole-request plans run. A later look may replace it
	// (lookLater), whole: a request reads it once and runs the programs
	// it read to the end.
	form  atomic.Pointer[seqForm]
	later *wideLater // the later looks at the wide form; nil when there are none
	// live is the live look timing lone requests, while one does
	// (lookLive); nil otherwise.
	live atomic.Pointer[liveLook]
	// relabel moves the model's rnnserve_model_info series from the
	// schedule it served to the one it serves after a later look's switch.
	relabel func(from, to string)
	batch   *batcher[*seqWork] // no lanes for a bidirectional model
	// batching sends infer requests through batch; off, each runs its own
	// plan. Generation always uses batch.
	batching bool
	// alwaysStep keeps a lone request in the step-by-step batch instead of
	// running it as a whole plan (tests of the batched path set it).
	alwaysStep bool
	waiting    atomic.Int64 // unbatched requests waiting for a core
	maxWait    int64
	opts       *Options
	names      *seqNames
}

var _ model = (*seqModel)(nil)

// seqForm is the programs of a sequence model's whole-request plans: prog
// on the cores one request gets, and wide, prog across every core, which
// a request that finds every core of the model free runs when prog is P
// on fewer (nil otherwise, or while the load and the later looks have
// not found it faster).
type seqForm struct {
	prog, wide *schedule.Program
}

func (m *seqModel) base() *modelBase { return &m.modelBase }

// seqWork is a sequence model's part of a batcher job: its rows, and the
// sampling state of a generation.
type seqWork struct {
	seqs      []*schedule.Sequence
	remaining int
	gen       *generation
}

// seqInput is an infer request decoded for a sequence model.
type seqInput struct {
	B, T     int
	tokens   []int64   // [B][T]
	features []float32 // [B][T][F]
	lengths  []int     // [B] each row's real steps; nil: all T
	outputs  []outputSpec
}

// steps is row b's number of real steps.
func (r *seqInput) steps(b int) int {
	if r.lengths == nil {
		return r.T
	}
	return r.lengths[b]
}

type outputSpec struct {
	name string // as served
	def  outputDef
	last bool // only the last time step
	k    int  // top_k
}

// wants reports whether the request asks for an output of the kind.
func (r *seqInput) wants(kind string) bool {
	for _, o := range r.outputs {
		if o.def.kind == kind {
			return true
		}
	}
	return false
}

// Outputs a sequence model may be asked for under rnnserve's names.
var outputNames = map[string]string{
	"logits":      "FP32 [B, T, V]: the head's output (after the model's activation)",
	"probs":       "FP32 [B, T, V]: next-token probabilities",
	"top_k":       "INT64 [B, T, k]: the k most likely ids (parameter k, default 5)",
	"top_k_probs": "FP32 [B, T, k]: their probabilities",
	"output":      "FP32 [B, T, W]: the last layer's output at each step",
	"hidden":      "FP32 [B, layers*dirs, Out]: the final h ([B, total] for a stack of layers of different sizes)",
	"cell":        "FP32 [B, layers*dirs, H]: the final c of the LSTM layers ([B, total] for a mixed stack)",
}

// decodeSeq validates a request against a sequence model's network and
// the names it is served under.
func decodeSeq(r *Request, net *rnn.Network, names *seqNames, o *Options) (*seqInput, error) {
	in := &seqInput{}
	want := names.input
	if len(r.Inputs) == 0 {
		return nil, infer.BadRequest("no input: send %q", want)
	}
	var lengths *Tensor
	inputs := r.Inputs
	for i := range inputs {
		if inputs[i].Name == "lengths" {
			lengths = &inputs[i]
			inputs = append(append([]Tensor(nil), inputs[:i]...), inputs[i+1:]...)
			break
		}
	}
	if len(inputs) == 0 {
		return nil, infer.BadRequest("no input besides %q: send %q", "lengths", want)
	}
	if len(inputs) > 1 {
		return nil, infer.BadRequest("more inputs than %q and %q (%q and %q)", want, "lengths", infer.Clip(inputs[0].Name), infer.Clip(inputs[1].Name))
	}
	t := &inputs[0]
	switch {
	case t.Name == want:
	case t.Name == "tokens" && net.Vocab == 0 && !names.custom:
		return nil, infer.BadRequest(`the model takes input "features" [B, T, %d] FP32, not "tokens"`, net.Input)
	case t.Name == "features" && net.Vocab > 0 && !names.custom:
		return nil, infer.BadRequest(`the model takes input "tokens" [B, T] INT64, not "features"`)
	default:
		return nil, infer.BadRequest("unknown input %q (want %q)", infer.Clip(t.Name), want)
	}
	// Limits on the first two axes as the model lays them out.
	rows, steps := int64(o.MaxRequestRows), int64(o.MaxSteps)
	if names.timeMajor {
		rows, steps = steps, rows
	}
	switch {
	case net.Vocab > 0:
		if t.Datatype != "INT64" && t.Datatype != "INT32" {
			return nil, infer.BadRequest(`input %q: datatype %q, want INT64 or INT32 token ids`, want, infer.Clip(t.Datatype))
		}
		if err := checkShape(t, []int64{rows, steps}); err != nil {
			return nil, err
		}
		if names.timeMajor {
			t = toBatchFirst(t)
		}
		for j, id := range t.Int64 {
			if id < 0 || id >= int64(net.Vocab) {
				return nil, infer.BadRequest(`input "tokens": id %d at [%d, %d] is outside the vocabulary [0, %d)`, id, j/int(t.Shape[1]), j%int(t.Shape[1]), net.Vocab)
			}
		}
		in.tokens = t.Int64
	default:
		if t.Datatype != "FP32" {
			return nil, infer.BadRequest(`input %q: datatype %q, want FP32 features`, want, infer.Clip(t.Datatype))
		}
		if err := checkShape(t, []int64{rows, steps, int64(net.Input)}); err != nil {
			return nil, err
		}
		if t.Shape[2] != int64(net.Input) {
			return nil, infer.BadRequest("input %q: dimension 2 of shape %v is %d, want the model's input size %d", t.Name, t.Shape, t.Shape[2], net.Input)
		}
		for i, x := range t.Float32 {
			if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
				return nil, infer.BadRequest("input %q: value at index %d is not a finite float32", t.Name, i)
			}
		}
		if names.timeMajor {
			t = toBatchFirst(t)
		}
		in.features = t.Float32
	}
	in.B, in.T = int(t.Shape[0]), int(t.Shape[1])
	if lengths != nil {
		if err := decodeLengths(in, lengths); err != nil {
			return nil, err
		}
	}
	if err := decodeOutputs(in, r.Outputs, net, names); err != nil {
		return nil, err
	}
	if r.Sequence.ID != "" && in.B != 1 {
		return nil, infer.BadRequest("a sequence request must have batch size 1, got %d", in.B)
	}
	if r.Sequence.ID != "" && bidirectional(net) {
		// Its reverse direction starts at the last step of what it is
		// given: pieces would not give the whole input's result.
		return nil, infer.BadRequest("a bidirectional model reads a sequence whole, its reverse direction from the last step: sequence parameters are not supported; send the whole input in one request")
	}
	return in, nil
}

// bidirectional reports whether any layer of net runs both ways.
func bidirectional(net *rnn.Network) bool {
	for _, dirs := range net.Layers {
		if len(dirs) == 2 {
			return true
		}
	}
	return false
}

// decodeLengths takes the optional "lengths" input: INT64 or INT32 [B],
// each row's real steps in 1..T, in any order (pack_padded_sequence with
// enforce_sorted=False).
func decodeLengths(in *seqInput, t *Tensor) error {
	if t.Datatype != "INT64" && t.Datatype != "INT32" {
		return infer.BadRequest(`input "lengths": datatype %q, want INT64 or INT32`, infer.Clip(t.Datatype))
	}
	if len(t.Shape) != 1 || t.Shape[0] != int64(in.B) {
		return infer.BadRequest(`input "lengths": shape %v, want [%d] (one length per row)`, infer.ClipShape(t.Shape), in.B)
	}
	in.lengths = make([]int, in.B)
	for b, l := range t.Int64 {
		if l < 1 || l > int64(in.T) {
			return infer.BadRequest(`input "lengths": row %d has length %d, want 1..%d`, b, l, in.T)
		}
		in.lengths[b] = int(l)
	}
	return nil
}

// checkShape checks a tensor's shape against the rank and limits wanted
// (the tensor's data already matches its shape).
func checkShape(t *Tensor, limits []int64) error {
	if len(t.Shape) != len(limits) {
		return infer.BadRequest("input %q: shape %v has rank %d, want %d", t.Name, infer.ClipShape(t.Shape), len(t.Shape), len(limits))
	}
	for i, d := range t.Shape {
		if d < 1 || d > limits[i] {
			return infer.BadRequest("input %q: dimension %d of shape %v is %d, want 1..%d", t.Name, i, t.Shape, d, limits[i])
		}
	}
	return nil
}

func decodeOutputs(in *seqInput, outs []RequestedOutput, net *rnn.Network, names *seqNames) error {
	if len(outs) == 0 {
		for _, name := range names.defaults {
			outs = append(outs, RequestedOutput{Name: name})
		}
	}
	for _, o := range outs {
		def, ok := names.outputs[o.Name]
		if !ok {
			switch _, ours := outputNames[o.Name]; {
			case ours && names.custom:
				return fmt.Errorf("%w %q: the model's outputs have its own names (%s)", ErrUnsupportedOutput, infer.Clip(o.Name), names.known())
			case o.Name == "logits" || o.Name == "probs" || o.Name == "top_k" || o.Name == "top_k_probs":
				return fmt.Errorf("%w %q: the model has no head", ErrUnsupportedOutput, o.Name)
			case o.Name == "cell":
				return fmt.Errorf("%w %q: the model has no LSTM layer, so no cell state", ErrUnsupportedOutput, o.Name)
			}
			return fmt.Errorf("%w %q (known: %s)", ErrUnsupportedOutput, infer.Clip(o.Name), names.known())
		}
		if def.kind == "none" {
			return fmt.Errorf("%w %q: the exported model has this output, but rnnserve does not compute it (known: %s)", ErrUnsupportedOutput, infer.Clip(o.Name), names.known())
		}
		spec := outputSpec{name: o.Name, def: def, k: 5}
		what := fmt.Sprintf("output %q", o.Name)
		if err := o.Parameters.Only(what, "last_step", "k"); err != nil {
			return err
		}
		if v, ok, err := o.Parameters.Bool("last_step"); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		} else if ok {
			spec.last = v
		}
		if k, ok, err := o.Parameters.Int("k", 1, int64(max(1, net.HeadOut))); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		} else if ok {
			spec.k = int(k)
		}
		for _, prev := range in.outputs {
			if prev.name == o.Name {
				return infer.BadRequest("output %q asked for twice", o.Name)
			}
		}
		in.outputs = append(in.outputs, spec)
	}
	return nil
}

// rowResult holds one batch row's outputs: per real step (or its last
// real step only) head rows and last-layer outputs, and the final state.
// Steps past a row's length are padding; encode fills them in.
type rowResult struct {
	head   []float32 // [steps][V]
	output []float32 // [steps][W]
	hn, cn []float32 // the row's h and c, layer by layer (rnn.Network.StateOffset for B = 1)
}

func (m *seqModel) infer(ctx context.Context, r *Request, tm *timing) ([]OutputTensor, int, error) {
	// Request parameters other than the sequence controls are ignored,
	// as KServe v2 allows (Triton clients send priority and timeout).
	in, err := decodeSeq(r, m.net, m.names, m.opts)
	if err != nil {
		return nil, 0, err
	}
	if err := r.ExpectOutputs(m.plannedOutputs(in)); err != nil {
		return nil, 0, err
	}
	var st, init *seqState
	if id := r.Sequence.ID; id != "" {
		if st, err = m.seqs.acquire(id, r.Sequence.Start); err != nil {
			return nil, 0, err
		}
		m.metrics.sequences.Set(float64(m.seqs.count()))
		if st.h != nil {
			init = st // continue from the stored state; a new sequence starts from zeros
		}
	}
	res, err := m.run1(ctx, in, init, tm)
	if st != nil {
		var h, c []float32
		if err == nil {
			h, c = res[0].hn, res[0].cn
		}
		m.seqs.release(r.Sequence.ID, st, h, c, r.Sequence.End && err == nil)
		m.metrics.sequences.Set(float64(m.seqs.count()))
	}
	if err != nil {
		return nil, 0, err
	}
	outs, err := m.encode(in, res)
	return outs, in.B, err
}

// run1 runs a decoded request, batched or as a whole plan, starting from
// state (nil for zeros), and returns one result per batch row.
func (m *seqModel) run1(ctx context.Context, in *seqInput, state *seqState, tm *timing) ([]rowResult, error) {
	wantHead, lastOnly := false, true
	for _, o := range in.outputs {
		if o.def.head() {
			wantHead = true
			lastOnly = lastOnly && o.last
		}
	}
	// A request with more rows than a batch holds runs as its own plan.
	if m.batching && in.B <= m.opts.Batching.MaxRows {
		return m.inferBatched(ctx, in, state, wantHead, lastOnly, tm)
	}
	return m.inferPlan(ctx, in, state, wantHead, tm)
}

func (m *seqModel) inferBatched(ctx context.Context, in *seqInput, state *seqState, wantHead, lastOnly bool, tm *timing) ([]rowResult, error) {
	n := m.net
	w := &seqWork{}
	for b := 0; b < in.B; b++ {
		q := &schedule.Sequence{Outputs: in.wants("output")}
		if wantHead {
			q.Head = schedule.HeadAll
			if lastOnly || n.HeadInput != rnn.HeadEveryStep {
				q.Head = schedule.HeadLast
			}
		}
		L := in.steps(b)
		if in.tokens != nil {
			q.Tokens = in.tokens[b*in.T : b*in.T+L]
		} else {
			q.Features = in.features[b*in.T*n.Input : (b*in.T+L)*n.Input]
		}
		if state != nil {
			q.H0, q.C0 = state.h, state.c
		}
		w.seqs = append(w.seqs, q)
	}
	j := &job[*seqWork]{ctx: ctx, rows: in.B, work: w}
	var res []rowResult
	if !m.alwaysStep {
		j.solo = func(cores coreSlots) error {
			var err error
			res, err = m.runWhole(cores, in, state, wantHead)
			return err
		}
	}
	start := time.Now()
	if ran, err := m.batch.solo(j); ran {
		tm.compute = time.Since(start)
		if err == nil {
			m.metrics.queue.Observe(0)
			m.metrics.compute.Observe(tm.compute.Seconds())
		}
		return res, err
	}
	if err := m.batch.submit(j); err != nil {
		return nil, err
	}
	if err := m.batch.wait(ctx, j); err != nil {
		return nil, err
	}
	res = make([]rowResult, in.B)
	for b, q := range w.seqs {
		res[b] = rowResult{head: q.HeadOut, output: q.Output, hn: q.HN, cn: q.CN}
	}
	tm.queue, tm.compute = j.started.Sub(j.enqueued), j.finished.Sub(j.started)
	return res, nil
}

func (m *seqModel) inferPlan(ctx context.Context, in *seqInput, state *seqState, wantHead bool, tm *timing) ([]rowResult, error) {
	if m.waiting.Add(1) > m.maxWait {
		m.waiting.Add(-1)
		return nil, ErrBusy
	}
	enqueued := time.Now()
	err := m.cores.take(ctx)
	m.waiting.Add(-1)
	if err != nil {
		return nil, err
	}
	defer m.cores.give()
	started := time.Now()
	res, err := m.runWhole(m.cores, in, state, wantHead)
	if err != nil {
		return nil, err
	}
	tm.queue, tm.compute = started.Sub(enqueued), time.Since(started)
	return res, nil
}

// runWhole runs a request as one whole plan, holding one of cores'
// slots: widen's program, or, while a live look times lone requests, the
// one it asks of this request (sample).
func (m *seqModel) runWhole(cores coreSlots, in *seqInput, state *seqState, wantHead bool) ([]rowResult, error) {
	if lv := m.live.Load(); lv != nil {
		return m.sample(lv, cores, in, state, wantHead)
	}
	prog, release := m.widen(cores)
	return m.runPlan(in, state, wantHead, prog, release)
}

// widen is called holding one of the model's core slots, and returns
// the program the request runs. When the model has a wide program and
// every other slot is free too, that is the wide one: widen takes the
// other slots and returns their release, and the request runs across
// every core. Otherwise it takes none and release is nil.
func (m *seqModel) widen(cores coreSlots) (prog *schedule.Program, release func()) {
	f := m.form.Load()
	if f.wide == nil {
		return f.prog, nil
	}
	if release = cores.takeRest(); release == nil {
		return f.prog, nil
	}
	m.metrics.wide.Inc()
	return f.wide, release
}

// runPlan runs a request as one whole plan of prog (widen's), and then
// calls release if it is not nil. Rows of
// different lengths go into the plan longest first, as the schedules
// want them, and come back in the request's order.
func (m *seqModel) runPlan(in *seqInput, state *seqState, wantHead bool, prog *schedule.Program, release func()) ([]rowResult, error) {
	n, B, T := m.net, in.B, in.T
	order := make([]int, B) // plan row -> request row
	for i := range order {
		order[i] = i
	}
	pin := schedule.Input{T: T, B: B}
	if in.lengths != nil {
		slices.SortStableFunc(order, func(a, b int) int { return in.lengths[b] - in.lengths[a] })
		pin.Lengths = make([]int, B)
		for i, b := range order {
			pin.Lengths[i] = in.lengths[b]
		}
	}
	if in.tokens != nil {
		pin.Tokens = make([]int64, T*B)
		for i, b := range order {
			for t := 0; t < T; t++ {
				pin.Tokens[t*B+i] = in.tokens[b*T+t]
			}
		}
	} else {
		F := n.Input
		pin.Features = make([]float32, T*B*F)
		for i, b := range order {
			for t := 0; t < T; t++ {
				copy(pin.Features[(t*B+i)*F:(t*B+i+1)*F], in.features[(b*T+t)*F:])
			}
		}
	}
	if state != nil {
		pin.H0, pin.C0 = state.h, state.c
	}
	if release != nil {
		defer release()
	}
	p, err := prog.Acquire(pin, schedule.PlanOptions{Head: wantHead})
	if err != nil {
		return nil, err
	}
	// The outputs belong to the plan: they are copied out before it goes back.
	defer p.Release()
	out, err := p.Run()
	if err != nil {
		return nil, err
	}
	m.executed(T * B)
	m.metrics.tokens.Add(float64(T * B))
	W, V := n.OutputWidth(), n.HeadOut
	res := make([]rowResult, B)
	if B == 1 && in.lengths == nil {
		// One row: the plan's buffers are already batch-first.
		rr := &res[0]
		if in.wants("output") {
			rr.output = slices.Clone(out.Output)
		}
		if wantHead {
			rr.head = slices.Clone(out.Head)
		}
		rr.hn, rr.cn = slices.Clone(out.HN), slices.Clone(out.CN)
		return res, nil
	}
	perStep := n.HeadInput == rnn.HeadEveryStep
	for i, b := range order {
		rr := &res[b]
		for t := 0; t < in.steps(b); t++ {
			if in.wants("output") {
				rr.output = append(rr.output, out.Output[(t*B+i)*W:(t*B+i+1)*W]...)
			}
			if wantHead && perStep {
				rr.head = append(rr.head, out.Head[(t*B+i)*V:(t*B+i+1)*V]...)
			}
		}
		if wantHead && !perStep {
			rr.head = slices.Clone(out.Head[i*V : (i+1)*V])
		}
		for k, dirs := range n.Layers {
			for d, l := range dirs {
				O, H := l.Out(), l.Hidden
				off := n.StateOffset(k, d, B) + i*O
				rr.hn = append(rr.hn, out.HN[off:off+O]...)
				if out.CN != nil && l.Cell == rnn.LSTM {
					off := n.CellOffset(k, d, B) + i*H
					rr.cn = append(rr.cn, out.CN[off:off+H]...)
				}
			}
		}
	}
	return res, nil
}

// encode builds the output tensors a request asked for, in the layout
// the model's names give (batch-first unless its spec's io says otherwise).
func (m *seqModel) encode(in *seqInput, res []rowResult) ([]OutputTensor, error) {
	n := m.net
	B := int64(in.B)
	outs := make([]OutputTensor, 0, len(in.outputs))
	for _, o := range in.outputs {
		steps := int64(in.T)
		if o.last {
			steps = 1
		}
		var out OutputTensor
		switch o.def.kind {
		case "logits", "probs", "top_k", "top_k_probs":
			V := n.HeadOut
			var f []float32
			var ids []int64
			probs := make([]float32, V)
			// A head on h_n or the last step has one row per sequence:
			// [B, V] (or [B, k]), as the PyTorch module returns it.
			perStep := o.def.perStep()
			if !perStep {
				steps = 1
			}
			for b, rr := range res {
				rows := rr.head
				if o.last || !perStep {
					rows = rows[len(rows)-V:]
				} else if pad := in.T - in.steps(b); pad > 0 {
					// Padding steps: the head of a zero output, as PyTorch
					// gives for pad_packed_sequence's zeros.
					rows = append(rows[:len(rows):len(rows)], m.headOfZero(pad)...)
				}
				if len(rows) != int(steps)*V {
					return nil, fmt.Errorf("server: head rows %d, want %d", len(rows)/V, steps)
				}
				for t := 0; t < int(steps); t++ {
					row := rows[t*V : (t+1)*V]
					switch o.def.kind {
					case "logits":
						f = append(f, row...)
					case "probs":
						rnn.Probabilities(n.Activation, row, probs)
						f = append(f, probs...)
					default:
						rnn.Probabilities(n.Activation, row, probs)
						top := make([]int64, o.k)
						rnn.TopK(probs, top)
						if o.def.kind == "top_k" {
							ids = append(ids, top...)
						} else {
							for _, id := range top {
								f = append(f, probs[id])
							}
						}
					}
				}
			}
			shape := func(last int64) []int64 {
				if !o.def.perStep() {
					return []int64{B, last}
				}
				return []int64{B, steps, last}
			}
			switch o.def.kind {
			case "top_k":
				out = OutputTensor{Name: o.name, Shape: shape(int64(o.k)), Datatype: "INT64", Int64: ids}
			case "top_k_probs":
				out = OutputTensor{Name: o.name, Shape: shape(int64(o.k)), Datatype: "FP32", Float32: f}
			default:
				out = OutputTensor{Name: o.name, Shape: shape(int64(V)), Datatype: "FP32", Float32: f}
			}
		case "output":
			W := n.OutputWidth()
			var f []float32
			for b, rr := range res {
				rows := rr.output
				if o.last {
					rows = rows[len(rows)-W:]
				} else if pad := in.T - in.steps(b); pad > 0 {
					rows = append(rows[:len(rows):len(rows)], make([]float32, pad*W)...)
				}
				f = appendOrAlias(f, rows, len(res))
			}
			out = OutputTensor{Name: o.name, Shape: []int64{B, steps, int64(W)}, Datatype: "FP32", Float32: f}
		case "hidden", "cell":
			if o.def.torch {
				t, err := torchStates(n, o.name, o.def, res)
				if err != nil {
					return nil, err
				}
				outs = append(outs, t)
				continue
			}
			var f []float32
			for _, rr := range res {
				if o.def.kind == "hidden" {
					f = appendOrAlias(f, rr.hn, len(res))
				} else {
					f = appendOrAlias(f, rr.cn, len(res))
				}
			}
			outs = append(outs, OutputTensor{Name: o.name, Shape: append([]int64{B}, stateShape(n, o.def.kind == "cell")...), Datatype: "FP32", Float32: f})
			continue
		default:
			return nil, fmt.Errorf("server: output %q of kind %q has no encoder", o.name, o.def.kind)
		}
		if !o.def.perStep() {
			outs = append(outs, out) // [B, V]: batch-first whatever the layout
			continue
		}
		outs = append(outs, m.names.lay(o.def, out))
	}
	return outs, nil
}

// stateShape is the shape of one row's final h (or c): [layers*dirs, Out]
// (or Hidden) for a uniform stack, [total] for a mixed one.
func stateShape(n *rnn.Network, cell bool) []int64 {
	switch {
	case !n.Uniform() && cell:
		return []int64{int64(n.CellSize(1))}
	case !n.Uniform():
		return []int64{int64(n.StateSize(1))}
	case cell:
		return []int64{int64(n.NumLayers * n.Dirs()), int64(n.Hidden)}
	}
	return []int64{int64(n.NumLayers * n.Dirs()), int64(n.Out())}
}

// headOfZero is pad rows of the head applied to a zero output: its bias
// through the model's activation.
func (m *seqModel) headOfZero(pad int) []float32 {
	V := m.net.HeadOut
	row := make([]float32, V)
	copy(row, m.net.HeadB)
	switch m.net.Activation {
	case rnn.ActSoftmax:
		rnn.Softmax(1, V, row)
	case rnn.ActLogSoftmax:
		rnn.LogSoftmax(1, V, row)
	}
	rows := make([]float32, 0, pad*V)
	for range pad {
		rows = append(rows, row...)
	}
	return rows
}

// appendOrAlias appends rows to f, or returns rows itself when it is the
// only row of a one-row result (no copy).
func appendOrAlias(f, rows []float32, nrows int) []float32 {
	if nrows == 1 {
		return rows
	}
	return append(f, rows...)
}

func (m *seqModel) run(stop <-chan struct{}) {
	if m.later != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.lookLater(stop)
		}()
		defer func() { <-done }()
	}
	m.batch.run(stop)
}

// seqBatch is a sequence model's batch: a cellular Stepper and the jobs
// whose rows it holds.
type seqBatch struct {
	m     *seqModel
	st    *schedule.Stepper
	owner map[*schedule.Sequence]*job[*seqWork]
}

var _ batch[*seqWork] = (*seqBatch)(nil)

func (b *seqBatch) rows() int { return b.st.Active() }

func (b *seqBatch) fits(j *job[*seqWork]) bool {
	return b.st.Active()+j.rows <= b.st.Capacity()
}

func (b *seqBatch) add(j *job[*seqWork]) error {
	for i, q := range j.work.seqs {
		if err := b.st.Add(q); err != nil {
			for _, added := range j.work.seqs[:i] {
				b.st.Remove(added)
				delete(b.owner, added)
			}
			return err
		}
		b.owner[q] = j
	}
	j.work.remaining = len(j.work.seqs)
	return nil
}

func (b *seqBatch) reap() []*job[*seqWork] {
	var gone []*job[*seqWork]
	for q, j := range b.owner {
		if j.ctx.Err() != nil {
			b.st.Remove(q)
			delete(b.owner, q)
			if j.work.remaining--; j.work.remaining == 0 {
				gone = append(gone, j)
			}
		}
	}
	return gone
}

func (b *seqBatch) step() []finishedJob[*seqWork] {
	var fin []finishedJob[*seqWork]
	for _, q := range b.st.Step() {
		j := b.owner[q]
		if j.work.gen != nil && b.generate(j.work.gen, q) {
			continue
		}
		b.st.Remove(q)
		delete(b.owner, q)
		if j.work.remaining--; j.work.remaining == 0 {
			fin = append(fin, finishedJob[*seqWork]{j: j})
		}
	}
	return fin
}

// generate samples the next token of a generation row and feeds it back;
// it reports whether the row goes on.
func (b *seqBatch) generate(g *generation, q *schedule.Sequence) bool {
	n := b.m.net
	V := n.HeadOut
	logp := q.HeadOut[len(q.HeadOut)-V:]
	tok := g.sample(logp)
	rnn.Probabilities(n.Activation, logp, g.probs)
	q.HeadOut = q.HeadOut[:0]
	g.events <- GenerateToken{Index: g.produced, Token: int64(tok), LogProb: logOf(g.probs[tok])}
	g.produced++
	if g.produced >= g.maxTokens || g.stopped.Load() {
		return false
	}
	if err := b.st.Extend(q, []int64{int64(tok)}, nil); err != nil {
		return false
	}
	return true
}

func logOf(p float32) float64 {
	if p <= 0 {
		return math.Inf(-1)
	}
	return math.Log(float64(p))
}

// heldOnce is what schedule_reason says of P on one core that reads the
// weight slices of its form across every core.
const heldOnce = "; on one core it reads the weights of its form across every core (held once)"

// newSeqModel prepares a sequence model: chooses its schedule from its
// modelled traffic, builds its programs (P's on the owner's pools) and its
// batcher.
func (s *Server) newSeqModel(e Entry, w *schedule.Weights) (*seqModel, error) {
	net := e.Model.Net
	m := &seqModel{net: net, maxWait: int64(s.opts.Batching.QueueLength), opts: &s.opts, names: newSeqNames(net, e.Model.Spec.IO)}
	s.initBase(&m.modelBase, e, w)
	cores := choice.CoresPerRequest(runtime.GOMAXPROCS(0), 1)
	// Every program of the load comes from builds, once each: the clock
	// times the programs served, and P on one core is the Serial form of
	// P across every core where that shares weights larger than the
	// last-level cache (choice.Builds), never built with a copy of its
	// own first.
	builds := &choice.Builds{Net: net, Pools: s.pools, Cores: cores, LLC: s.trafficModel().LLC, Weights: w}
	sched, reason, traffic, err := chooseSchedule(net, e.Config, s.trafficModel(), builds, s.opts.ScheduleTiming)
	if err != nil {
		return nil, err
	}
	var prog, wideProg *schedule.Program // m.form, stored once the load is done
	auto := e.Config.Schedule == "" || e.Config.Schedule == "auto"
	if p := (choice.Candidate{Sched: schedule.Partitioned, Workers: s.trafficModel().Workers}); auto && s.opts.ScheduleTiming > 0 && !net.Dry() &&
		sched.Sched != schedule.Partitioned && p.Workers < cores {
		wide := p
		wide.Workers = cores
		var progs [3]*schedule.Program
		for i, c := range []choice.Candidate{sched, p, wide} {
			if progs[i], err = builds.Program(c); err != nil {
				return nil, err
			}
		}
		pays, why, err := preferWide(net, progs[0], progs[1], progs[2], s.opts.TrafficSteps, s.opts.ScheduleTiming/2, nil)
		if err != nil {
			return nil, fmt.Errorf("timing P across all cores: %w", err)
		}
		reason += "; " + why
		prog = progs[0]
		shares, err := builds.Serial(p)
		if err != nil {
			return nil, err
		}
		held := ""
		if shares {
			held = heldOnce
		}
		switch hold, why := choice.HoldBeside(progs[:1], progs[1:], builds.LLC); {
		case pays:
			sched, prog, wideProg = p, progs[1], progs[2]
			reason += fmt.Sprintf("; a request that finds all of the model's %d cores free runs %v across all of them", cores, wide)
		case hold:
			// A and A+ hold float32 weights, as P does here: the batcher's
			// steppers (StepperPrecision) are the same after a switch.
			m.later = newPreferLater(net, progs[0], progs[1], progs[2],
				fmt.Sprintf("; a request that finds all of the model's %d cores free runs %v across all of them", cores, wide)+held,
				s.opts.TrafficSteps, s.opts.ScheduleTiming/2)
			reason += laterReason(m.later)
		default:
			reason += "; P is not timed again later: its " + why
		}
	}
	if prog == nil {
		if prog, err = builds.Program(sched); err != nil {
			return nil, err
		}
	}
	// P on one core per request also gets a form across every core, for a
	// request that finds every core of the model free (see seqModel.widen),
	// unless preferWide built and timed it above.
	if sched.Sched == schedule.Partitioned && sched.Workers < cores && wideProg == nil {
		wide := sched
		wide.Workers = cores
		if wideProg, err = builds.Program(wide); err != nil {
			return nil, err
		}
		if s.opts.ScheduleTiming > 0 && auto {
			faster, why, err := choice.TimeWide(net, prog, wideProg, s.opts.TrafficSteps, s.opts.ScheduleTiming/2, nil)
			if err != nil {
				return nil, fmt.Errorf("timing P across all cores: %w", err)
			}
			reason += "; " + why
			if !faster {
				// Kept for the later looks, which may find it faster
				// once the host is quieter than it was at load.
				m.later = newWideLater(net, prog, wideProg, s.opts.TrafficSteps, s.opts.ScheduleTiming/2)
				reason += laterReason(m.later)
				wideProg = nil
			}
		} else {
			reason += fmt.Sprintf("; a request that finds all of the model's %d cores free runs %v across all of them", cores, wide)
		}
	}
	if serial, err := builds.Serial(choice.Of(prog)); err != nil {
		return nil, err
	} else if serial && (wideProg != nil || m.later != nil) {
		reason += heldOnce
	} else if serial {
		reason += fmt.Sprintf("; on one core it runs over P's weight slices cut for %d cores, each core's part in turn (the form timed)", cores)
	}
	// The programs timed and not kept go now, their weight copies with
	// them, not at some later collection; those of the later looks stay
	// until the looks end.
	keep := []*schedule.Program{prog, wideProg}
	if m.later != nil {
		keep = append(keep, m.later.kept()...)
	}
	builds.Release(keep...)
	m.form.Store(&seqForm{prog: prog, wide: wideProg})
	m.batching = *s.opts.Batching.Enabled
	if e.Config.Batching != nil {
		m.batching = *e.Config.Batching
	}
	// Every unidirectional model gets lanes: generation needs them even
	// when infer requests run unbatched. A bidirectional one has none.
	// The first lane's stepper, lead, makes the weight buffers of its own
	// (the token table, int8 packings); the traffic trace and every later
	// stepper, a lane's first or one remade after a panic, read them
	// (Stepper.Sibling). newBatcher makes the first lanes in turn, before
	// any lane runs.
	lanes := 0
	maxRows := s.opts.Batching.MaxRows
	var first *schedule.Stepper
	if !net.Unidirectional() {
		m.batching = false
	} else {
		lanes = cap(m.cores)
		if first, err = schedule.NewStepperPrecision(net, maxRows, sched.StepperPrecision()); err != nil {
			return nil, err
		}
		t, err := choice.CellularTraffic(net, first, choice.LLCOrDefault(s.opts.CacheBytes), s.opts.TrafficSteps)
		if err != nil {
			return nil, fmt.Errorf("traffic of the cellular batcher: %w", err)
		}
		traffic = append(traffic, t)
	}
	lead := first
	if m.batch, err = newBatcher(&m.modelBase, s.opts.Batching, lanes, func() (batch[*seqWork], error) {
		var st *schedule.Stepper
		var err error
		switch {
		case lead != nil:
			st, lead = lead, nil
		case first != nil:
			st, err = first.Sibling(maxRows)
		default:
			st, err = schedule.NewStepperPrecision(net, maxRows, sched.StepperPrecision())
		}
		if err != nil {
			return nil, err
		}
		return &seqBatch{m: m, st: st, owner: map[*schedule.Sequence]*job[*seqWork]{}}, nil
	}); err != nil {
		return nil, err
	}
	m.meta = seqMetadata(m, sched, reason, traffic)
	m.config = seqConfig(m, &s.opts)
	running := func() string {
		if m.batching {
			return schedule.Cellular.String()
		}
		return choice.Of(m.form.Load().prog).String()
	}
	m.describe = func() {
		s.metrics.describe(m.name, running(), m.batching, s.opts.TrafficSteps, traffic)
		m.metrics.solo.Add(0)
		if m.form.Load().wide != nil {
			m.metrics.wide.Add(0)
		}
	}
	m.relabel = func(from, to string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.table()[m.name] != model(m) || m.batching {
			return
		}
		// Only this model's series: a reload's describes its own.
		s.metrics.info.DeleteLabelValues(m.name, from, "false")
		s.metrics.info.WithLabelValues(m.name, to, "false").Set(1)
	}
	return m, nil
}
