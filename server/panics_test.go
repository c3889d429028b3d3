package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// logBuffer collects a server's log for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// panicBatch is the injected fault: a batch whose kernel panics at its
// step number at (counting from 1) once armed, and runs normally
// otherwise.
type panicBatch[W any] struct {
	batch[W]
	armed *atomic.Int64 // steps left before the panic; <= 0: disarmed
}

func (b panicBatch[W]) step() []finishedJob[W] {
	if b.armed.Load() > 0 && b.armed.Add(-1) == 0 {
		var kernel []float32
		_ = kernel[len(kernel)+3] // a kernel indexing out of range
	}
	return b.batch.step()
}

// armLanes wraps every lane's batch of a (not yet started) model's
// batcher in a panicBatch sharing one trigger.
func armLanes[W any](b *batcher[W]) *atomic.Int64 {
	armed := &atomic.Int64{}
	for _, l := range b.lanes {
		l.batch = panicBatch[W]{l.batch, armed}
	}
	return armed
}

// newPanicServer is a test server that logs into the returned buffer.
func newPanicServer(t *testing.T, mutate func(*Options)) (*Server, string, *logBuffer) {
	t.Helper()
	entries, err := LoadRepository(testRepo)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.CacheBytes, o.TrafficSteps = 1<<20, 10
	if mutate != nil {
		mutate(&o)
	}
	deps := testDeps(t, o)
	logs := &logBuffer{}
	deps.Log = slog.New(slog.NewTextHandler(logs, nil))
	s, err := New(entries, o, deps)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.table() {
		if sm, ok := m.(*seqModel); ok {
			sm.alwaysStep = true
		}
	}
	srv := newHTTPTest(t, s)
	return s, srv, logs
}

// newHTTPTest serves s over HTTP until the test ends.
func newHTTPTest(t *testing.T, s *Server) string {
	t.Helper()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Stop(context.Background())
	})
	return hs.URL
}

