package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
	"rnnserve/server/internal/connlimit"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/limits"
	"rnnserve/server/internal/repository"
	"rnnserve/server/internal/wire"
)

// Version is reported by GET /v2.
const Version = "0.2.0"

// Deps are what a Server is handed by its owner, which keeps them alive
// until after Stop.
type Deps struct {
	Log *slog.Logger
	// Pools run P programs (and tree plans, without TreePools) of more
	// than one core, one pool per size that PoolSizes lists. The owner makes them with schedule.NewPool and
	// closes them after Stop; the server never starts or closes a pool.
	Pools Pools
	// TreePools, when set, run tree plans instead of Pools: pools made
	// with PoolOptions.NoPin. A tree batch allocates its plan's buffers,
	// and workers locked to pinned threads wait for the runtime to hand
	// them a P after every collection's stop (docs/trees.md); P keeps its
	// workers pinned, so the two want pools of their own.
	TreePools Pools
	// Repository is the model repository the load endpoint reads models
	// from by name and the index lists. nil refuses load and unload.
	Repository *Repository
	// Failed are models the server should serve that did not load at
	// start: each is UNAVAILABLE with its reason in the repository index,
	// and with strict readiness the server is not ready while any is.
	Failed []Failure
	// Management guards the model repository API (control.go).
	Management Management
	// Build describes the binary: the rnnserve_build_info metric.
	Build BuildInfo
}

// PoolSizes are the pool sizes a server with options o needs: P on the
// cores one request may use and, for a lone request (and a tree model's
// plans, which run one at a time), on every core, when either is more
// than one core.
func PoolSizes(o Options) []int {
	o.EnsureDefaults()
	var sizes []int
	for _, n := range []int{choice.CoresPerRequest(runtime.GOMAXPROCS(0), o.Batching.Workers), choice.CoresPerRequest(runtime.GOMAXPROCS(0), 1)} {
		if n > 1 && !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// Server serves a set of models. Build it with New, start its batchers
// with Start, serve Handler() (or call Infer and the other methods from
// another transport), and Stop it to drain.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	pools   Pools
	trees   Pools // tree plans' pools (Deps.TreePools), or pools
	repo    *Repository
	mgmt    Management
	ctl     controlMetrics
	// measured probes the models' traffic with hardware counters; nil
	// when the host has none (see counters.go).
	measured *measuredTraffic

	// models is the table requests look models up in; load and unload
	// replace it whole (copy on write) under mu.
	models atomic.Pointer[map[string]model]
	// resident counts the weights of the models built and not retired
	// (newModel, retireLocked) and when each last ran, by which P's
	// programs judge whether the last-level cache holds their input
	// projections' W_ih.
	resident schedule.Resident

	mu       sync.Mutex
	stops    map[model]chan struct{} // each running model's stop
	gone     map[string]*sequenceStore
	failed   map[string]loadFailure // the last failed load of each name, for the index
	wanted   map[string]bool        // the models the server should serve (control.go)
	stamps   map[string]string      // each loaded model's folder as a poll saw it
	stop     chan struct{}
	wg       sync.WaitGroup
	draining atomic.Bool
	ready    atomic.Bool
	lameDuck atomic.Bool

	lameDuckHooks  []func()     // under mu: run by LameDuck
	readinessHooks []func(bool) // under mu: run after model events

	// streamsEnd is closed when the server drains: open gRPC streams end
	// once they have answered what they were sent (endStreams).
	streamsEnd     chan struct{}
	streamsEndOnce sync.Once

	budget    *limits.Budget // request bytes in flight (budget.go)
	conns     *connlimit.Set // open connections (conns.go)
	mgmtConns *connlimit.Set // the management listener's, apart (conns.go)
	inflight  inflight       // requests being served, for Cut (lameduck.go)

	responses wire.Responses // REST response buffers and gzip writers, the server's own
}

// New serves the given models. It computes each model's modelled traffic
// and chooses its schedule, which may take a moment for large models. A
// model that cannot be built joins deps.Failed: New fails only on bad
// options or a name given twice; the owner decides what failures mean
// (Unavailable lists them).
func New(entries []Entry, opts Options, deps Deps) (*Server, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Server{opts: opts, log: log, metrics: newMetrics(), pools: deps.Pools, trees: deps.TreePools, repo: deps.Repository, mgmt: deps.Management,
		stops: map[model]chan struct{}{}, gone: map[string]*sequenceStore{}, failed: map[string]loadFailure{},
		wanted: map[string]bool{}, stamps: map[string]string{}}
	if s.trees == nil {
		s.trees = s.pools
	}
	registerBuildInfo(s.metrics.reg, deps.Build)
	s.ctl = newControlMetrics(s.metrics.reg)
	s.measured = newMeasuredTraffic(s.metrics.reg, log)
	s.metrics.reg.MustRegister(newPlanCaches(s.table), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rnnserve_loaded_weight_bytes",
		Help: "Float32 weight bytes of the models built and not retired (a reload counts both versions until the old one is retired).",
	}, func() float64 { return float64(s.resident.Bytes()) }))
	s.budget = newBudget(opts.Budget, opts.MaxBodyBytes, s.metrics)
	s.conns = connlimit.New(opts.MaxConnections, s.budget, s.metrics.connections, s.metrics.connectionsClosedIdle)
	s.mgmtConns = connlimit.New(maxManagementConns, s.budget, s.metrics.connections, s.metrics.connectionsClosedIdle)
	s.streamsEnd = make(chan struct{})
	s.metrics.connectionsLimit.Set(float64(opts.MaxConnections))
	table := map[string]model{}
	s.models.Store(&table)
	failed := slices.Clone(deps.Failed)
	for _, e := range entries {
		if _, dup := table[e.Name]; dup || slices.ContainsFunc(failed, func(f Failure) bool { return f.Name == e.Name }) {
			return nil, fmt.Errorf("%w: model %q twice", ErrRepository, e.Name)
		}
		start := time.Now()
		m, err := s.newModel(e)
		if err != nil {
			failed = append(failed, Failure{Name: e.Name, Err: fmt.Errorf("model %q: %w", e.Name, err)})
			continue
		}
		table[e.Name] = m
		m.base().describe()
		s.wanted[e.Name] = true
		s.ctl.ready.WithLabelValues(e.Name).Set(1)
		if s.repo != nil {
			s.stamps[e.Name], _ = s.repo.Stamp(e.Name)
		}
		s.event("load", e.Name, e.Name, time.Since(start), nil)
	}
	for _, f := range failed {
		if _, dup := table[f.Name]; dup {
			return nil, fmt.Errorf("%w: model %q twice", ErrRepository, f.Name)
		}
		label := f.Name
		if errors.Is(f.Err, ErrNotInRepository) || repository.CheckName(f.Name) != nil {
			label = ""
		}
		st := ""
		if s.repo != nil {
			st, _ = s.repo.Stamp(f.Name)
		}
		s.failed[f.Name] = loadFailure{reason: errorText(f.Err), at: time.Now(), stamp: st}
		s.wanted[f.Name] = true
		s.ctl.ready.WithLabelValues(f.Name).Set(0)
		s.event("load_failed", f.Name, label, 0, f.Err)
	}
	return s, nil
}

