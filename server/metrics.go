package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"rnnserve/internal/hugepage"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// metrics are the server's Prometheus collectors, all named rnnserve_*.
type metrics struct {
	reg *prometheus.Registry

	requests   *prometheus.CounterVec   // model, endpoint, protocol, code
	latency    *prometheus.HistogramVec // model, protocol
	queue      *prometheus.HistogramVec // model
	compute    *prometheus.HistogramVec // model
	batchRows  *prometheus.HistogramVec // model
	inflight   *prometheus.GaugeVec     // model
	sequences  *prometheus.GaugeVec     // model
	steps      *prometheus.CounterVec   // model
	solo       *prometheus.CounterVec   // model
	wide       *prometheus.CounterVec   // model
	tokens     *prometheus.CounterVec   // model
	dramBytes  *prometheus.GaugeVec     // model, schedule
	workingSet *prometheus.GaugeVec     // model, schedule
	dre        *prometheus.GaugeVec     // model, schedule
	info       *prometheus.GaugeVec     // model, schedule, batching
	steps0     *prometheus.GaugeVec     // model: the reference length of the traffic figures
	panics     *prometheus.CounterVec   // model ("" outside any model)

	budgetSize, budgetUsed prometheus.Gauge
	budgetRefused          prometheus.Counter
	connections            prometheus.Gauge
	connectionsLimit       prometheus.Gauge
	connectionsClosedIdle  prometheus.Counter
}

func newMetrics() *metrics {
	latencyBuckets := prometheus.ExponentialBuckets(50e-6, 2, 18) // 50µs .. ~6.5s
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_requests_total", Help: "Requests by model, endpoint (infer, generate), protocol (rest, grpc) and HTTP status code (the status the error maps to, whatever the protocol).",
		}, []string{"model", "endpoint", "protocol", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rnnserve_request_duration_seconds", Help: "Time from receiving a request to its response.", Buckets: latencyBuckets,
		}, []string{"model", "protocol"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rnnserve_queue_duration_seconds", Help: "Time a request waited before its first step ran.", Buckets: latencyBuckets,
		}, []string{"model"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rnnserve_compute_duration_seconds", Help: "Time from a request's first step to its last.", Buckets: latencyBuckets,
		}, []string{"model"}),
		batchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rnnserve_batch_rows", Help: "Sequences in the batch at each step.", Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"model"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_inflight_requests", Help: "Requests being served.",
		}, []string{"model"}),
		sequences: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_live_sequences", Help: "Stateful sequences kept between requests.",
		}, []string{"model"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_steps_total", Help: "Batched time steps run (each may cover many sequences).",
		}, []string{"model"}),
		solo: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_solo_plans_total", Help: "Requests the batcher ran as one whole-request plan because they arrived alone.",
		}, []string{"model"}),
		wide: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_wide_plans_total", Help: "Whole-request plans that found every core of the model free and ran across all of them.",
		}, []string{"model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_tokens_total", Help: "Sequence time steps processed (tokens or feature vectors).",
		}, []string{"model"}),
		dramBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_model_dram_bytes_per_inference", Help: "Modelled DRAM bytes read+written per inference at the host's cache size, for the reference input length.",
		}, []string{"model", "schedule"}),
		workingSet: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_model_working_set_bytes", Help: "Working set of one inference: weights, embeddings and intermediate values.",
		}, []string{"model", "schedule"}),
		dre: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_model_dre", Help: "Data Reuse Efficiency: modelled DRAM bytes per inference / working set (1 is ideal).",
		}, []string{"model", "schedule"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_model_info", Help: "1 for each served model; schedule is what its infer requests run (cellular when batched).",
		}, []string{"model", "schedule", "batching"}),
		steps0: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rnnserve_model_traffic_steps", Help: "Input length (time steps) of one inference in the rnnserve_model_* traffic figures.",
		}, []string{"model"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_panics_total", Help: "Panics contained: each failed the requests it hit with 500 (gRPC Internal) and was logged with its stack; the server kept serving. model is empty for a panic outside any model's work.",
		}, []string{"model"}),
		budgetSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rnnserve_request_budget_bytes", Help: "The memory budget: request body bytes that may be in flight at once.",
		}),
		budgetUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rnnserve_request_budget_used_bytes", Help: "Request body bytes in flight (taken from the memory budget).",
		}),
		budgetRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rnnserve_request_budget_refused_total", Help: "Requests refused with 503 because the memory budget had no room within the budget wait.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rnnserve_open_connections", Help: "Client connections open (REST and gRPC listeners together).",
		}),
		connectionsClosedIdle: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rnnserve_idle_connections_closed_total", Help: "Idle client connections closed to make room for new ones at the connection cap.",
		}),
		connectionsLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rnnserve_open_connections_limit", Help: "The cap on open client connections (max_connections).",
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.queue, m.compute, m.batchRows, m.inflight,
		m.sequences, m.steps, m.solo, m.wide, m.tokens, m.dramBytes, m.workingSet, m.dre, m.info, m.steps0, m.panics,
		m.budgetSize, m.budgetUsed, m.budgetRefused, m.connections, m.connectionsLimit, m.connectionsClosedIdle,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rnnserve_hugepage_mapped_bytes", Help: "Bytes of weight matrices held on transparent huge pages: mapped outside the Go heap, so in no go_memstats_* figure (process_resident_memory_bytes includes them).",
		}, func() float64 { return float64(hugepage.Mapped()) }))
	return m
}

