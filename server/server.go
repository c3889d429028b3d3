package server

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// Version is reported by GET /v2.
const Version = "0.1.0"

// Server serves a set of models. Build it with New, start its batchers
// with Start, serve Handler(), and Stop it to drain.
type Server struct {
	opts    Options
	models  map[string]*model
	names   []string
	metrics *metrics
	log     *slog.Logger
	// measured probes the models' traffic with hardware counters; nil
	// when the host has none (see counters.go).
	measured *measuredTraffic

	mu       sync.Mutex
	stop     chan struct{}
	wg       sync.WaitGroup
	draining bool
	ready    bool
}

// New loads the given models. It computes each model's modelled traffic
// and chooses its schedule, which may take a moment for large models.
func New(entries []Entry, opts Options, log *slog.Logger) (*Server, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{opts: opts, models: map[string]*model{}, metrics: newMetrics(), log: log}
	s.measured = newMeasuredTraffic(s.metrics.reg, log)
	for _, e := range entries {
		m, err := s.newModel(e)
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", e.Name, err)
		}
		s.models[e.Name] = m
		s.names = append(s.names, e.Name)
	}
	return s, nil
}

func (s *Server) newModel(e Entry) (*model, error) {
	if e.Tree != nil {
		return s.newTreeModel(e)
	}
	net := e.Model.Net
	m := &model{name: e.Name, entry: e, net: net, metrics: s.metrics,
		workers: make(chan struct{}, s.opts.Batching.Workers),
		maxWait: int64(s.opts.Batching.QueueLength),
		seqs:    newSequenceStore(s.opts.Sequences)}
	sched, reason, traffic, err := chooseSchedule(net, e.Config, s.trafficModel())
	if err != nil {
		return nil, err
	}
	m.reason = reason
	if m.prog, err = sched.program(net); err != nil {
		return nil, err
	}
	// P on one core per request also gets a form across every core, for a
	// request that finds every core of the model free (see model.widen).
	if cores := coresPerRequest(runtime.GOMAXPROCS(0), 1); sched.sched == schedule.Partitioned && sched.workers < cores {
		wide := sched
		wide.workers = cores
		if m.wide, err = wide.program(net); err != nil {
			return nil, err
		}
		m.reason += fmt.Sprintf("; a request that finds all of the model's %d cores free runs %v across all of them", cores, wide)
	}
	m.batching = *s.opts.Batching.Enabled
	if e.Config.Batching != nil {
		m.batching = *e.Config.Batching
	}
	// Every unidirectional model gets a batcher: generation needs it even
	// when infer requests run unbatched.
	if net.Bidirectional {
		m.batching = false
	} else if m.batch, err = newBatcher(m, s.opts.Batching); err != nil {
		return nil, err
	}
	if m.batch != nil {
		t, err := cellularTraffic(net, llcOrDefault(s.opts.CacheBytes), s.opts.TrafficSteps)
		if err != nil {
			return nil, fmt.Errorf("traffic of the cellular batcher: %w", err)
		}
		traffic = append(traffic, t)
	}
	m.meta = metadata(m, sched, traffic)
	running := sched.String()
	if m.batching {
		running = schedule.Cellular.String()
	}
	s.metrics.info.WithLabelValues(m.name, running, strconv.FormatBool(m.batching)).Set(1)
	s.metrics.steps0.WithLabelValues(m.name).Set(float64(s.opts.TrafficSteps))
	for _, t := range traffic {
		s.metrics.dramBytes.WithLabelValues(m.name, t.Schedule).Set(t.DRAMBytes)
		s.metrics.workingSet.WithLabelValues(m.name, t.Schedule).Set(float64(t.WorkingSetBytes))
		s.metrics.dre.WithLabelValues(m.name, t.Schedule).Set(t.DRE)
	}
	s.metrics.sequences.WithLabelValues(m.name).Set(0)
	s.metrics.inflight.WithLabelValues(m.name).Set(0)
	if m.batch != nil {
		s.metrics.solo.WithLabelValues(m.name).Add(0)
	}
	if m.wide != nil {
		s.metrics.wide.WithLabelValues(m.name).Add(0)
	}
	return m, nil
}

