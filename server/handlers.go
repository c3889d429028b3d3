package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rnnserve/schedule"
	"rnnserve/server/api"
)

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.CustomRecovery(func(c *gin.Context, v any) {
		s.log.Error("panic serving request", "path", c.Request.URL.Path, "panic", v)
		c.AbortWithStatusJSON(http.StatusInternalServerError, api.Error{Error: "internal error"})
	}))
	r.GET("/v2/health/live", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"live": true}) })
	r.GET("/v2/health/ready", func(c *gin.Context) {
		if !s.isReady() {
			c.JSON(http.StatusServiceUnavailable, gin.H{"ready": false})
			return
		}
		c.JSON(http.StatusOK, gin.H{"ready": true})
	})
	r.GET("/v2", func(c *gin.Context) {
		c.JSON(http.StatusOK, api.ServerMetadata{Name: "rnnserve", Version: Version,
			Extensions: []string{"sequence", "generate", "statistics", "rnn_traffic"}})
	})
	r.GET("/v2/models", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"models": s.names}) })
	r.GET("/v2/models/:name", s.withModel(func(c *gin.Context, m *model) { c.JSON(http.StatusOK, m.meta) }))
	r.GET("/v2/models/:name/ready", s.withModel(func(c *gin.Context, m *model) {
		if !s.isReady() {
			c.JSON(http.StatusServiceUnavailable, gin.H{"name": m.name, "ready": false})
			return
		}
		c.JSON(http.StatusOK, gin.H{"name": m.name, "ready": true})
	}))
	r.GET("/v2/models/:name/stats", s.withModel(func(c *gin.Context, m *model) { c.JSON(http.StatusOK, s.statsOf(m)) }))
	r.POST("/v2/models/:name/infer", s.withModel(s.infer))
	r.POST("/v2/models/:name/generate", s.withModel(s.generate))
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	r.NoRoute(func(c *gin.Context) {
		c.JSON(http.StatusNotFound, api.Error{Error: fmt.Sprintf("no route %s %s", c.Request.Method, c.Request.URL.Path)})
	})
	r.NoMethod(func(c *gin.Context) {
		c.JSON(http.StatusMethodNotAllowed, api.Error{Error: fmt.Sprintf("method %s not allowed on %s", c.Request.Method, c.Request.URL.Path)})
	})
	r.HandleMethodNotAllowed = true
	return r
}

func (s *Server) withModel(h func(*gin.Context, *model)) gin.HandlerFunc {
	return func(c *gin.Context) {
		m, err := s.model(c.Param("name"))
		if err != nil {
			fail(c, err)
			return
		}
		h(c, m)
	}
}

// fail answers with err's status and a JSON error body.
func fail(c *gin.Context, err error) {
	code := statusOf(err)
	if code == http.StatusServiceUnavailable {
		c.Header("Retry-After", "1")
	}
	c.AbortWithStatusJSON(code, api.Error{Error: err.Error()})
}

// readJSON reads a size-limited body into v, rejecting unknown fields.
func (s *Server) readJSON(c *gin.Context, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("%w: body over %d bytes", ErrTooLarge, s.opts.MaxBodyBytes)
		}
		return badRequest("reading body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("malformed JSON: %v", err)
	}
	if dec.More() {
		return badRequest("malformed JSON: data after the request object")
	}
	return nil
}

// track counts a request in the metrics and stats when it ends.
func (s *Server) track(m *model, endpoint string) func(code int) {
	start := time.Now()
	m.stats.requests.Add(1)
	m.stats.inflight.Add(1)
	s.metrics.inflight.WithLabelValues(m.name).Inc()
	return func(code int) {
		m.stats.inflight.Add(-1)
		s.metrics.inflight.WithLabelValues(m.name).Dec()
		s.metrics.requests.WithLabelValues(m.name, endpoint, strconv.Itoa(code)).Inc()
		s.metrics.latency.WithLabelValues(m.name).Observe(time.Since(start).Seconds())
		switch {
		case code < 400:
			m.stats.success.Add(1)
		case code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests:
			m.stats.rejected.Add(1)
		default:
			m.stats.failed.Add(1)
		}
	}
}

func (s *Server) infer(c *gin.Context, m *model) {
	done := s.track(m, "infer")
	start := time.Now()
	code, err := s.inferStatus(c, m, start)
	if err != nil {
		fail(c, err)
		code = statusOf(err)
	}
	done(code)
}

func (s *Server) inferStatus(c *gin.Context, m *model, start time.Time) (int, error) {
	if s.isDraining() {
		return 0, ErrDraining
	}
	if m.tree != nil {
		return s.inferTrees(c, m, start)
	}
	var req api.InferRequest
	if err := s.readJSON(c, &req); err != nil {
		return 0, err
	}
	r, err := decodeRequest(&req, m.net, &s.opts)
	if err != nil {
		return 0, err
	}
	var st, init *seqState
	if r.seq.id != "" {
		if st, err = m.seqs.acquire(r.seq.id, r.seq.start); err != nil {
			return 0, err
		}
		s.metrics.sequences.WithLabelValues(m.name).Set(float64(m.seqs.count()))
		if st.h != nil {
			init = st // continue from the stored state; a new sequence starts from zeros
		}
	}
	res, queued, compute, err := m.infer(c.Request.Context(), r, init)
	if st != nil {
		var h, cs []float32
		if err == nil {
			h, cs = res[0].hn, res[0].cn
		}
		m.seqs.release(r.seq.id, st, h, cs, r.seq.end && err == nil)
		s.metrics.sequences.WithLabelValues(m.name).Set(float64(m.seqs.count()))
	}
	if err != nil {
		return 0, err
	}
	outs, err := m.encode(r, res)
	if err != nil {
		return 0, err
	}
	m.stats.observe(queued, compute, time.Since(start))
	c.JSON(http.StatusOK, api.InferResponse{ModelName: m.name, ModelVersion: "1", ID: req.ID, Outputs: outs})
	return http.StatusOK, nil
}

