package server

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"time"
	"unicode/utf8"

	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
	"rnnserve/server/internal/infer"
)

// Outputs a tree model may be asked for.
var treeOutputNames = map[string]string{
	"probs":      "FP32 [B, C]: each root's class probabilities",
	"class":      "INT64 [B]: each root's most likely class",
	"node_probs": "FP32 [nodes, C]: every node's class probabilities, tree by tree, nodes in post-order",
	"nodes":      "INT64 [B]: each tree's node count (rows of node_probs)",
}

// treeModel serves a tree model (TreeRNN, RNTN, TreeLSTMs). Its batcher
// has one lane, which groups the trees of queued requests that share an
// executor and outputs into one plan; the plan itself spreads over the
// cores one request may use, on the owner's pool of that size (none on
// one core).
type treeModel struct {
	modelBase
	tm    *models.TreeModel
	prog  *schedule.TreeProgram
	exec  schedule.TreeExecutor
	batch *batcher[*treeWork]
	pool  *schedule.Pool
	opts  *Options
	// alwaysBatch sends a lone request through the batcher's lane instead
	// of running its plan in the caller's goroutine (tests of the batched
	// path set it).
	alwaysBatch bool
}

var _ model = (*treeModel)(nil)

func (m *treeModel) base() *modelBase { return &m.modelBase }

// treeWork is a tree model's part of a batcher job.
type treeWork struct {
	trees []*tree.Tree
	exec  schedule.TreeExecutor
	all   bool // every node's probabilities, not only the roots'
	nodes int  // the trees' nodes
	// probs holds, tree after tree, each root's probabilities or (all)
	// every node's, nodes in post-order.
	probs []float32
}

// parseTree reads one element of the "trees" input: JSON when it starts
// with '{', else bracketed.
func parseTree(s []byte, opt tree.Options) (*tree.Tree, error) {
	if b := bytes.TrimSpace(s); len(b) > 0 && b[0] == '{' {
		return tree.ParseJSON(b, opt)
	}
	return tree.ParseBracketed(string(s), opt)
}

func (m *treeModel) infer(ctx context.Context, r *Request, tm *timing) ([]OutputTensor, int, error) {
	if r.Sequence != (SequenceControl{}) {
		return nil, 0, infer.BadRequest("a tree model keeps no state between requests: sequence parameters are not supported")
	}
	if len(r.Inputs) != 1 || r.Inputs[0].Name != "trees" {
		return nil, 0, infer.BadRequest(`send one input "trees" (BYTES [B]: bracketed or JSON trees)`)
	}
	in := &r.Inputs[0]
	if in.Datatype != "BYTES" {
		return nil, 0, infer.BadRequest(`input "trees": datatype %q, want BYTES`, infer.Clip(in.Datatype))
	}
	if err := checkShape(in, []int64{int64(m.opts.MaxRequestRows)}); err != nil {
		return nil, 0, err
	}
	w := &treeWork{exec: m.exec}
	opt := m.tm.ParseOptions()
	for i, text := range in.Bytes {
		if !utf8.Valid(text) {
			return nil, 0, infer.BadRequest(`input "trees"[%d]: not valid UTF-8`, i)
		}
		tr, err := parseTree(text, opt)
		if err != nil {
			return nil, 0, infer.BadRequest(`input "trees"[%d]: %v`, i, err)
		}
		if err := m.tm.Net.Check(tr); err != nil {
			return nil, 0, infer.BadRequest(`input "trees"[%d]: %v`, i, err)
		}
		w.trees = append(w.trees, tr)
	}
	if name, ok, err := r.Parameters.String("executor"); err != nil {
		return nil, 0, err
	} else if ok {
		if w.exec, err = schedule.ParseTreeExecutor(name); err != nil {
			return nil, 0, infer.BadRequest("parameter executor: %v", err)
		}
	}
	outs := r.Outputs
	if len(outs) == 0 {
		outs = []RequestedOutput{{Name: "probs"}}
	}
	for i, o := range outs {
		if _, ok := treeOutputNames[o.Name]; !ok {
			return nil, 0, fmt.Errorf("%w %q (known: probs, class, node_probs, nodes)", ErrUnsupportedOutput, infer.Clip(o.Name))
		}
		if err := o.Parameters.Only(fmt.Sprintf("output %q", o.Name)); err != nil {
			return nil, 0, err
		}
		for _, prev := range outs[:i] {
			if prev.Name == o.Name {
				return nil, 0, infer.BadRequest("output %q asked for twice", o.Name)
			}
		}
		w.all = w.all || o.Name == "node_probs"
	}
	for _, tr := range w.trees {
		w.nodes += tr.Len()
	}
	if w.nodes > schedule.MaxTreeBatchNodes {
		return nil, 0, infer.BadRequest(`input "trees": %d nodes, more than a plan holds (%d)`, w.nodes, schedule.MaxTreeBatchNodes)
	}
	if err := r.ExpectOutputs(m.plannedOutputs(outs, len(w.trees), w.nodes)); err != nil {
		return nil, 0, err
	}
	j := &job[*treeWork]{ctx: ctx, rows: len(w.trees), work: w}
	if !m.alwaysBatch {
		j.solo = func(coreSlots) error {
			if err := m.runJobs([]*job[*treeWork]{j}, w.trees); err != nil {
				return err
			}
			m.observeStep(len(w.trees))
			return nil
		}
	}
	start := time.Now()
	if ran, err := m.batch.solo(j); ran {
		tm.compute = time.Since(start)
		if err != nil {
			return nil, 0, err
		}
		m.metrics.queue.Observe(0)
		m.metrics.compute.Observe(tm.compute.Seconds())
		return m.encode(w, outs), len(w.trees), nil
	}
	if err := m.batch.submit(j); err != nil {
		return nil, 0, err
	}
	if err := m.batch.wait(ctx, j); err != nil {
		return nil, 0, err
	}
	tm.queue, tm.compute = j.started.Sub(j.enqueued), j.finished.Sub(j.started)
	return m.encode(w, outs), len(w.trees), nil
}