// newModel builds a model of the entry's kind.
func (s *Server) newModel(e Entry) (model, error) {
	// The model's weights count among those served from the start of its
	// build (its timing runs beside them) until it is retired; while it
	// replaces another both count, as both are in memory.
	var bytes int64
	if e.Tree != nil {
		bytes = e.Tree.Net.WeightBytes()
	} else {
		bytes = e.Model.Net.WeightBytes()
	}
	w := s.resident.Add(bytes)
	var m model
	var err error
	if e.Tree != nil {
		m, err = s.newTreeModel(e, w)
	} else {
		m, err = s.newSeqModel(e, w)
	}
	if err != nil {
		w.Remove()
		return nil, err
	}
	return m, nil
}

// initBase sets up the part every model kind shares; w is the model's
// entry among the weights counted (newModel).
func (s *Server) initBase(b *modelBase, e Entry, w *schedule.Weights) {
	b.weights = w
	b.name, b.entry, b.metrics, b.log = e.Name, e, s.metrics.forModel(e.Name), s.log
	b.cores, b.seqs = newCoreSlots(s.opts.Batching.Workers), newSequenceStore(s.opts.Sequences)
}

// Start starts every model's batcher, the sequence janitor and the
// traffic probe. Stop ends them.
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return
	}
	s.stop = make(chan struct{})
	for _, m := range s.table() {
		s.startLocked(m)
	}
	s.wg.Go(func() { s.janitor(s.stop) })
	s.wg.Go(func() { s.returnMemory(s.stop) })
	s.wg.Go(func() { s.closeStalled(s.stop) })
	if s.measured != nil {
		s.wg.Go(func() { s.measured.run(s.stop, s.table, s.opts.TrafficSteps) })
	}
	s.ready.Store(true)
}

// startLocked starts m's batcher; s.mu is held and the server started.
func (s *Server) startLocked(m model) {
	stop := make(chan struct{})
	s.stops[m] = stop
	s.wg.Go(func() { m.run(stop) })
}

// janitor ends idle sequences and keeps the live-sequence gauge current.
func (s *Server) janitor(stop <-chan struct{}) {
	period := min(s.opts.Sequences.IdleTimeout/4, time.Second)
	every(stop, max(period, time.Millisecond), func() {
		for _, m := range s.table() {
			b := m.base()
			b.seqs.expire()
			b.metrics.sequences.Set(float64(b.seqs.count()))
		}
	})
}

