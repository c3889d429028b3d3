package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rnnserve/server/api"
	"rnnserve/server/internal/connlimit"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/wire"
)

// The REST front end: gin routes whose handlers bind the request, hand it
// to the server (Infer, Generate, Statistics, the repository) and write
// the answer. Every model route answers both as /v2/models/{name}/... and
// as /v2/models/{name}/versions/{version}/....

// protocolREST labels REST requests in the metrics.
const protocolREST = "rest"

// Handler returns the REST API. Gin's mode (gin.SetMode) is the
// process's: a program serving it sets gin.ReleaseMode, as cmd/serve
// does, or gin logs every route in debug mode.
func (s *Server) Handler() http.Handler { return s.handler(false) }

// ManagementHandler returns the model repository API alone (index, load,
// unload), for a listener of its own (Management.Separate).
func (s *Server) ManagementHandler() http.Handler { return s.handler(true) }

func (s *Server) handler(management bool) http.Handler {
	r := gin.New()
	r.Use(gin.CustomRecovery(func(c *gin.Context, v any) {
		logPanic(s.log, "REST handler "+c.Request.URL.Path, v, "request_id", RequestID(c.Request.Context()))
		s.metrics.panics.WithLabelValues("").Inc()
		c.AbortWithStatusJSON(http.StatusInternalServerError, api.Error{Error: "internal error (the stack is in the server log)"})
	}), func(c *gin.Context) {
		// In the lame-duck period every response closes its connection:
		// a keep-alive client reconnects, to another replica once the load
		// balancer has seen this one's readiness fail.
		if s.lameDuck.Load() {
			c.Header("Connection", "close")
		}
		// A connection that sent a head with both Content-Length and
		// Transfer-Encoding is refused and closed (connlimit.Smuggling).
		if connlimit.Smuggling(c.Request.Context()) {
			c.Header("Connection", "close")
			c.AbortWithStatusJSON(http.StatusBadRequest, api.Error{Error: "a request on this connection had both Content-Length and Transfer-Encoding, or a folded header line (RFC 9112 sections 6.1 and 5.2): refused"})
			return
		}
		// A head of many fields is refused before anything waits for its
		// body: parsed, each field is a map entry, some 15 times its bytes
		// for tiny ones, which no budget counts.
		if n := headerFields(c.Request.Header); n > maxHeaderFields {
			c.Header("Connection", "close")
			c.AbortWithStatusJSON(http.StatusRequestHeaderFieldsTooLarge, api.Error{Error: fmt.Sprintf("%d header fields: at most %d are taken", n, maxHeaderFields)})
		}
	})
	repository := func(r *gin.Engine) {
		r.POST("/v2/repository/index", func(c *gin.Context) { s.repositoryIndex(c, management) })
		r.POST("/v2/repository/models/:name/load", func(c *gin.Context) { s.repositoryLoad(c, management) })
		r.POST("/v2/repository/models/:name/unload", func(c *gin.Context) { s.repositoryUnload(c, management) })
	}
	notFound := func(r *gin.Engine) {
		r.NoRoute(func(c *gin.Context) {
			c.JSON(http.StatusNotFound, api.Error{Error: fmt.Sprintf("no route %s %s", infer.Clip(c.Request.Method), infer.Clip(c.Request.URL.Path))})
		})
		r.NoMethod(func(c *gin.Context) {
			c.JSON(http.StatusMethodNotAllowed, api.Error{Error: fmt.Sprintf("method %s not allowed on %s", infer.Clip(c.Request.Method), infer.Clip(c.Request.URL.Path))})
		})
		r.HandleMethodNotAllowed = true
	}
	if management {
		repository(r)
		notFound(r)
		return r
	}
	r.GET("/v2/health/live", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"live": s.Live()}) })
	r.GET("/v2/health/ready", func(c *gin.Context) {
		code := http.StatusOK
		if !s.Ready() {
			code = http.StatusServiceUnavailable
		}
		c.JSON(code, gin.H{"ready": s.Ready()})
	})
	r.GET("/v2", func(c *gin.Context) { c.JSON(http.StatusOK, s.Metadata()) })
	r.GET("/v2/models", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"models": s.names()}) })
	r.GET("/v2/models/stats", func(c *gin.Context) { s.stats(c, "") })
	for _, prefix := range []string{"/v2/models/:name", "/v2/models/:name/versions/:version"} {
		r.GET(prefix, s.modelMetadata)
		r.GET(prefix+"/ready", s.modelReady)
		r.GET(prefix+"/config", s.modelConfig)
		r.GET(prefix+"/stats", func(c *gin.Context) { s.stats(c, c.Param("name")) })
		r.POST(prefix+"/infer", s.infer)
		r.POST(prefix+"/generate", func(c *gin.Context) { s.generate(c, false) })
		r.POST(prefix+"/generate_stream", func(c *gin.Context) { s.generate(c, true) })
	}
	repository(r)
	r.GET("/v2/openapi.yaml", func(c *gin.Context) { c.Data(http.StatusOK, "application/yaml", api.OpenAPI) })
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	notFound(r)
	return r
}