// runJobs runs the trees of jobs, which share their executor and outputs,
// as one plan (trees lists them all, job after job) and copies each job's
// probabilities into its work. The plan's memory comes from the program's
// released plans and goes back to them.
func (m *treeModel) runJobs(jobs []*job[*treeWork], trees []*tree.Tree) error {
	first := jobs[0].work
	tp, err := m.prog.Acquire(trees, schedule.TreeOptions{Executor: first.exec, AllNodes: first.all, Pool: m.pool})
	if err != nil {
		return err
	}
	defer tp.Release()
	// A panic in the plan (from the pool, a *schedule.PanicError) goes
	// on: the lane fails its batch and is replaced, or the request's own
	// recovery answers a lone request.
	if err := tp.Run(); err != nil {
		return err
	}
	C := m.tm.Net.Classes
	k := 0
	for _, j := range jobs {
		w := j.work
		n := len(w.trees)
		if w.all {
			n = 0
			for _, tr := range w.trees {
				n += tr.Len()
			}
		}
		w.probs = make([]float32, 0, n*C)
		for i, tr := range w.trees {
			if !w.all {
				w.probs = append(w.probs, tp.Probs(k+i, tr.Root())...)
				continue
			}
			for node := range tr.Nodes {
				w.probs = append(w.probs, tp.Probs(k+i, node)...)
			}
		}
		k += len(w.trees)
	}
	return nil
}

// encode builds the output tensors a tree request asked for.
func (m *treeModel) encode(w *treeWork, outs []RequestedOutput) []OutputTensor {
	C := m.tm.Net.Classes
	B := int64(len(w.trees))
	roots := w.probs
	if w.all {
		roots = make([]float32, 0, len(w.trees)*C)
		off := 0
		for _, tr := range w.trees {
			off += tr.Len() * C
			roots = append(roots, w.probs[off-C:off]...)
		}
	}
	res := make([]OutputTensor, 0, len(outs))
	for _, o := range outs {
		switch o.Name {
		case "probs":
			res = append(res, OutputTensor{Name: o.Name, Shape: []int64{B, int64(C)}, Datatype: "FP32", Float32: roots})
		case "class":
			ids := make([]int64, B)
			for i := range ids {
				ids[i] = int64(rnn.Argmax(roots[i*C : (i+1)*C]))
			}
			res = append(res, OutputTensor{Name: o.Name, Shape: []int64{B}, Datatype: "INT64", Int64: ids})
		case "node_probs":
			res = append(res, OutputTensor{Name: o.Name, Shape: []int64{int64(len(w.probs) / C), int64(C)}, Datatype: "FP32", Float32: w.probs})
		case "nodes":
			ns := make([]int64, B)
			for i, tr := range w.trees {
				ns[i] = int64(tr.Len())
			}
			res = append(res, OutputTensor{Name: o.Name, Shape: []int64{B}, Datatype: "INT64", Int64: ns})
		}
	}
	return res
}

