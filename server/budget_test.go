package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"rnnserve/server/internal/limits"
	"rnnserve/server/internal/wire"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// paddedInfer is a valid infer request for the test repository's lm,
// padded with JSON white space inside the object to size bytes.
func paddedInfer(size int) []byte {
	b := []byte(`{"inputs": [` + tokensJSON([][]int64{{1, 2, 3}}) + `], "outputs": [{"name": "top_k", "parameters": {"last_step": true}}]`)
	for len(b) < size-1 {
		b = append(b, ' ')
	}
	return append(b[:size-1], '}')
}

// budgetClient posts bodies and reports whether each reused a connection.
type budgetClient struct {
	t  *testing.T
	hc *http.Client
}

func newBudgetClient(t *testing.T) *budgetClient {
	return &budgetClient{t: t, hc: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
}

// post sends body (chunked when chunked is set, with Content-Encoding enc
// when not empty) and returns the status, the body and whether the
// request went on a reused connection.
func (c *budgetClient) post(url string, body []byte, chunked bool, enc string) (int, string, http.Header, bool) {
	c.t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // hides the length: sent chunked
	}
	var reused bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("POST %d bytes (chunked %v, %q): %v", len(body), chunked, enc, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, reused
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// TestBudget: a request finds its body's bytes in the budget or waits for
// them, at most the budget wait, and is then refused with 503 and
// Retry-After, on a connection that stays usable; Content-Length is taken
// before reading, chunked and inflated bytes as they stream, decoded
// tensors beside them; every byte comes back.
func TestBudget(t *testing.T) {
	const room = 8 << 10
	s, hs := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = 64 << 10
		o.Budget = BudgetOptions{Bytes: 160 << 10, Wait: 150 * time.Millisecond}
	}, true)
	url := hs.URL + "/v2/models/lm/infer"
	c := newBudgetClient(t)
	body := paddedInfer(32 << 10)
	plain := paddedInfer(60 << 10) // 60 KiB inflated, a few hundred bytes gzipped
	zipped := gzipped(plain)

	// Warm the connection, and check every way of sending passes with room.
	for _, v := range []struct {
		body    []byte
		chunked bool
		enc     string
	}{{body, false, ""}, {body, true, ""}, {zipped, false, "gzip"}, {zipped, true, "gzip"}} {
		if code, b, _, _ := c.post(url, v.body, v.chunked, v.enc); code != http.StatusOK {
			t.Fatalf("with room (chunked %v, %q): %d %s", v.chunked, v.enc, code, b)
		}
	}

	hold := s.budget.Reserve(context.Background())
	if err := hold.Grow(s.budget.Size() - room); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		what    string
		body    []byte
		chunked bool
		enc     string
	}{
		{"Content-Length over the room", body, false, ""},
		{"chunked body over the room", body, true, ""},
		{"gzip body whose inflated bytes are over the room", zipped, false, "gzip"},
	} {
		start := time.Now()
		code, b, h, reused := c.post(url, v.body, v.chunked, v.enc)
		took := time.Since(start)
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(b, "memory budget") {
			t.Errorf("%s: %d %s (Retry-After %q), want 503 naming the budget", v.what, code, b, h.Get("Retry-After"))
		}
		if took < 140*time.Millisecond {
			t.Errorf("%s: refused after %v, want after the %v wait", v.what, took, s.budget.Wait())
		}
		if !reused {
			t.Errorf("%s: not on the warm connection", v.what)
		}
		// The connection stays open: the next request reuses it.
		if code, _, _, reused := c.post(hs.URL+"/v2/models/lm/infer", paddedInfer(1<<10), false, ""); code != http.StatusOK || !reused {
			t.Errorf("%s: the next small request: %d, reused %v; want 200 on the same connection", v.what, code, reused)
		}
	}

	// A request that waits gets in when room frees within the wait.
	go func() {
		time.Sleep(40 * time.Millisecond)
		hold.Release()
	}()
	if code, b, _, _ := c.post(url, body, false, ""); code != http.StatusOK {
		t.Errorf("room freed during the wait: %d %s", code, b)
	}

	// Decoded tensors count too, and may not exceed twice the body limit.
	ones := `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 25000], "data": [` + strings.TrimSuffix(strings.Repeat("1,", 25000), ",") + `]}]}`
	if code, b, _, _ := c.post(url, []byte(ones), false, ""); code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "decoded tensors") {
		t.Errorf("25000 JSON ones (200 KB as int64): %d %s, want 413", code, b)
	}
	hdr := `{"inputs": [{"name": "tokens", "datatype": "INT8", "shape": [1, 60000], "parameters": {"binary_data_size": 60000}}]}`
	bin, l := binaryBody(hdr, make([]byte, 60000))
	if code, b, _ := send(t, url, bin, wire.HeaderLength, l); code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "decoded tensors") {
		t.Errorf("60000 binary INT8 (480 KB as int64): %d %s, want 413", code, b)
	}

	// Everything came back.
	if got := testutil.ToFloat64(s.metrics.budgetUsed); got != 0 {
		t.Errorf("budget in use after the requests: %v bytes", got)
	}
	if used := s.budget.InUse(); used != 0 {
		t.Errorf("%d bytes of the budget in use after the requests", used)
	}
	if got := testutil.ToFloat64(s.metrics.budgetRefused); got != 3 {
		t.Errorf("rnnserve_request_budget_refused_total = %v, want 3", got)
	}
}

