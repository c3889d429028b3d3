package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"rnnserve/models"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// Outputs a tree request may ask for.
var treeOutputNames = map[string]string{
	"probs":      "FP32 [B, C]: each root's class probabilities",
	"class":      "INT64 [B]: each root's most likely class",
	"node_probs": "FP32 [nodes, C]: every node's class probabilities, tree by tree, nodes in post-order",
	"nodes":      "INT64 [B]: each tree's node count (rows of node_probs)",
}

// treeModel serves a tree model. Its batcher goroutine groups the trees of
// queued requests (same executor and outputs) into one plan.
type treeModel struct {
	tm       *models.TreeModel
	prog     *schedule.TreeProgram
	exec     schedule.TreeExecutor
	queue    chan *treeJob
	maxTrees int
	delay    time.Duration
	workers  int
	m        *model
}

// treeJob is one request's trees in the tree batcher.
type treeJob struct {
	ctx      context.Context
	trees    []*tree.Tree
	exec     schedule.TreeExecutor
	all      bool
	probs    [][]float32 // per tree: the root's, or every node's, probabilities
	done     chan error  // buffered; receives exactly once
	enqueued time.Time
	started  time.Time
	finished time.Time
}

func (s *Server) newTreeModel(e Entry) (*model, error) {
	tm := e.Tree
	prog, err := schedule.NewTreeProgram(tm.Net)
	if err != nil {
		return nil, err
	}
	exec := schedule.Recursive
	if tm.Spec.Executor != "" {
		if exec, err = schedule.ParseTreeExecutor(tm.Spec.Executor); err != nil {
			return nil, err
		}
	}
	m := &model{name: e.Name, entry: e, metrics: s.metrics, maxWait: int64(s.opts.Batching.QueueLength),
		seqs: newSequenceStore(s.opts.Sequences), reason: "executor from model.yaml (default recursive)"}
	m.tree = &treeModel{tm: tm, prog: prog, exec: exec, queue: make(chan *treeJob, s.opts.Batching.QueueLength),
		maxTrees: s.opts.Batching.MaxRows, delay: s.opts.Batching.MaxQueueDelay, workers: s.opts.Batching.Workers, m: m}
	n := tm.Net
	C := int64(n.Classes)
	m.meta = api.ModelMetadata{Name: m.name, Versions: []string{"1"}, Platform: "rnnserve_tree_" + n.Cell.String(),
		Inputs: []api.TensorMetadata{{Name: "trees", Datatype: "BYTES", Shape: []int64{-1},
			Doc: "one tree per element: bracketed, (3 (2 It) (4 (2 is) (3 good))), or JSON, {\"label\": 3, \"children\": [...]}; request parameter executor: recursive | depth_batched"}},
		Outputs: []api.TensorMetadata{
			{Name: "probs", Datatype: "FP32", Shape: []int64{-1, C}, Doc: treeOutputNames["probs"]},
			{Name: "class", Datatype: "INT64", Shape: []int64{-1}, Doc: treeOutputNames["class"]},
			{Name: "node_probs", Datatype: "FP32", Shape: []int64{-1, C}, Doc: treeOutputNames["node_probs"]},
			{Name: "nodes", Datatype: "INT64", Shape: []int64{-1}, Doc: treeOutputNames["nodes"]}},
		RNN: api.RNNMetadata{Cell: n.Cell.String(), InputSize: n.Embed, HiddenSize: n.Hidden, NumLayers: 1,
			VocabSize: n.Vocab, HeadSize: n.Classes, Activation: "softmax", WeightBytes: n.WeightBytes(),
			Schedule: exec.String(), ScheduleReason: m.reason, Batching: true}}
	if n.Cell.Dynamic() {
		return nil, fmt.Errorf("%w: %v generates trees; serving it is not supported", ErrUnsupportedOutput, n.Cell)
	}
	s.metrics.inflight.WithLabelValues(m.name).Set(0)
	return m, nil
}

// run is the tree batcher's loop; it returns when stop is closed and every
// queued job has finished.
func (t *treeModel) run(stop <-chan struct{}) {
	var held []*treeJob
	for {
		if len(held) == 0 {
			select {
			case j := <-t.queue:
				held = append(held, j)
				if t.delay > 0 {
					time.Sleep(t.delay)
				}
			case <-stop:
				for {
					select {
					case j := <-t.queue:
						held = append(held, j)
						continue
					default:
					}
					break
				}
				for len(held) > 0 {
					held = t.batch(held)
				}
				return
			}
		}
		for more := true; more; {
			select {
			case j := <-t.queue:
				held = append(held, j)
			default:
				more = false
			}
		}
		held = t.batch(held)
	}
}

// batch runs, as one plan, the held jobs that share the first live job's
// executor and outputs, up to maxTrees trees (a larger job runs alone),
// and returns the jobs left for the next batch.
func (t *treeModel) batch(jobs []*treeJob) []*treeJob {
	var take, rest []*treeJob
	var first *treeJob
	n := 0
	for _, j := range jobs {
		switch {
		case j.ctx.Err() != nil:
			j.finished = time.Now()
			j.done <- j.ctx.Err()
		case first == nil || j.exec == first.exec && j.all == first.all && n+len(j.trees) <= t.maxTrees:
			first = cmpOr(first, j)
			take = append(take, j)
			n += len(j.trees)
		default:
			rest = append(rest, j)
		}
	}
	if len(take) == 0 {
		return rest
	}
	var trees []*tree.Tree
	start := time.Now()
	for _, j := range take {
		j.started = start
		trees = append(trees, j.trees...)
	}
	tp, err := t.prog.Plan(trees, schedule.TreeOptions{Executor: first.exec, AllNodes: first.all, Workers: t.workers})
	if err == nil {
		err = tp.Run()
	}
	m := t.m
	m.stats.step(len(trees))
	m.metrics.steps.WithLabelValues(m.name).Inc()
	m.metrics.tokens.WithLabelValues(m.name).Add(float64(len(trees)))
	m.metrics.batchRows.WithLabelValues(m.name).Observe(float64(len(trees)))
	k := 0
	for _, j := range take {
		if err == nil {
			j.probs = make([][]float32, len(j.trees))
			for i, tr := range j.trees {
				if !j.all {
					j.probs[i] = append([]float32(nil), tp.Probs(k+i, tr.Root())...)
					continue
				}
				for node := range tr.Nodes {
					j.probs[i] = append(j.probs[i], tp.Probs(k+i, node)...)
				}
			}
		}
		k += len(j.trees)
		j.finished = time.Now()
		m.metrics.queue.WithLabelValues(m.name).Observe(j.started.Sub(j.enqueued).Seconds())
		j.done <- err
	}
	return rest
}

