package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rnnserve/schedule"
	"rnnserve/server/api"
)

// model is one loaded model: a sequence model (seqModel: LSTM/GRU stacks)
// or a tree model (treeModel). The server, the handlers and the counters
// see only this interface and the modelBase every kind shares.
type model interface {
	// base is what every kind of model has: name, metadata, statistics,
	// metrics, core slots, sequences.
	base() *modelBase
	// infer runs r (its tensors already checked against their shapes) and
	// returns the outputs it asked for, untransformed (the caller applies
	// classification and binary flags), and the rows it inferred. It fills
	// t's queue and compute times.
	infer(ctx context.Context, r *Request, t *timing) ([]OutputTensor, int, error)
	// generate streams a continuation of a prompt, one token at a time
	// through emit; models that cannot generate return ErrNotLanguageModel.
	generate(ctx context.Context, g *GenerateRequest, emit func(GenerateToken) error) (GenerateResult, error)
	// run runs the model's batcher lanes until stop is closed and every
	// job they admitted or queued has finished.
	run(stop <-chan struct{})
	// queued is the number of requests waiting for a lane or a core.
	queued() int
}

// timing is where a request's time went, for the statistics.
type timing struct {
	queue, compute time.Duration
}

// modelBase is the part every kind of model shares.
type modelBase struct {
	name string
	// weights is the model's entry in the server's count of the weights
	// loaded (newModel): stamped at every execution, removed when the
	// model is retired.
	weights *schedule.Weights
	log     *slog.Logger
	entry   Entry
	// meta and config describe the model; set at load, and changed after
	// only under mu (redescribe): read them through description.
	meta    api.ModelMetadata
	config  api.ModelConfig
	stats   modelStats
	metrics modelMetrics
	// cores are the model's core slots: one per lane stepping a batch or
	// whole-request plan running (batching.workers of them).
	cores coreSlots
	// seqs are the model's live sequences; a reload that keeps the state
	// shape hands them to the new version.
	seqs *sequenceStore
	// describe sets the model's descriptive metrics (what it runs, its
	// modelled traffic) once it is in the table.
	describe func()

	// users counts requests holding the model (see Server.acquire); a
	// retired model stops its batcher once the last one leaves.
	mu      sync.Mutex
	users   int
	retired bool
	idle    chan struct{} // closed when retired and users reaches 0
}

// description is the model's metadata and configuration as they are now.
func (b *modelBase) description() (api.ModelMetadata, api.ModelConfig) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.meta, b.config
}

// redescribe changes the rnn facts of a loaded model's metadata, and the
// configuration's parameters that repeat them (facts.go). The slices and
// maps of the old description are not touched: readers may hold them.
func (b *modelBase) redescribe(change func(*api.RNNMetadata)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	change(&b.meta.RNN)
	b.config.Parameters = factParameters(b.meta.RNN, b.config.RNNServe)
}

// version is the one version a model is served as.
const version = "1"

// enter counts a request in; false when the model is being retired (the
// caller looks the model up again and finds its successor or nothing).
func (b *modelBase) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.retired {
		return false
	}
	b.users++
	return true
}

// leave counts a request out.
func (b *modelBase) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.users--
	if b.retired && b.users == 0 {
		close(b.idle)
	}
}

// retire refuses new requests and returns a channel closed once the last
// request holding the model has left.
func (b *modelBase) retire() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.retired {
		b.retired = true
		b.idle = make(chan struct{})
		if b.users == 0 {
			close(b.idle)
		}
	}
	return b.idle
}

// modelStats are the counters behind the statistics endpoints, in
// Triton's terms (inference and execution counts, durations as count and
// nanoseconds) and rnnserve's own.
type modelStats struct {
	requests, success, failed, rejected, inflight atomic.Int64
	inferences, executions, steps, tokens         atomic.Int64
	lastInference                                 atomic.Int64 // ms since the epoch
	okDur, failDur, queue, input, infer, output   durationStat
}

// durationStat is a count and a total duration.
type durationStat struct {
	count, ns atomic.Int64
}

func (d *durationStat) add(v time.Duration) {
	d.count.Add(1)
	d.ns.Add(int64(v))
}

func (d *durationStat) snapshot() api.StatDuration {
	return api.StatDuration{Count: uint64(d.count.Load()), Ns: uint64(max(0, d.ns.Load()))}
}

// executed counts one model execution over rows rows: a batched step or a
// whole plan.
func (s *modelStats) executed(rows int) {
	s.executions.Add(1)
	s.steps.Add(1)
	s.tokens.Add(int64(rows))
}

// modelMetrics are a model's Prometheus series with the model label bound.
type modelMetrics struct {
	queue, compute, batchRows prometheus.Observer
	inflight, sequences       prometheus.Gauge
	steps, solo, wide, tokens prometheus.Counter
	panics                    prometheus.Counter
}

func (m *metrics) forModel(name string) modelMetrics {
	return modelMetrics{
		queue: m.queue.WithLabelValues(name), compute: m.compute.WithLabelValues(name),
		batchRows: m.batchRows.WithLabelValues(name),
		inflight:  m.inflight.WithLabelValues(name), sequences: m.sequences.WithLabelValues(name),
		steps: m.steps.WithLabelValues(name), solo: m.solo.WithLabelValues(name),
		wide: m.wide.WithLabelValues(name), tokens: m.tokens.WithLabelValues(name),
		panics: m.panics.WithLabelValues(name),
	}
}

// executed counts one execution (a batched step or a plan) over rows in
// the model's statistics and stamps it among the weights counted.
func (b *modelBase) executed(rows int) {
	b.stats.executed(rows)
	b.weights.Ran()
}

// observeStep counts one execution (a batched step or a plan) over rows.
func (b *modelBase) observeStep(rows int) {
	b.executed(rows)
	b.metrics.steps.Inc()
	b.metrics.tokens.Add(float64(rows))
	b.metrics.batchRows.Observe(float64(rows))
}

// coreSlots are a model's cores as a counting semaphore: a lane holds one
// while it has rows, a whole-request plan while it runs.
type coreSlots chan struct{}

func newCoreSlots(n int) coreSlots { return make(coreSlots, n) }

// take waits for a slot until ctx ends.
func (c coreSlots) take(ctx context.Context) error {
	select {
	case c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// tryTake takes a slot if one is free now.
func (c coreSlots) tryTake() bool {
	select {
	case c <- struct{}{}:
		return true
	default:
		return false
	}
}

func (c coreSlots) give() { <-c }

// takeRest is called holding one slot. When every other slot is free too
// it takes them all and returns their release; otherwise it takes none and
// returns nil.
func (c coreSlots) takeRest() func() {
	taken := 0
	for taken < cap(c)-1 && c.tryTake() {
		taken++
	}
	release := func() {
		for range taken {
			c.give()
		}
	}
	if taken < cap(c)-1 {
		release()
		return nil
	}
	return release
}