// closeStalled closes, until stop, the connections that hold responses
// they have not taken for write_timeout (connlimit.Set.CloseStalled): a
// REST response has a write deadline, but grpc-go has none.
func (s *Server) closeStalled(stop <-chan struct{}) {
	every(stop, max(s.opts.WriteTimeout/4, 10*time.Millisecond), func() {
		s.conns.CloseStalled(s.opts.WriteTimeout)
	})
}

// every calls f each period until stop is closed.
func every(stop <-chan struct{}, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}

// Stop refuses new requests, lets the batchers finish every admitted and
// queued request, and waits for them until ctx ends.
func (s *Server) Stop(ctx context.Context) error {
	s.draining.Store(true)
	s.ready.Store(false)
	s.mu.Lock()
	stop := s.stop
	if stop != nil {
		select {
		case <-stop:
		default:
			close(stop)
			for m, st := range s.stops {
				close(st)
				delete(s.stops, m)
			}
		}
	}
	s.mu.Unlock()
	if stop == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("server: drain: %w", ctx.Err())
	}
}

// Live reports whether the server is running (it always is while it
// answers).
func (s *Server) Live() bool { return true }

// Ready reports whether the server has started, is not shutting down
// and, with strict readiness (the default), serves every model it should
// (control.go).
func (s *Server) Ready() bool {
	if !s.ready.Load() {
		return false
	}
	return !*s.opts.StrictReadiness || s.servesWanted()
}

// serving reports whether the server has started and is not shutting
// down: a served model's readiness.
func (s *Server) serving() bool { return s.ready.Load() }

// table is the current model table; callers must not change it.
func (s *Server) table() map[string]model { return *s.models.Load() }

// names are the loaded models' names, sorted.
func (s *Server) names() []string {
	return slices.Sorted(maps.Keys(s.table()))
}

// acquire finds a model by name and version and counts a request in; the
// caller must call leave on the model's base when done. A model being
// swapped out is never handed out: the lookup retries and finds its
// successor.
func (s *Server) acquire(name, ver string) (model, error) {
	for {
		m, ok := s.table()[name]
		if !ok {
			return nil, s.unknownModel(name)
		}
		if ver != "" && ver != version {
			return nil, fmt.Errorf("%w: model %q has no version %q (versions served: [%s])", ErrUnknownVersion, infer.Clip(name), infer.Clip(ver), version)
		}
		if m.base().enter() {
			return m, nil
		}
		runtime.Gosched()
	}
}

// lookup finds a model without counting a request (metadata, statistics).
func (s *Server) lookup(name, ver string) (model, error) {
	m, err := s.acquire(name, ver)
	if err != nil {
		return nil, err
	}
	m.base().leave()
	return m, nil
}

// call is one request being served: it counts the request in the model's
// statistics and metrics when it starts and when it ends.
type call struct {
	s        *Server
	m        *modelBase
	endpoint string
	protocol string
	start    time.Time
}

func (s *Server) begin(m *modelBase, endpoint, protocol string, start time.Time) *call {
	if start.IsZero() {
		start = time.Now()
	}
	m.stats.requests.Add(1)
	m.stats.inflight.Add(1)
	m.metrics.inflight.Inc()
	return &call{s: s, m: m, endpoint: endpoint, protocol: protocol, start: start}
}

// end counts the request's outcome.
func (c *call) end(err error) {
	m := c.m
	m.stats.inflight.Add(-1)
	m.metrics.inflight.Dec()
	code := StatusOf(err)
	c.s.metrics.observe(m.name, c.endpoint, c.protocol, code, time.Since(c.start))
	took := time.Since(c.start)
	switch {
	case err == nil:
		m.stats.success.Add(1)
		m.stats.okDur.add(took)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrDraining), errors.Is(err, ErrOverBudget), errors.Is(err, ErrTooManySequences):
		m.stats.rejected.Add(1)
		m.stats.failDur.add(took)
	default:
		m.stats.failed.Add(1)
		m.stats.failDur.add(took)
	}
}

// Rejected counts a request a transport refused before it could build a
// Request (an unparsable or oversized body): it shows in the model's
// statistics and metrics like any failed request. An unknown model is not
// counted.
func (s *Server) Rejected(modelName, ver, endpoint, protocol string, received time.Time, err error) {
	m, lerr := s.lookup(modelName, ver)
	if lerr != nil {
		return
	}
	s.begin(m.base(), endpoint, protocol, received).end(err)
}