func cmpOr(a, b *treeJob) *treeJob {
	if a != nil {
		return a
	}
	return b
}

// parseTree reads one element of the "trees" input: JSON when it starts
// with '{', else bracketed.
func parseTree(s string, opt tree.Options) (*tree.Tree, error) {
	if b := bytes.TrimSpace([]byte(s)); len(b) > 0 && b[0] == '{' {
		return tree.ParseJSON(b, opt)
	}
	return tree.ParseBracketed(s, opt)
}

// inferTrees answers an infer request to a tree model.
func (s *Server) inferTrees(c *gin.Context, m *model, start time.Time) (int, error) {
	t := m.tree
	var req api.InferRequest
	if err := s.readJSON(c, &req); err != nil {
		return 0, err
	}
	if len(req.Inputs) != 1 || req.Inputs[0].Name != "trees" {
		return 0, badRequest(`send one input "trees" (BYTES [B]: bracketed or JSON trees)`)
	}
	in := &req.Inputs[0]
	if in.Datatype != "BYTES" {
		return 0, badRequest(`input "trees": datatype %q, want BYTES`, in.Datatype)
	}
	B, err := shapeSize(in, 1, []int64{int64(s.opts.MaxRequestRows)})
	if err != nil {
		return 0, err
	}
	var texts []string
	if err := json.Unmarshal(in.Data, &texts); err != nil {
		return 0, badRequest(`input "trees": data must be an array of strings: %v`, err)
	}
	if len(texts) != B {
		return 0, badRequest(`input "trees": %d strings, shape says %d`, len(texts), B)
	}
	j := &treeJob{ctx: c.Request.Context(), exec: t.exec, done: make(chan error, 1)}
	opt := t.tm.ParseOptions()
	for i, text := range texts {
		tr, err := parseTree(text, opt)
		if err != nil {
			return 0, badRequest(`input "trees"[%d]: %v`, i, err)
		}
		if err := t.tm.Net.Check(tr); err != nil {
			return 0, badRequest(`input "trees"[%d]: %v`, i, err)
		}
		j.trees = append(j.trees, tr)
	}
	if raw, ok := req.Parameters["executor"]; ok {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return 0, badRequest("parameter executor must be a string")
		}
		if j.exec, err = schedule.ParseTreeExecutor(name); err != nil {
			return 0, badRequest("parameter executor: %v", err)
		}
	}
	outs := req.Outputs
	if len(outs) == 0 {
		outs = []api.RequestedOutput{{Name: "probs"}}
	}
	for _, o := range outs {
		if _, ok := treeOutputNames[o.Name]; !ok {
			return 0, fmt.Errorf("%w %q (known: probs, class, node_probs, nodes)", ErrUnsupportedOutput, o.Name)
		}
		j.all = j.all || o.Name == "node_probs"
	}
	j.enqueued = time.Now()
	select {
	case t.queue <- j:
	default:
		return 0, ErrBusy
	}
	select {
	case err = <-j.done:
	case <-c.Request.Context().Done():
		return 0, c.Request.Context().Err()
	}
	if err != nil {
		return 0, err
	}
	C := t.tm.Net.Classes
	var res []api.OutputTensor
	for _, o := range outs {
		switch o.Name {
		case "probs", "class":
			var f []float32
			var ids []int64
			for i, tr := range j.trees {
				p := j.probs[i]
				if j.all {
					p = p[tr.Root()*C : (tr.Root()+1)*C]
				}
				f = append(f, p...)
				ids = append(ids, int64(tree.Argmax(p)))
			}
			if o.Name == "probs" {
				res = append(res, api.OutputTensor{Name: o.Name, Shape: []int64{int64(B), int64(C)}, Datatype: "FP32", Data: f})
			} else {
				res = append(res, api.OutputTensor{Name: o.Name, Shape: []int64{int64(B)}, Datatype: "INT64", Data: ids})
			}
		case "node_probs":
			var f []float32
			for _, p := range j.probs {
				f = append(f, p...)
			}
			res = append(res, api.OutputTensor{Name: o.Name, Shape: []int64{int64(len(f) / C), int64(C)}, Datatype: "FP32", Data: f})
		case "nodes":
			ns := make([]int64, B)
			for i, tr := range j.trees {
				ns[i] = int64(tr.Len())
			}
			res = append(res, api.OutputTensor{Name: o.Name, Shape: []int64{int64(B)}, Datatype: "INT64", Data: ns})
		}
	}
	m.stats.observe(j.started.Sub(j.enqueued), j.finished.Sub(j.started), time.Since(start))
	c.JSON(http.StatusOK, api.InferResponse{ModelName: m.name, ModelVersion: "1", ID: req.ID, Outputs: res})
	return http.StatusOK, nil
}