// Metadata describes the server for GET /v2.
func (s *Server) Metadata() api.ServerMetadata {
	return api.ServerMetadata{Name: "rnnserve", Version: Version,
		Extensions: []string{"binary_tensor_data", "classification", "sequence", "statistics", "model_repository",
			"model_configuration", "generate", "rnn_traffic"}}
}

// maxHeaderFields bounds the header fields of a REST request (Apache's
// LimitRequestFields is 100).
const maxHeaderFields = 256

// headerFields is the number of header fields of h.
func headerFields(h http.Header) int {
	n := 0
	for _, v := range h {
		n += len(v)
	}
	return n
}

// maxErrorBytes bounds an error message in a response.
const maxErrorBytes = 512

// fail answers with err's status and a JSON error body. What is left of
// a body within the body limit is read and dropped first (see drainBody),
// so the answer reaches a client still sending it.
func (s *Server) fail(c *gin.Context, err error) {
	code := StatusOf(err)
	if code == http.StatusServiceUnavailable {
		c.Header("Retry-After", "1")
	}
	s.writeDeadline(c.Writer)
	if code != http.StatusRequestEntityTooLarge && c.Request.ContentLength <= s.opts.MaxBodyBytes {
		drainBody(c.Request, s.opts.MaxBodyBytes)
	}
	c.AbortWithStatusJSON(code, api.Error{Error: errorText(err)})
}

// readJSON decodes a size-limited (and maybe compressed) JSON body into
// v, strictly; an empty body leaves v as it is when empty is allowed. The
// caller calls done, which gives back the body's memory budget, once it
// no longer holds what it decoded (at the end of the request).
func (s *Server) readJSON(c *gin.Context, v any, emptyOK bool) (done func(), err error) {
	done = func() {}
	if emptyOK && c.Request.ContentLength == 0 {
		return done, nil
	}
	rd, res, err := wire.Body(c.Writer, c.Request, s.budget, s.opts.MaxBodyBytes, s.opts.MinBodyRate)
	if err != nil {
		return res.Release, err
	}
	err = wire.DecodeJSON(rd, v, s.opts.MaxBodyBytes, nil)
	if emptyOK && errors.Is(err, wire.ErrEmptyBody) {
		return res.Release, nil
	}
	return res.Release, err
}

func (s *Server) modelMetadata(c *gin.Context) {
	m, err := s.lookup(c.Param("name"), c.Param("version"))
	if err != nil {
		s.fail(c, err)
		return
	}
	meta, _ := m.base().description()
	c.JSON(http.StatusOK, meta)
}

func (s *Server) modelReady(c *gin.Context) {
	m, err := s.lookup(c.Param("name"), c.Param("version"))
	if err != nil {
		s.fail(c, err)
		return
	}
	code := http.StatusOK
	if !s.serving() {
		code = http.StatusServiceUnavailable
	}
	c.JSON(code, gin.H{"name": m.base().name, "ready": s.serving()})
}