// TestTooLargeBeforeReading: a Content-Length over the limit is answered
// 413 at once, without the server waiting for a byte of the body.
func TestTooLargeBeforeReading(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a 100 MB Content-Length: %v", err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge || time.Since(start) > 2*time.Second || !resp.Close {
		t.Errorf("%d after %v (close %v), want 413 at once, closing the connection", resp.StatusCode, time.Since(start), resp.Close)
	}
}

// TestConnectionCap: at the cap a new connection is accepted only once
// another closes; the gauge follows.
func TestConnectionCap(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.MaxConnections = 2 }, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(s.Listener(ln))
	defer hs.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ask := func(c net.Conn, wait time.Duration) error {
		fmt.Fprintf(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	a, b := dial(), dial()
	for _, c := range []net.Conn{a, b} {
		if err := ask(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(s.metrics.connections); got != 2 {
		t.Errorf("open connections %v, want 2", got)
	}
	third := dial()
	defer third.Close()
	if err := ask(third, 300*time.Millisecond); err == nil {
		t.Fatal("a third connection was served beyond the cap of 2")
	}
	a.Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatalf("the third connection after one closed: %v", err)
	}
	resp.Body.Close()
	b.Close()
}

// TestSilentBodies: a body is charged as it arrives, so connections that
// announce large bodies and send nothing hold one budget step each, not
// their Content-Length, and other requests go on being served; a body
// that stalls under the minimum rate is answered 408 and gives its share
// back.
func TestSilentBodies(t *testing.T) {
	silent := func(t *testing.T, hs string, n int) []net.Conn {
		var conns []net.Conn
		for range n {
			conn, err := net.Dial("tcp", strings.TrimPrefix(hs, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			fmt.Fprintf(conn, "POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{", 1<<20)
			conns = append(conns, conn)
		}
		return conns
	}
	options := func(rate int64) func(*Options) {
		return func(o *Options) {
			o.MaxBodyBytes = 1 << 20
			o.Budget = BudgetOptions{Bytes: 1 << 20, Wait: 100 * time.Millisecond}
			o.MinBodyRate = rate
		}
	}
	// Eight announced MiB against a budget of one, at a rate so low that
	// none is cut: each holds a step, and a request beside them is served.
	s, hs := newTestServer(t, options(1), true)
	silent(t, hs.URL, 8)
	waitFor(t, "eight silent bodies to hold a step each", func() bool { return s.budget.InUse() == 8*limits.Chunk })
	c := newBudgetClient(t)
	if code, b, _, _ := c.post(hs.URL+"/v2/models/lm/infer", paddedInfer(100<<10), false, ""); code != http.StatusOK {
		t.Errorf("a 100 KiB request beside the silent ones: %d %s", code, b)
	}
	if used := s.budget.InUse(); used != 8*limits.Chunk {
		t.Errorf("the silent bodies hold %d bytes, want %d", used, 8*limits.Chunk)
	}
	// Under the minimum rate they are answered 408 and their share is
	// back.
	s, hs = newTestServer(t, options(256<<10), true) // the first 64 KiB within 250ms
	for _, conn := range silent(t, hs.URL, 2) {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("a stalled body got no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "min_body_rate") {
			t.Errorf("a stalled body: %d %s, want 408 naming min_body_rate", resp.StatusCode, b)
		}
	}
	waitFor(t, "the budget to come back", func() bool { return s.budget.InUse() == 0 })
}

// TestGeneratePromptBounded: a generate prompt past max_steps is refused
// before it is turned into ids, and stop strings by the bound on arrays
// besides tensor data before they are decoded: a 4 MiB body of
// prompt_tokens "0," (2M ids: 16 MiB as int64s, 120 MiB allocated while
// the slice grew), of text_input (4M bytes, 32 MiB as ids) or of stop
// strings `"",` (2M of them, two string headers each: 450 MiB allocated)
// takes what the JSON decoder takes to read it (its buffer grows by
// doubling: about four times the body) and a copy of the text, not tens
// of bytes for each few bytes of it.
func TestGeneratePromptBounded(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	const n = 2 << 20
	tokens := make([]byte, 0, 2*n+32)
	tokens = append(tokens, `{"prompt_tokens": [`...)
	for i := range n {
		if i > 0 {
			tokens = append(tokens, ',')
		}
		tokens = append(tokens, '0')
	}
	tokens = append(tokens, "]}"...)
	text := []byte(`{"text_input": "` + strings.Repeat("a", 2*n) + `"}`)
	stop := []byte(`{"text_input": "a", "stop": [""` + strings.Repeat(`,""`, n-1) + `]}`)
	send(t, hs.URL+"/v2/models/lm/generate", []byte(`{"prompt_tokens": [1], "max_tokens": 1}`)) // warm the pools
	for _, c := range []struct {
		body []byte
		want string
	}{{tokens, "exceeds max_steps"}, {text, "exceeds max_steps"}, {stop, "array elements besides tensor data"}} {
		body := c.body
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, resp, _ := send(t, hs.URL+"/v2/models/lm/generate", body)
		runtime.ReadMemStats(&after)
		if code != 400 || !strings.Contains(string(resp), c.want) {
			t.Errorf("%.20s...: %d %.200s, want 400 with %q", body, code, resp, c.want)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 8*uint64(len(body)) {
			t.Errorf("%.20s...: a %d-byte body allocated %d bytes", body, len(body), got)
		}
	}
}

// TestStructureBounded: the parts of a body other than tensor data
// (inputs, outputs, shapes, parameters) are bounded in count before the
// JSON decoder builds them, so that a body of `{},` or `1,` (a tensor
// or a dimension of 88 or 8 bytes each for 3 or 2 of text, more while the
// slices grow) is refused taking no more than the decoder's own buffer
// for it (about four times the body).
func TestStructureBounded(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	const n = 1 << 20
	tok := `{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [1]}`
	many := func(elem string) string { return elem + strings.Repeat(","+elem, n-1) }
	keys := make([]string, n/4)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"k%d": 1`, i)
	}
	send(t, hs.URL+"/v2/models/lm/infer", []byte(`{"inputs": [`+tok+`]}`)) // warm the pools
	for _, c := range []struct{ what, body string }{
		{"inputs of {}", `{"inputs": [` + many("{}") + `]}`},
		{"inputs of 1", `{"inputs": [` + many("1") + `]}`},
		{"outputs of {}", `{"inputs": [` + tok + `], "outputs": [` + many("{}") + `]}`},
		{"a long shape", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [` + many("1") + `], "data": [1]}]}`},
		{"many parameters", `{"inputs": [` + tok + `], "parameters": {` + strings.Join(keys, ",") + `}}`},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, resp, _ := send(t, hs.URL+"/v2/models/lm/infer", []byte(c.body))
		runtime.ReadMemStats(&after)
		if code != 400 {
			t.Errorf("%s: %d %.200s, want 400", c.what, code, resp)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 8*uint64(len(c.body)) {
			t.Errorf("%s: a %d-byte body allocated %d bytes (%s)", c.what, len(c.body), got, resp)
		}
	}
	// Tensor data is not bounded so: 2 rows of 4096 steps, nested.
	row := "[0" + strings.Repeat(",0", 4095) + "]"
	body := `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2, 4096], "data": [` + row + "," + row + `]}], "outputs": [{"name": "hidden"}]}`
	if code, resp, _ := send(t, hs.URL+"/v2/models/lm/infer", []byte(body)); code != 200 {
		t.Errorf("8192 tokens: %d %.200s", code, resp)
	}
}

// TestGenerationCharged: a generation takes what it holds while it lasts
// (generationBytes: its tokens twice and the sampler's rows) from the
// memory budget before its first step, on every way in: one larger than
// the whole budget is a 400, one that finds no room a 503 after the
// budget's wait, one with room is served with its bytes held while its
// tokens come, and every byte comes back.
func TestGenerationCharged(t *testing.T) {
	s, hs := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = 64 << 10
		o.MaxGenerateTokens = 1 << 16
		o.Budget = BudgetOptions{Bytes: 1 << 20, Wait: 50 * time.Millisecond}
	}, true)
	url := hs.URL + "/v2/models/lm/generate"
	if need := generationBytes(2, 1<<16, 0); need <= s.budget.Size() {
		t.Fatalf("a generation of 65536 tokens takes %d bytes: not over the %d-byte budget", need, s.budget.Size())
	}
	code, b, _ := send(t, url, []byte(`{"prompt_tokens": [1, 2], "max_tokens": 65536}`))
	if code != http.StatusBadRequest || !strings.Contains(string(b), "whole memory budget") {
		t.Errorf("65536 tokens: %d %s, want 400 naming the budget", code, b)
	}
	hold := s.budget.Reserve(context.Background())
	if err := hold.Grow(s.budget.Size() - 64<<10); err != nil {
		t.Fatal(err)
	}
	code, b, h := send(t, url, []byte(`{"prompt_tokens": [1, 2], "max_tokens": 2000}`)) // 196 KB
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(b), "memory budget") {
		t.Errorf("2000 tokens with 64 KiB free: %d %s, want 503 naming the budget", code, b)
	}
	hold.Release()
	if code, b, _ := send(t, url, []byte(`{"prompt_tokens": [1, 2], "max_tokens": 2000}`)); code != http.StatusOK {
		t.Errorf("2000 tokens with room: %d %s, want 200", code, b)
	}

	// Through the API, with no share of its own: held while it runs.
	g := &GenerateRequest{Model: "lm", PromptTokens: []int64{1, 2}, MaxTokens: 50}
	var held int64
	res, err := s.Generate(context.Background(), g, func(GenerateToken) error {
		held = max(held, s.budget.InUse())
		return nil
	})
	if err != nil || res.Tokens != 50 {
		t.Fatalf("API generation: %+v, %v", res, err)
	}
	m, _ := s.lookup("lm", "")
	if want := generationBytes(2, 50, m.(*seqModel).net.Vocab); held < want {
		t.Errorf("the budget held %d bytes while the generation ran, want at least its %d", held, want)
	}
	_, err = s.Generate(context.Background(), &GenerateRequest{Model: "lm", PromptTokens: []int64{1}, MaxTokens: 1 << 16},
		func(GenerateToken) error { return nil })
	if !errors.Is(err, ErrBadRequest) {
		t.Errorf("API generation of 65536 tokens: %v, want ErrBadRequest", err)
	}
	// A handler gives its share back just after its answer is written.
	for end := time.Now().Add(5 * time.Second); s.budget.InUse() != 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := s.budget.InUse(); n != 0 {
		t.Errorf("%d bytes still held after every generation ended", n)
	}
}
