package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// model is one served model: its network, the program for whole-request
// plans, its batcher (nil when it runs unbatched), its sequences and stats.
type model struct {
	name     string
	entry    Entry
	net      *rnn.Network
	prog     *schedule.Program
	wide     *schedule.Program // prog across every core, when prog is P on fewer; else nil
	reason   string
	batch    *batcher // nil for a bidirectional model
	batching bool     // infer requests go through batch
	// alwaysStep keeps a lone request in the step-by-step batch instead of
	// running it as a whole plan (tests of the batched path set it).
	alwaysStep bool
	workers    chan struct{} // core slots: one per plan running or lane stepping (batching.workers)
	queued     atomic.Int64  // unbatched requests waiting for a worker
	maxWait    int64
	seqs       *sequenceStore
	meta       api.ModelMetadata
	metrics    *metrics
	stats      modelStats
	tree       *treeModel // a tree model: serves trees, has no net, prog or batch
}

// modelStats are the counters behind GET /v2/models/{name}/stats.
type modelStats struct {
	requests, success, failed, rejected atomic.Int64
	steps, tokens, inflight             atomic.Int64
	mu                                  sync.Mutex
	queue, compute, total               api.DurationStats
}

func (s *modelStats) step(rows int) {
	s.steps.Add(1)
	s.tokens.Add(int64(rows))
}

func (s *modelStats) observe(queue, compute, total time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	add := func(d *api.DurationStats, v time.Duration) {
		d.Count++
		d.Sum += v.Seconds()
		d.Mean = d.Sum / float64(d.Count)
	}
	add(&s.queue, queue)
	add(&s.compute, compute)
	add(&s.total, total)
}

// rowResult holds one batch row's outputs: per step (or last step only)
// head rows and last-layer outputs, and the final state.
type rowResult struct {
	head   []float32 // [steps][V]
	output []float32 // [steps][W]
	hn, cn []float32 // [layers*dirs][Out], [layers*dirs][H]
}

// infer runs a decoded request, batched or as a whole plan, starting from
// state (nil for zeros), and returns one result per batch row.
func (m *model) infer(ctx context.Context, r *request, state *seqState) ([]rowResult, time.Duration, time.Duration, error) {
	wantHead, lastOnly := false, true
	for _, o := range r.outputs {
		switch o.name {
		case "logits", "probs", "top_k", "top_k_probs":
			wantHead = true
			lastOnly = lastOnly && o.last
		}
	}
	// A request with more rows than a batch holds runs as its own plan.
	if m.batching && r.B <= m.batch.lanes[0].st.Capacity() {
		return m.inferBatched(ctx, r, state, wantHead, lastOnly)
	}
	return m.inferPlan(ctx, r, state, wantHead)
}

func (m *model) inferBatched(ctx context.Context, r *request, state *seqState, wantHead, lastOnly bool) ([]rowResult, time.Duration, time.Duration, error) {
	n := m.net
	j := &job{ctx: ctx}
	for b := 0; b < r.B; b++ {
		q := &schedule.Sequence{Outputs: r.wants("output")}
		if wantHead {
			q.Head = schedule.HeadAll
			if lastOnly {
				q.Head = schedule.HeadLast
			}
		}
		if r.tokens != nil {
			q.Tokens = r.tokens[b*r.T : (b+1)*r.T]
		} else {
			q.Features = r.features[b*r.T*n.Input : (b+1)*r.T*n.Input]
		}
		if state != nil {
			q.H0, q.C0 = state.h, state.c
		}
		j.seqs = append(j.seqs, q)
	}
	if !m.alwaysStep {
		j.plan = func(wide bool) ([]rowResult, error) { return m.runPlan(r, state, wantHead, wide) }
	}
	start := time.Now()
	if res, ran, err := m.batch.solo(j); ran {
		compute := time.Since(start)
		if err == nil {
			m.metrics.queue.WithLabelValues(m.name).Observe(0)
			m.metrics.compute.WithLabelValues(m.name).Observe(compute.Seconds())
		}
		return res, 0, compute, err
	}
	if err := m.batch.submit(j); err != nil {
		return nil, 0, 0, err
	}
	var err error
	select {
	case err = <-j.done:
	case <-ctx.Done():
		// The batcher drops the rows at its next step and still sends on done.
		return nil, 0, 0, ctx.Err()
	}
	if err != nil {
		return nil, 0, 0, err
	}
	res := make([]rowResult, r.B)
	for b, q := range j.seqs {
		res[b] = rowResult{head: q.HeadOut, output: q.Output, hn: q.HN, cn: q.CN}
	}
	return res, j.started.Sub(j.enqueued), j.finished.Sub(j.started), nil
}

func (m *model) inferPlan(ctx context.Context, r *request, state *seqState, wantHead bool) ([]rowResult, time.Duration, time.Duration, error) {
	if m.queued.Add(1) > m.maxWait {
		m.queued.Add(-1)
		return nil, 0, 0, ErrBusy
	}
	enqueued := time.Now()
	select {
	case m.workers <- struct{}{}:
		m.queued.Add(-1)
	case <-ctx.Done():
		m.queued.Add(-1)
		return nil, 0, 0, ctx.Err()
	}
	defer func() { <-m.workers }()
	started := time.Now()
	wide, release := m.widen(m.workers)
	res, err := m.runPlan(r, state, wantHead, wide)
	release()
	if err != nil {
		return nil, 0, 0, err
	}
	return res, started.Sub(enqueued), time.Since(started), nil
}