// Start starts one batcher goroutine per batched model and the sequence
// janitor. Stop ends them.
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return
	}
	s.stop = make(chan struct{})
	for _, m := range s.models {
		if m.tree != nil {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				m.tree.run(s.stop)
			}()
		}
		if m.batch != nil {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				m.batch.run(s.stop)
			}()
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.janitor(s.stop)
	}()
	if s.measured != nil {
		ms := make([]*model, 0, len(s.names))
		for _, n := range s.names {
			ms = append(ms, s.models[n])
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.measured.run(s.stop, ms, s.opts.TrafficSteps)
		}()
	}
	s.ready = true
}

// janitor ends idle sequences and keeps the live-sequence gauge current.
func (s *Server) janitor(stop <-chan struct{}) {
	every := min(s.opts.Sequences.IdleTimeout/4, time.Second)
	t := time.NewTicker(max(every, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for _, m := range s.models {
				m.seqs.expire()
				s.metrics.sequences.WithLabelValues(m.name).Set(float64(m.seqs.count()))
			}
		}
	}
}

// Stop refuses new requests, lets the batchers finish every admitted and
// queued request, and waits for them until ctx ends.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	already := s.draining
	s.draining, s.ready = true, false
	stop := s.stop
	s.mu.Unlock()
	if stop == nil {
		return nil
	}
	if !already {
		close(stop)
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

func (s *Server) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

func (s *Server) model(name string) (*model, error) {
	m, ok := s.models[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, name)
	}
	return m, nil
}

// metadata describes a model for GET /v2/models/{name}.
func metadata(m *model, sched candidate, traffic []api.ScheduleTraffic) api.ModelMetadata {
	n := m.net
	md := api.ModelMetadata{Name: m.name, Versions: []string{"1"}, Platform: "rnnserve_" + n.Cell.String()}
	if n.Vocab > 0 {
		md.Inputs = []api.TensorMetadata{{Name: "tokens", Datatype: "INT64", Shape: []int64{-1, -1}, Doc: fmt.Sprintf("token ids [B, T] in [0, %d)", n.Vocab)}}
	} else {
		md.Inputs = []api.TensorMetadata{{Name: "features", Datatype: "FP32", Shape: []int64{-1, -1, int64(n.Input)}, Doc: "feature vectors [B, T, input_size]"}}
	}
	W, LD := int64(n.OutputWidth()), int64(n.NumLayers*n.Dirs())
	if n.HeadOut > 0 {
		V := int64(n.HeadOut)
		md.Outputs = append(md.Outputs,
			api.TensorMetadata{Name: "logits", Datatype: "FP32", Shape: []int64{-1, -1, V}, Doc: outputNames["logits"]},
			api.TensorMetadata{Name: "probs", Datatype: "FP32", Shape: []int64{-1, -1, V}, Doc: outputNames["probs"]},
			api.TensorMetadata{Name: "top_k", Datatype: "INT64", Shape: []int64{-1, -1, -1}, Doc: outputNames["top_k"]},
			api.TensorMetadata{Name: "top_k_probs", Datatype: "FP32", Shape: []int64{-1, -1, -1}, Doc: outputNames["top_k_probs"]})
	}
	md.Outputs = append(md.Outputs,
		api.TensorMetadata{Name: "output", Datatype: "FP32", Shape: []int64{-1, -1, W}, Doc: outputNames["output"]},
		api.TensorMetadata{Name: "hidden", Datatype: "FP32", Shape: []int64{-1, LD, int64(n.Out())}, Doc: outputNames["hidden"]})
	if n.Cell == rnn.LSTM {
		md.Outputs = append(md.Outputs, api.TensorMetadata{Name: "cell", Datatype: "FP32", Shape: []int64{-1, LD, int64(n.Hidden)}, Doc: outputNames["cell"]})
	}
	md.RNN = api.RNNMetadata{
		Cell: n.Cell.String(), InputSize: n.Input, HiddenSize: n.Hidden, NumLayers: n.NumLayers,
		Bidirectional: n.Bidirectional, ProjSize: n.Proj, VocabSize: n.Vocab, HeadSize: n.HeadOut,
		WeightBytes: n.WeightBytes(), Schedule: sched.String(), ScheduleReason: m.reason, WideCores: wideCores(m),
		Batching: m.batching, Traffic: traffic,
	}
	if n.HeadOut > 0 {
		md.RNN.Activation = n.Activation.String()
	}
	return md
}

// wideCores is the number of cores m's wide program runs on, 0 for none.
func wideCores(m *model) int {
	if m.wide == nil {
		return 0
	}
	return m.wide.Workers()
}