func (m *treeModel) generate(context.Context, *GenerateRequest, func(GenerateToken) error) (GenerateResult, error) {
	return GenerateResult{}, fmt.Errorf("%w: %q is a tree model", ErrNotLanguageModel, m.name)
}

func (m *treeModel) run(stop <-chan struct{}) { m.batch.run(stop) }

// treeBatch is a tree model's batch: the jobs whose trees run as the next
// plan, all with the first job's executor and outputs, at most max trees
// (a larger job runs alone).
type treeBatch struct {
	m     *treeModel
	jobs  []*job[*treeWork]
	trees []*tree.Tree // the jobs' trees, reused from step to step
	n     int          // trees
	nodes int          // their nodes
	max   int
}

var _ batch[*treeWork] = (*treeBatch)(nil)

func (b *treeBatch) rows() int { return b.n }

func (b *treeBatch) fits(j *job[*treeWork]) bool {
	if len(b.jobs) == 0 {
		return true
	}
	first := b.jobs[0].work
	// A plan holds schedule.MaxTreeBatchNodes: requests that fit alone
	// are not put together past it.
	return j.work.exec == first.exec && j.work.all == first.all && b.n+j.rows <= b.max &&
		b.nodes+j.work.nodes <= schedule.MaxTreeBatchNodes
}

func (b *treeBatch) add(j *job[*treeWork]) error {
	b.jobs = append(b.jobs, j)
	b.n += j.rows
	b.nodes += j.work.nodes
	return nil
}

func (b *treeBatch) reap() []*job[*treeWork] {
	var gone []*job[*treeWork]
	kept := b.jobs[:0]
	b.n, b.nodes = 0, 0
	for _, j := range b.jobs {
		if j.ctx.Err() != nil {
			gone = append(gone, j)
			continue
		}
		kept = append(kept, j)
		b.n += j.rows
		b.nodes += j.work.nodes
	}
	b.jobs = kept
	return gone
}

// step runs every admitted job's trees as one plan and finishes them all.
func (b *treeBatch) step() []finishedJob[*treeWork] {
	b.trees = b.trees[:0]
	for _, j := range b.jobs {
		b.trees = append(b.trees, j.work.trees...)
	}
	err := b.m.runJobs(b.jobs, b.trees)
	clear(b.trees) // the requests' trees
	fin := make([]finishedJob[*treeWork], len(b.jobs))
	for i, j := range b.jobs {
		fin[i] = finishedJob[*treeWork]{j: j, err: err}
	}
	clear(b.jobs)
	b.jobs, b.n, b.nodes = b.jobs[:0], 0, 0
	return fin
}

// newTreeModel prepares a tree model and its one-lane batcher.
func (s *Server) newTreeModel(e Entry, w *schedule.Weights) (*treeModel, error) {
	tm := e.Tree
	n := tm.Net
	if n.Cell.Dynamic() {
		return nil, fmt.Errorf("%w: %v generates trees; serving it is not supported", ErrUnsupportedOutput, n.Cell)
	}
	prog, err := schedule.NewTreeProgram(n)
	if err != nil {
		return nil, err
	}
	exec := schedule.Recursive
	if tm.Spec.Executor != "" {
		if exec, err = schedule.ParseTreeExecutor(tm.Spec.Executor); err != nil {
			return nil, err
		}
	}
	m := &treeModel{tm: tm, prog: prog, exec: exec, opts: &s.opts}
	if cores := choice.CoresPerRequest(runtime.GOMAXPROCS(0), 1); cores > 1 {
		if m.pool = s.trees[cores]; m.pool == nil {
			return nil, fmt.Errorf("%w: tree plans on %d cores (the owner makes the pools PoolSizes lists)", ErrNoPool, cores)
		}
	}
	s.initBase(&m.modelBase, e, w)
	// One lane, one core slot: the plan spreads over the pool itself.
	m.cores = newCoreSlots(1)
	if m.batch, err = newBatcher(&m.modelBase, s.opts.Batching, 1, func() (batch[*treeWork], error) {
		return &treeBatch{m: m, max: s.opts.Batching.MaxRows}, nil
	}); err != nil {
		return nil, err
	}
	m.meta = treeMetadata(m)
	m.config = treeConfig(m, &s.opts)
	m.describe = func() { s.metrics.describe(m.name, exec.String(), true, 0, nil) }
	return m, nil
}