// generate streams a language model's continuation of a prompt, one NDJSON
// object per token, ending with a line that has "done": true.
func (s *Server) generate(c *gin.Context, m *model) {
	done := s.track(m, "generate")
	code, err := s.generateStatus(c, m)
	if err != nil {
		fail(c, err)
		code = statusOf(err)
	}
	done(code)
}

func (s *Server) generateStatus(c *gin.Context, m *model) (int, error) {
	if s.isDraining() {
		return 0, ErrDraining
	}
	n := m.net
	if m.tree != nil || n.Vocab == 0 || n.HeadOut != n.Vocab || m.batch == nil {
		return 0, fmt.Errorf("%w: %q needs token input, a head over its vocabulary and one direction", ErrNotLanguageModel, m.name)
	}
	var req api.GenerateRequest
	if err := s.readJSON(c, &req); err != nil {
		return 0, err
	}
	prompt, err := promptTokens(&req, n.Vocab, s.opts.MaxSteps)
	if err != nil {
		return 0, err
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = 64
	}
	switch {
	case req.MaxTokens < 1 || req.MaxTokens > s.opts.MaxGenerateTokens:
		return 0, badRequest("max_tokens %d, want 1..%d", req.MaxTokens, s.opts.MaxGenerateTokens)
	case math.IsNaN(req.Temperature) || req.Temperature < 0 || req.Temperature > 100:
		return 0, badRequest("temperature %v, want 0..100 (0 is greedy)", req.Temperature)
	case req.TopK < 0 || req.TopK > n.Vocab:
		return 0, badRequest("top_k %d, want 0..%d (0 keeps all)", req.TopK, n.Vocab)
	}
	g := &generation{maxTokens: req.MaxTokens, temperature: req.Temperature, topK: req.TopK,
		rng: rand.New(rand.NewPCG(req.Seed, 0x5eed)), events: make(chan api.GenerateEvent, req.MaxTokens+1),
		text: tokenText(n.Vocab), scratch: make([]float64, n.Vocab)}
	j := &job{ctx: c.Request.Context(), gen: g,
		seqs: []*schedule.Sequence{{Tokens: prompt, Head: schedule.HeadLast}}}
	if err := m.batch.submit(j); err != nil {
		return 0, err
	}
	c.Header("Content-Type", "application/x-ndjson")
	c.Status(http.StatusOK)
	enc := json.NewEncoder(c.Writer)
	wrote := false
	for ev := range g.events {
		if err := enc.Encode(ev); err != nil {
			break // the client has gone; the batcher drops the row
		}
		c.Writer.Flush()
		wrote = true
	}
	err = <-j.done
	if err != nil && !wrote {
		return 0, err
	}
	reason := "length"
	if err != nil {
		reason = "canceled"
	}
	enc.Encode(api.GenerateDone{Done: true, Tokens: g.produced, Reason: reason})
	c.Writer.Flush()
	m.stats.observe(j.started.Sub(j.enqueued), j.finished.Sub(j.started), time.Since(j.enqueued))
	return http.StatusOK, nil
}

// promptTokens turns a generate request's prompt into token ids: bytes for
// a byte-level (256-token) model, else the prompt_tokens it gives.
func promptTokens(req *api.GenerateRequest, vocab, maxSteps int) ([]int64, error) {
	var ids []int64
	switch {
	case req.Prompt != "" && req.PromptTokens != nil:
		return nil, badRequest("give prompt or prompt_tokens, not both")
	case req.Prompt != "":
		if vocab != 256 {
			return nil, badRequest("prompt text needs a byte-level model (vocabulary 256); send prompt_tokens")
		}
		for _, b := range []byte(req.Prompt) {
			ids = append(ids, int64(b))
		}
	default:
		ids = req.PromptTokens
		for i, id := range ids {
			if id < 0 || id >= int64(vocab) {
				return nil, badRequest("prompt_tokens[%d] = %d is outside the vocabulary [0, %d)", i, id, vocab)
			}
		}
	}
	if len(ids) == 0 {
		return nil, badRequest("empty prompt")
	}
	if len(ids) > maxSteps {
		return nil, badRequest("prompt of %d tokens exceeds max_steps %d", len(ids), maxSteps)
	}
	return ids, nil
}

// tokenText renders a token for the stream: its byte for a byte-level
// model, else nothing (the id is in the event).
func tokenText(vocab int) func(int64) string {
	if vocab != 256 {
		return func(int64) string { return "" }
	}
	return func(t int64) string { return string([]byte{byte(t)}) }
}

// statsOf snapshots a model's statistics.
func (s *Server) statsOf(m *model) api.ModelStats {
	st := &m.stats
	st.mu.Lock()
	q, cmp, tot := st.queue, st.compute, st.total
	st.mu.Unlock()
	out := api.ModelStats{Name: m.name, Requests: st.requests.Load(), Success: st.success.Load(),
		Failed: st.failed.Load(), Rejected: st.rejected.Load(), Steps: st.steps.Load(), Tokens: st.tokens.Load(),
		InFlight: st.inflight.Load(), LiveSequences: m.seqs.count(),
		QueueSeconds: q, ComputeSeconds: cmp, TotalSeconds: tot}
	if out.Steps > 0 {
		out.MeanBatchRows = float64(out.Tokens) / float64(out.Steps)
	}
	if m.batch != nil {
		out.QueueLength = len(m.batch.queue)
	}
	return out
}