// widen is called holding one of tokens, the model's per-core slots.
// When the model has a wide program and every other slot is free too, it
// takes them all and reports true: the request runs across every core,
// and release gives the slots back. Otherwise it takes none.
func (m *model) widen(tokens chan struct{}) (wide bool, release func()) {
	if m.wide == nil {
		return false, func() {}
	}
	taken := 0
	for free := true; free && taken < cap(tokens)-1; {
		select {
		case tokens <- struct{}{}:
			taken++
		default:
			free = false
		}
	}
	release = func() {
		for range taken {
			<-tokens
		}
	}
	if taken < cap(tokens)-1 {
		release()
		return false, func() {}
	}
	m.metrics.wide.WithLabelValues(m.name).Inc()
	return true, release
}

// runPlan runs a request as one whole plan of the model's schedule.
func (m *model) runPlan(r *request, state *seqState, wantHead, wide bool) ([]rowResult, error) {
	n, B, T := m.net, r.B, r.T
	in := schedule.Input{T: T, B: B}
	if r.tokens != nil {
		in.Tokens = make([]int64, T*B)
		for b := 0; b < B; b++ {
			for t := 0; t < T; t++ {
				in.Tokens[t*B+b] = r.tokens[b*T+t]
			}
		}
	} else {
		F := n.Input
		in.Features = make([]float32, T*B*F)
		for b := 0; b < B; b++ {
			for t := 0; t < T; t++ {
				copy(in.Features[(t*B+b)*F:(t*B+b+1)*F], r.features[(b*T+t)*F:])
			}
		}
	}
	if state != nil {
		in.H0, in.C0 = state.h, state.c
	}
	prog := m.prog
	if wide && m.wide != nil {
		prog = m.wide
	}
	p, err := prog.Plan(in, schedule.PlanOptions{Head: wantHead})
	if err != nil {
		return nil, err
	}
	out, err := p.Run()
	if err != nil {
		return nil, err
	}
	m.stats.step(T * B)
	m.metrics.tokens.WithLabelValues(m.name).Add(float64(T * B))
	W, V, O, H, LD := n.OutputWidth(), n.HeadOut, n.Out(), n.Hidden, n.NumLayers*n.Dirs()
	res := make([]rowResult, B)
	for b := range res {
		rr := &res[b]
		for t := 0; t < T; t++ {
			if r.wants("output") {
				rr.output = append(rr.output, out.Output[(t*B+b)*W:(t*B+b+1)*W]...)
			}
			if wantHead {
				rr.head = append(rr.head, out.Head[(t*B+b)*V:(t*B+b+1)*V]...)
			}
		}
		for l := 0; l < LD; l++ {
			rr.hn = append(rr.hn, out.HN[(l*B+b)*O:(l*B+b+1)*O]...)
			if out.CN != nil {
				rr.cn = append(rr.cn, out.CN[(l*B+b)*H:(l*B+b+1)*H]...)
			}
		}
	}
	return res, nil
}

// encode builds the response tensors a request asked for, batch-first.
func (m *model) encode(r *request, res []rowResult) ([]api.OutputTensor, error) {
	n := m.net
	B := int64(r.B)
	var outs []api.OutputTensor
	for _, o := range r.outputs {
		steps := int64(r.T)
		if o.last {
			steps = 1
		}
		switch o.name {
		case "logits", "probs", "top_k", "top_k_probs":
			V := n.HeadOut
			var f []float32
			var ids []int64
			probs := make([]float32, V)
			for _, rr := range res {
				rows := rr.head
				if o.last {
					rows = rows[len(rows)-V:]
				}
				if len(rows) != int(steps)*V {
					return nil, fmt.Errorf("server: head rows %d, want %d", len(rows)/V, steps)
				}
				for t := 0; t < int(steps); t++ {
					row := rows[t*V : (t+1)*V]
					switch o.name {
					case "logits":
						f = append(f, row...)
					case "probs":
						rnn.Probabilities(n.Activation, row, probs)
						f = append(f, probs...)
					default:
						rnn.Probabilities(n.Activation, row, probs)
						top := make([]int64, o.k)
						rnn.TopK(probs, top)
						if o.name == "top_k" {
							ids = append(ids, top...)
						} else {
							for _, id := range top {
								f = append(f, probs[id])
							}
						}
					}
				}
			}
			switch o.name {
			case "top_k":
				outs = append(outs, api.OutputTensor{Name: o.name, Shape: []int64{B, steps, int64(o.k)}, Datatype: "INT64", Data: ids})
			case "top_k_probs":
				outs = append(outs, api.OutputTensor{Name: o.name, Shape: []int64{B, steps, int64(o.k)}, Datatype: "FP32", Data: f})
			default:
				outs = append(outs, api.OutputTensor{Name: o.name, Shape: []int64{B, steps, int64(V)}, Datatype: "FP32", Data: f})
			}
		case "output":
			W := n.OutputWidth()
			var f []float32
			for _, rr := range res {
				rows := rr.output
				if o.last {
					rows = rows[len(rows)-W:]
				}
				f = append(f, rows...)
			}
			outs = append(outs, api.OutputTensor{Name: o.name, Shape: []int64{B, steps, int64(W)}, Datatype: "FP32", Data: f})
		case "hidden", "cell":
			var f []float32
			width := n.Out()
			for _, rr := range res {
				if o.name == "hidden" {
					f = append(f, rr.hn...)
				} else {
					f = append(f, rr.cn...)
					width = n.Hidden
				}
			}
			outs = append(outs, api.OutputTensor{Name: o.name, Shape: []int64{B, int64(n.NumLayers * n.Dirs()), int64(width)}, Datatype: "FP32", Data: f})
		}
	}
	return outs, nil
}

func logOf(p float32) float64 {
	if p <= 0 {
		return math.Inf(-1)
	}
	return math.Log(float64(p))
}