func (s *Server) modelConfig(c *gin.Context) {
	m, err := s.lookup(c.Param("name"), c.Param("version"))
	if err != nil {
		s.fail(c, err)
		return
	}
	_, config := m.base().description()
	c.JSON(http.StatusOK, config)
}

func (s *Server) stats(c *gin.Context, name string) {
	st, err := s.Statistics(name, c.Param("version"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

// infer decodes an infer request (JSON, or JSON and binary tensor data),
// runs it and writes the response.
func (s *Server) infer(c *gin.Context) {
	received := time.Now()
	r := &Request{Model: c.Param("name"), Version: c.Param("version"), Protocol: protocolREST, Received: received}
	release := func() {}
	defer func() { release() }()
	id, err := sequenceIDFrom(c.Request.Header.Values(SequenceHeader), sequenceHeaderName)
	if err == nil {
		err = withSequenceID(r, id, sequenceHeaderName, func() (err error) {
			release, err = s.decodeInferBody(c, r)
			return err
		})
	}
	if err != nil {
		s.Rejected(r.Model, c.Param("version"), "infer", protocolREST, received, err)
		s.fail(c, err)
		return
	}
	resp, err := s.Infer(c.Request.Context(), r)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeDeadline(c.Writer)
	connlimit.Coalesce(c.Request) // the response in one write system call
	s.responses.WriteInfer(c.Writer, c.Request, resp)
}

// decodeInferBody reads an infer request body into r; done gives back its
// memory budget (see readJSON).
func (s *Server) decodeInferBody(c *gin.Context, r *Request) (done func(), err error) {
	hdrLen := int64(-1)
	if n := len(c.Request.Header.Values(wire.HeaderLength)); n > 1 {
		return func() {}, infer.BadRequest("%s given %d times: give it once", wire.HeaderLength, n)
	}
	if h := c.GetHeader(wire.HeaderLength); h != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64)
		if err != nil || n < 0 {
			return func() {}, infer.BadRequest("%s %q is not a byte count", wire.HeaderLength, infer.Clip(h))
		}
		hdrLen = n
	}
	rd, res, err := wire.Body(c.Writer, c.Request, s.budget, s.opts.MaxBodyBytes, s.opts.MinBodyRate)
	if err != nil {
		return res.Release, err
	}
	r.Charge = res.Grow // the response's bytes too
	return res.Release, wire.DecodeInfer(rd, hdrLen, s.opts.MaxBodyBytes, res.Grow, r)
}

// generate answers generate (one JSON object) and generate_stream
// (Server-Sent Events); either streams NDJSON when the client accepts
// application/x-ndjson.
func (s *Server) generate(c *gin.Context, stream bool) {
	received := time.Now()
	g := &GenerateRequest{Model: c.Param("name"), Version: c.Param("version"), Protocol: protocolREST, Received: received}
	var w api.GenerateRequest
	release := func() {}
	defer func() { release() }()
	err := noSequenceID(c.Request.Header.Values(SequenceHeader), sequenceHeaderName)
	if err == nil {
		release, err = s.readJSON(c, &w, false)
	}
	if err == nil {
		err = wire.GenerateFromJSON(&w, g, s.opts.MaxSteps)
	}
	if err != nil {
		s.Rejected(g.Model, g.Version, "generate", protocolREST, received, err)
		s.fail(c, err)
		return
	}
	// The generation's memory is the handler's to hold until its answer is
	// written (a whole answer is written after Generate returns).
	share := s.budget.Reserve(c.Request.Context())
	defer share.Release()
	g.Charge = s.generationCharge(share)
	var out generateWriter
	// Each token's write gets write_timeout while the model makes them;
	// once it has made them all, the rest get one write_timeout together.
	generated := false
	deadline := func() {
		if !generated {
			s.writeDeadline(c.Writer)
		}
	}
	g.Generated = func() {
		s.writeDeadline(c.Writer)
		generated = true
	}
	switch {
	case strings.Contains(c.GetHeader("Accept"), "application/x-ndjson"):
		out = &ndjsonWriter{c: c, deadline: deadline}
	case stream:
		out = &sseWriter{c: c, model: g.Model, deadline: deadline}
	default:
		out = &wholeWriter{c: c, rs: &s.responses, model: g.Model, deadline: deadline}
	}
	res, err := s.Generate(c.Request.Context(), g, out.token)
	switch {
	case err != nil && out.cut(err):
	case err != nil:
		s.fail(c, err)
	case res.Err != nil && out.cut(res.Err):
	case res.Err != nil:
		s.fail(c, res.Err)
	default:
		out.done(res)
	}
}

// generateWriter writes a generation's answer as its tokens come.
type generateWriter interface {
	token(GenerateToken) error
	done(GenerateResult)
	// cut ends a stream already started with a final error line and
	// reports true; false when nothing was written yet (the caller answers
	// with an error status instead).
	cut(err error) bool
}

// wholeWriter gathers the tokens into one JSON response (generate).
type wholeWriter struct {
	c        *gin.Context
	rs       *wire.Responses
	model    string
	deadline func() // sets the write deadline
	resp     api.GenerateResponse
	text     []byte
}

func (w *wholeWriter) token(t GenerateToken) error {
	w.text = append(w.text, t.Text...)
	w.resp.RNNServe.Tokens = append(w.resp.RNNServe.Tokens, t.Token)
	w.resp.RNNServe.LogProbs = append(w.resp.RNNServe.LogProbs, t.LogProb)
	return w.c.Request.Context().Err()
}

// cut is false: the whole response is written at the end, so an error
// still gets its own status.
func (w *wholeWriter) cut(error) bool { return false }

func (w *wholeWriter) done(res GenerateResult) {
	w.resp.ModelName, w.resp.ModelVersion, w.resp.TextOutput = w.model, version, string(w.text)
	w.resp.RNNServe.FinishReason = res.Reason
	w.deadline()
	w.rs.WriteJSON(w.c.Writer, w.c.Request, http.StatusOK, &w.resp)
}

// sseWriter streams each token as a Server-Sent Event (generate_stream):
// "data: " and a generate response object holding that token, then a last
// event with the finish reason.
type sseWriter struct {
	c        *gin.Context
	model    string
	deadline func() // sets the write deadline, before each event
	started  bool
}

func (w *sseWriter) start() {
	if !w.started {
		h := w.c.Writer.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		w.c.Status(http.StatusOK)
		w.started = true
	}
}

func (w *sseWriter) event(v any) error {
	w.deadline()
	w.start()
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w.c.Writer)
	bw.WriteString("data: ")
	bw.Write(data)
	bw.WriteString("\n\n")
	if err := bw.Flush(); err != nil {
		return err
	}
	w.c.Writer.Flush()
	return nil
}