// Infer runs an inference request on its model: the one path every
// transport's requests take (see Request).
func (s *Server) Infer(ctx context.Context, r *Request) (*Response, error) {
	m, err := s.acquire(r.Model, r.Version)
	if err != nil {
		return nil, err
	}
	b := m.base()
	defer b.leave()
	ctx, untrack := s.track(ctx, r.Model, "infer", r.Protocol)
	defer untrack()
	c := s.begin(b, "infer", r.Protocol, r.Received)
	var resp *Response
	err = b.protect("request", func() (err error) {
		resp, err = s.run(ctx, m, r, c.start)
		return err
	})
	c.end(err)
	return resp, err
}

func (s *Server) run(ctx context.Context, m model, r *Request, start time.Time) (*Response, error) {
	if s.draining.Load() {
		return nil, ErrDraining
	}
	b := m.base()
	for i := range r.Inputs {
		if err := r.Inputs[i].Check(); err != nil {
			return nil, err
		}
	}
	if err := checkClassification(r.Outputs); err != nil {
		return nil, err
	}
	decoded := time.Now()
	r.Plan = func(outs []infer.PlannedOutput) error { return s.planResponse(r, outs) }
	var t timing
	outs, rows, err := m.infer(ctx, r, &t)
	if err != nil {
		return nil, err
	}
	computed := time.Now()
	for i := range outs {
		o := &outs[i]
		want := findOutput(r.Outputs, o.Name)
		o.Binary = r.BinaryOutput
		if want != nil && want.Binary != nil {
			o.Binary = *want.Binary
		}
		if want != nil && want.Classification > 0 {
			if err := classify(o, want.Classification); err != nil {
				return nil, err
			}
		}
	}
	st := &b.stats
	st.inferences.Add(int64(rows))
	st.lastInference.Store(time.Now().UnixMilli())
	st.queue.add(t.queue)
	st.input.add(decoded.Sub(start))
	st.infer.add(t.compute)
	st.output.add(time.Since(computed))
	return &Response{Model: b.name, Version: version, ID: r.ID, Outputs: outs}, nil
}

// findOutput is the requested output named name, or nil (a default
// output).
func findOutput(outs []RequestedOutput, name string) *RequestedOutput {
	for i := range outs {
		if outs[i].Name == name {
			return &outs[i]
		}
	}
	return nil
}

// generationCharge is a generate request's Charge from share, its share
// of the memory budget. A generation that would hold more than the whole
// budget can never run (Reservation.Grow would let it take all): it is a
// bad request, not one to retry.
func (s *Server) generationCharge(share *limits.Reservation) func(int64) error {
	return func(n int64) error {
		if n > s.budget.Size() {
			return infer.BadRequest("the generation would hold %d bytes, more than the whole memory budget (%d): lower max_tokens", n, s.budget.Size())
		}
		return share.Grow(n)
	}
}

// Generate runs a generate request on its model, calling emit for each
// token in order from the caller's goroutine; an error from emit (the
// client went away) stops the generation. It returns an error when it
// failed before the first token; a failure after it (a panic in a lane,
// the drain timeout) ends the generation with GenerateResult.Err set. A
// panic in the caller's own goroutine returns an error whenever it
// happens: a transport that has started streaming ends its stream with
// it. The generation's memory (generationBytes) comes from the memory
// budget through g.Charge, or from a share of it for the call when
// g.Charge is nil; without room it fails with ErrOverBudget, and one that
// would hold more than the whole budget with ErrBadRequest.
func (s *Server) Generate(ctx context.Context, g *GenerateRequest, emit func(GenerateToken) error) (GenerateResult, error) {
	m, err := s.acquire(g.Model, g.Version)
	if err != nil {
		return GenerateResult{}, err
	}
	b := m.base()
	defer b.leave()
	ctx, untrack := s.track(ctx, g.Model, "generate", g.Protocol)
	defer untrack()
	decoded := time.Now()
	c := s.begin(b, "generate", g.Protocol, g.Received)
	if s.draining.Load() {
		c.end(ErrDraining)
		return GenerateResult{}, ErrDraining
	}
	if g.Charge == nil { // a caller of this API: the share lasts the call
		share := s.budget.Reserve(ctx)
		defer share.Release()
		g.Charge = s.generationCharge(share)
	}
	var res GenerateResult
	err = b.protect("generation", func() (err error) {
		res, err = m.generate(ctx, g, emit)
		return err
	})
	c.end(cmp.Or(err, res.Err))
	if err == nil {
		st := &b.stats
		st.inferences.Add(1)
		st.lastInference.Store(time.Now().UnixMilli())
		if res.Err == nil {
			// Triton's statistics count a successful request in success and
			// in each phase alike, generations as infer requests: the phases
			// of a generation are its decoding, its wait for a lane, its
			// steps and what followed the last step.
			st.queue.add(res.t.queue)
			st.input.add(decoded.Sub(c.start))
			st.infer.add(res.t.compute)
			st.output.add(max(0, time.Since(c.start)-decoded.Sub(c.start)-res.t.queue-res.t.compute))
		}
	}
	return res, err
}