// TestLanePanic injects a panicking kernel into a sequence model's lane:
// the requests of that batch fail with 500, the panic is logged with its
// stack and counted, the lane gets a new batch and the next requests are
// answered exactly as before the panic. A generation the panic cuts after
// its first tokens ends its stream with an error event.
func TestLanePanic(t *testing.T) {
	s, url, logs := newPanicServer(t, func(o *Options) {
		o.Batching.Workers = 1
		o.Batching.MaxQueueDelay = 30 * time.Millisecond // the two requests share one batch
	})
	m := seqOf(t, s, "lm")
	armed := armLanes(m.batch)
	s.Start()
	body := `{"inputs": [` + tokensJSON([][]int64{{5, 6, 7, 8}}) + `], "outputs": [{"name": "hidden"}]}`
	code, before, _ := post(t, url+"/v2/models/lm/infer", body)
	if code != http.StatusOK {
		t.Fatalf("before the panic: %d %s", code, before)
	}

	armed.Store(2)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	msgs := make([]string, 2)
	for i := range codes {
		wg.Go(func() {
			var b []byte
			codes[i], b, _ = post(t, url+"/v2/models/lm/infer", body)
			msgs[i] = string(b)
		})
	}
	wg.Wait()
	for i := range codes {
		if codes[i] != http.StatusInternalServerError || !strings.Contains(msgs[i], "internal error") || !strings.Contains(msgs[i], "batch lane") {
			t.Errorf("request %d in the panicking batch: %d %s, want 500 naming the lane", i, codes[i], msgs[i])
		}
	}
	log := logs.String()
	if !strings.Contains(log, "panic contained") || !strings.Contains(log, "index out of range") || !strings.Contains(log, "panicBatch") {
		t.Errorf("the log lacks the panic and its stack:\n%s", log)
	}
	if got := testutil.ToFloat64(m.metrics.panics); got != 1 {
		t.Errorf("rnnserve_panics_total{model=lm} = %v, want 1", got)
	}
	for range 3 {
		code, after, _ := post(t, url+"/v2/models/lm/infer", body)
		if code != http.StatusOK || !bytes.Equal(after, before) {
			t.Fatalf("after the panic: %d %s, want 200 and %s", code, after, before)
		}
	}
	if _, ok := m.batch.lanes[0].batch.(panicBatch[*seqWork]); ok {
		t.Error("the lane kept the batch that panicked")
	}

	// A stream cut by a panic after its first tokens.
	s2, url2, _ := newPanicServer(t, func(o *Options) { o.Batching.Workers = 1 })
	armed2 := armLanes(seqOf(t, s2, "lm").batch)
	s2.Start()
	armed2.Store(10)
	resp, err := http.Post(url2+"/v2/models/lm/generate_stream", "application/json", strings.NewReader(`{"text_input": "ab", "parameters": {"max_tokens": 50}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	var e api.Error
	if resp.StatusCode != http.StatusOK || len(lines) < 2 || json.Unmarshal([]byte(strings.TrimPrefix(lines[len(lines)-1], "data: ")), &e) != nil || !strings.Contains(e.Error, "internal error") {
		t.Errorf("stream cut by a panic: %d, %d events, last %q; want tokens then an error event", resp.StatusCode, len(lines), lines[len(lines)-1])
	}
}

// TestTreeLanePanic: the same for the tree model's batcher.
func TestTreeLanePanic(t *testing.T) {
	s, hs := newTreeServerStopped(t)
	tm := s.table()["treelstm"].(*treeModel)
	tm.alwaysBatch = true // a lone request would run outside the lane
	armed := armLanes(tm.batch)
	s.Start()
	url := hs + "/v2/models/treelstm/infer"
	req := treeRequest([]string{"((3) ((+) (4)))", "((1) ((*) (2)))"}, "", "probs")
	code, before, _ := post(t, url, req)
	if code != http.StatusOK {
		t.Fatalf("before: %d %s", code, before)
	}
	armed.Store(1)
	if code, b, _ := post(t, url, req); code != http.StatusInternalServerError || !strings.Contains(string(b), "batch lane") {
		t.Errorf("panicking tree plan: %d %s, want 500", code, b)
	}
	if code, after, _ := post(t, url, req); code != http.StatusOK || !bytes.Equal(after, before) {
		t.Errorf("after the panic: %d %s, want %s", code, after, before)
	}
	if got := testutil.ToFloat64(tm.metrics.panics); got != 1 {
		t.Errorf("panics counted: %v, want 1", got)
	}
}

// newTreeServerStopped is newTreeServer without Start, for a test to
// inject faults first.
func newTreeServerStopped(t *testing.T) (*Server, string) {
	t.Helper()
	entries, err := LoadRepository(bundled.FS)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Batching.Workers = 2
	s, err := New(entries, o, testDeps(t, o))
	if err != nil {
		t.Fatal(err)
	}
	return s, newHTTPTest(t, s)
}

// poolModel is a model whose inference runs a job on a worker pool in the
// request's own goroutine, as a whole-request P plan does, with a part
// that panics on a helper worker; its generation panics in the caller
// after its first token.
type poolModel struct {
	modelBase
	pool *schedule.Pool
}

func (m *poolModel) base() *modelBase { return &m.modelBase }

func (m *poolModel) infer(ctx context.Context, r *Request, t *timing) ([]OutputTensor, int, error) {
	m.pool.Phases(2, func(ph, w int) {
		if ph == 1 && w == 1 {
			panic(errors.New("kernel on worker 1 failed"))
		}
	})
	return nil, 0, errors.New("unreachable")
}

func (m *poolModel) generate(ctx context.Context, g *GenerateRequest, emit func(GenerateToken) error) (GenerateResult, error) {
	emit(GenerateToken{Token: 1, Text: []byte("x")})
	panic("generation bookkeeping failed")
}

func (m *poolModel) run(stop <-chan struct{}) {}
func (m *poolModel) queued() int              { return 0 }

// TestRequestPanic: a panic in a request's own goroutine, here a pool
// worker's handed over by Phases, answers that request with 500 and
// logs the worker's stack; a stream already started ends with an error
// event; the pool and the server keep serving.
func TestRequestPanic(t *testing.T) {
	s, url, logs := newPanicServer(t, nil)
	pool, err := schedule.NewPool(schedule.PoolOptions{Workers: 2, NoPin: true})
	if err != nil {
		t.Skip("no pool of 2 workers here:", err)
	}
	t.Cleanup(pool.Close)
	pm := &poolModel{pool: pool}
	s.initBase(&pm.modelBase, Entry{Name: "boom"}, s.resident.Add(0))
	table := map[string]model{}
	for k, v := range s.table() {
		table[k] = v
	}
	table["boom"] = pm
	s.models.Store(&table)
	s.Start()
	body := `{"inputs": [` + tokensJSON([][]int64{{1, 2}}) + `]}`
	if code, b, _ := post(t, url+"/v2/models/boom/infer", body); code != http.StatusInternalServerError || !strings.Contains(string(b), "internal error") {
		t.Errorf("pool panic: %d %s, want 500", code, b)
	}
	if log := logs.String(); !strings.Contains(log, "kernel on worker 1 failed") || !strings.Contains(log, "poolModel") {
		t.Errorf("the log lacks the worker's panic and stack:\n%s", log)
	}
	resp, err := http.Post(url+"/v2/models/boom/generate_stream", "application/json", strings.NewReader(`{"text_input": "a"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	data := string(raw)
	if resp.StatusCode != http.StatusOK || !strings.Contains(data, `data: {"error":"internal error`) {
		t.Errorf("stream whose generation panicked: %d %q, want a token then an error event", resp.StatusCode, data)
	}
	// The pool runs the next job; the other models answer.
	var n atomic.Int64
	pool.Phases(3, func(int, int) { n.Add(1) })
	if n.Load() != 6 {
		t.Errorf("pool after the panic ran %d parts, want 6", n.Load())
	}
	if code, b, _ := post(t, url+"/v2/models/lm/infer", body); code != http.StatusOK {
		t.Errorf("lm after the panics: %d %s", code, b)
	}
	if got := testutil.ToFloat64(pm.metrics.panics); got != 2 {
		t.Errorf("panics counted: %v, want 2", got)
	}
}