func (w *sseWriter) token(t GenerateToken) error {
	return w.event(api.GenerateResponse{ModelName: w.model, ModelVersion: version, TextOutput: string(t.Text),
		RNNServe: api.GenerateRNNServe{Tokens: []int64{t.Token}, LogProbs: []float64{t.LogProb}}})
}

// cut ends the stream with an event holding Triton's error object,
// {"error": "..."}, as its generate extension has a failed response.
func (w *sseWriter) cut(err error) bool {
	if !w.started {
		return false
	}
	w.event(api.Error{Error: errorText(err)})
	return true
}

func (w *sseWriter) done(res GenerateResult) {
	w.event(api.GenerateResponse{ModelName: w.model, ModelVersion: version,
		RNNServe: api.GenerateRNNServe{Tokens: []int64{}, LogProbs: []float64{}, FinishReason: res.Reason}})
}

// ndjsonWriter streams one JSON object per line: a line per token, then
// {"done": true, ...} (application/x-ndjson, rnnserve's own stream).
type ndjsonWriter struct {
	c        *gin.Context
	deadline func() // sets the write deadline, before each line
	started  bool
	tokens   int // tokens written
}

func (w *ndjsonWriter) line(v any) error {
	w.deadline()
	if !w.started {
		w.c.Header("Content-Type", "application/x-ndjson")
		w.c.Status(http.StatusOK)
		w.started = true
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := w.c.Writer.Write(append(data, '\n')); err != nil {
		return err
	}
	w.c.Writer.Flush()
	return nil
}

func (w *ndjsonWriter) token(t GenerateToken) error {
	w.tokens++
	return w.line(api.GenerateEvent{Index: t.Index, Token: t.Token, Text: string(t.Text), LogProb: t.LogProb})
}

func (w *ndjsonWriter) done(res GenerateResult) {
	w.line(api.GenerateDone{Done: true, Tokens: res.Tokens, Reason: res.Reason})
}

// cut ends the stream with a last line that has "error" and
// finish_reason "error".
func (w *ndjsonWriter) cut(err error) bool {
	if !w.started {
		return false
	}
	w.line(api.GenerateDone{Done: true, Tokens: w.tokens, Reason: "error", Error: errorText(err)})
	return true
}

// controlCall is the repository API call c, for authorize.
func restControlCall(c *gin.Context, op string, management bool) controlCall {
	return controlCall{op: op, protocol: protocolREST, viaSecond: management,
		bearer: c.GetHeader("Authorization"), remote: c.Request.RemoteAddr}
}

// refuse answers a refused repository API call: 401 carries
// WWW-Authenticate, as RFC 6750 has it.
func (s *Server) refuse(c *gin.Context, err error) {
	if errors.Is(err, ErrUnauthenticated) {
		v := `Bearer realm="rnnserve model repository"`
		if c.GetHeader("Authorization") != "" {
			v += `, error="invalid_token"`
		}
		c.Header("WWW-Authenticate", v)
	}
	s.fail(c, err)
}

func (s *Server) repositoryIndex(c *gin.Context, management bool) {
	if err := s.authorize(restControlCall(c, "index", management)); err != nil {
		s.refuse(c, err)
		return
	}
	var req api.RepositoryIndexRequest
	done, err := s.readJSON(c, &req, true)
	defer done()
	if err != nil {
		s.fail(c, err)
		return
	}
	if req.RepositoryName != "" && req.RepositoryName != "models" {
		s.fail(c, fmt.Errorf("%w: repository %q (the server has one, \"models\")", ErrBadRequest, infer.Clip(req.RepositoryName)))
		return
	}
	idx, err := s.RepositoryIndex(req.Ready)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeDeadline(c.Writer) // the repository's scan may be slow
	c.JSON(http.StatusOK, idx)
}

func (s *Server) repositoryLoad(c *gin.Context, management bool) {
	if err := s.authorize(restControlCall(c, "load", management)); err != nil {
		s.refuse(c, err)
		return
	}
	var req api.RepositoryLoadRequest
	done, err := s.readJSON(c, &req, true)
	defer done()
	if err != nil {
		s.fail(c, err)
		return
	}
	if len(req.Parameters) > 0 {
		s.fail(c, infer.BadRequest("load parameters (config override, file upload) are not supported: the model loads from the repository as it is"))
		return
	}
	if err := s.Load(c.Param("name")); err != nil {
		s.fail(c, err)
		return
	}
	s.writeDeadline(c.Writer) // a load may take longer than the write timeout
	c.JSON(http.StatusOK, gin.H{})
}

func (s *Server) repositoryUnload(c *gin.Context, management bool) {
	if err := s.authorize(restControlCall(c, "unload", management)); err != nil {
		s.refuse(c, err)
		return
	}
	var req api.RepositoryLoadRequest
	done, err := s.readJSON(c, &req, true)
	defer done()
	if err != nil {
		s.fail(c, err)
		return
	}
	p, err := wire.ParamsOf(req.Parameters)
	if err == nil {
		if _, _, err = p.Bool("unload_dependents"); err == nil {
			err = p.Only("unload", "unload_dependents")
		}
	}
	if err == nil {
		err = s.Unload(c.Param("name"))
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{})
}