// observe counts one finished request.
func (m *metrics) observe(model, endpoint, protocol string, code int, d time.Duration) {
	if protocol == "" {
		protocol = "rest"
	}
	m.requests.WithLabelValues(model, endpoint, protocol, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(model, protocol).Observe(d.Seconds())
}

// describe sets a model's descriptive series: what it runs and its
// modelled traffic (steps is the traffic's reference length; 0 and no
// traffic for a tree model).
func (m *metrics) describe(model, running string, batching bool, steps int, traffic []api.ScheduleTraffic) {
	m.info.WithLabelValues(model, running, strconv.FormatBool(batching)).Set(1)
	if steps > 0 {
		m.steps0.WithLabelValues(model).Set(float64(steps))
	}
	for _, t := range traffic {
		m.dramBytes.WithLabelValues(model, t.Schedule).Set(t.DRAMBytes)
		m.workingSet.WithLabelValues(model, t.Schedule).Set(float64(t.WorkingSetBytes))
		m.dre.WithLabelValues(model, t.Schedule).Set(t.DRE)
	}
	m.sequences.WithLabelValues(model).Set(0)
	m.inflight.WithLabelValues(model).Set(0)
}

// forget removes an unloaded model's descriptive series (its counters
// stay: they count what it served).
func (m *metrics) forget(model string) {
	for _, v := range []*prometheus.GaugeVec{m.info, m.steps0, m.dramBytes, m.workingSet, m.dre, m.sequences, m.inflight} {
		v.DeletePartialMatch(prometheus.Labels{"model": model})
	}
}

// planCaches exports the plan caches of the loaded sequence models
// (schedule.Program.PlanCache), read from the model table at each scrape:
// how many input shapes each keeps plans for, and how many it has dropped
// to stay within schedule.MaxPlanShapes. Clients that vary their shapes
// (batch, length, lengths) make the second grow.
type planCaches struct {
	table           func() map[string]model
	shapes, evicted *prometheus.Desc
}

func newPlanCaches(table func() map[string]model) planCaches {
	return planCaches{table: table,
		shapes: prometheus.NewDesc("rnnserve_plan_cache_shapes",
			"Input shapes (batch, length, lengths) a model keeps reusable plans for, at most "+strconv.Itoa(schedule.MaxPlanShapes)+".", []string{"model"}, nil),
		evicted: prometheus.NewDesc("rnnserve_plan_cache_evictions_total",
			"Input shapes whose plans a model dropped to keep at most "+strconv.Itoa(schedule.MaxPlanShapes)+" (the least recently used first).", []string{"model"}, nil)}
}

func (p planCaches) Describe(ch chan<- *prometheus.Desc) { ch <- p.shapes; ch <- p.evicted }

func (p planCaches) Collect(ch chan<- prometheus.Metric) {
	for name, m := range p.table() {
		sm, ok := m.(*seqModel)
		if !ok {
			continue
		}
		var c schedule.PlanCache
		f := sm.form.Load()
		for _, prog := range []*schedule.Program{f.prog, f.wide} {
			if prog != nil {
				pc := prog.PlanCache()
				c.Shapes += pc.Shapes
				c.Evicted += pc.Evicted
			}
		}
		ch <- prometheus.MustNewConstMetric(p.shapes, prometheus.GaugeValue, float64(c.Shapes), name)
		ch <- prometheus.MustNewConstMetric(p.evicted, prometheus.CounterValue, float64(c.Evicted), name)
	}
}
