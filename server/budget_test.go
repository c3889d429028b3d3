package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
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

	hold := s.budget.reserve(context.Background())
	if err := hold.grow(s.budget.size - room); err != nil {
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
			t.Errorf("%s: refused after %v, want after the %v wait", v.what, took, s.budget.wait)
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
		hold.release()
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
	if code, b, _ := send(t, url, bin, headerLength, l); code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "decoded tensors") {
		t.Errorf("60000 binary INT8 (480 KB as int64): %d %s, want 413", code, b)
	}

	// Everything came back.
	if got := testutil.ToFloat64(s.metrics.budgetUsed); got != 0 {
		t.Errorf("budget in use after the requests: %v bytes", got)
	}
	if used := s.budget.inUse(); used != 0 {
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

// TestBudgetReservation checks the reservation's arithmetic directly: a
// request larger than the whole budget takes it all and no more, waits
// time out with ErrOverBudget, a canceled client gets its cause.
func TestBudgetReservation(t *testing.T) {
	m := newMetrics()
	b := newBudget(BudgetOptions{Bytes: 1000, Wait: 20 * time.Millisecond}, 0, m)
	r := b.reserve(context.Background())
	if err := r.grow(5000); err != nil || r.held != 1000 {
		t.Fatalf("grow past the budget: held %d, %v; want the whole budget", r.held, err)
	}
	r2 := b.reserve(context.Background())
	if err := r2.grow(1); !isOverBudget(err) {
		t.Errorf("a full budget: %v, want ErrOverBudget", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrCut)
	if err := b.reserve(ctx).grow(1); err != ErrCut {
		t.Errorf("a canceled request: %v, want its cause", err)
	}
	r.release()
	r.release() // twice is once
	if err := r2.grow(1000); err != nil {
		t.Errorf("after release: %v", err)
	}
	r2.release()
	if got := testutil.ToFloat64(m.budgetUsed); got != 0 {
		t.Errorf("in use after releases: %v", got)
	}
	var charge []int64
	ch := &charged{r: bytes.NewReader(make([]byte, 3*budgetChunk+5)), res: &reservation{b: newBudget(BudgetOptions{Bytes: 1 << 30, Wait: time.Second}, 0, newMetrics()), ctx: context.Background(), deadline: time.Now().Add(time.Second)}}
	buf := make([]byte, budgetChunk/2)
	for {
		_, err := ch.Read(buf)
		charge = append(charge, ch.res.held)
		if err != nil {
			break
		}
	}
	if last := charge[len(charge)-1]; last != 4*budgetChunk {
		t.Errorf("a %d-byte stream took %d bytes, want it rounded up to %d", 3*budgetChunk+5, last, 4*budgetChunk)
	}
}

func isOverBudget(err error) bool { return errors.Is(err, ErrOverBudget) }

// inUse is the budget's bytes taken.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// TestBudgetQueue: waiters are served first come, first served, except
// that a request already holding bytes goes ahead of new ones; a waiter
// that gives up lets the ones behind it through.
func TestBudgetQueue(t *testing.T) {
	b := newBudget(BudgetOptions{Bytes: 100, Wait: time.Minute}, 0, newMetrics())
	ctx := context.Background()
	if err := b.acquire(ctx, 90, tierNew, true); err != nil {
		t.Fatal(err)
	}
	got := map[string]chan error{}
	queued := func(n int) {
		for {
			b.mu.Lock()
			q := len(b.queue)
			b.mu.Unlock()
			if q == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait := func(name string, ctx context.Context, n int64, admitted bool) {
		done := make(chan error, 1)
		got[name] = done
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		tier := tierNew
		if admitted {
			tier = tierAdmitted
		}
		go func() { done <- b.acquire(ctx, n, tier, true) }()
		queued(q + 1)
	}
	served := func(name string) bool {
		select {
		case err := <-got[name]:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}
	wait("new 30", ctx, 30, false)
	wait("new 20", ctx, 20, false)
	wait("admitted 15", ctx, 15, true)
	b.release(10) // 80 used: room for 15, not for 30
	if !served("admitted 15") || served("new 30") {
		t.Fatal("the admitted request did not go first")
	}
	b.release(65) // 30 used: new 30 and new 20 in, 80 used
	if !served("new 30") || !served("new 20") {
		t.Fatal("the new waiters were not served in turn")
	}
	b.release(0)
	if err := b.acquire(ctx, 15, tierNew, true); err != nil { // 95 used
		t.Fatal(err)
	}
	// 95 used; a new waiter for 50 that gives up lets the 5 behind it in.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	wait("new 50", short, 50, false)
	wait("new 5", ctx, 5, false)
	if served("new 5") {
		t.Fatal("a later waiter passed the head of the queue")
	}
	if err := <-got["new 50"]; err == nil {
		t.Fatal("a wait past its deadline succeeded")
	}
	if !served("new 5") {
		t.Fatal("the waiter behind one that gave up is still waiting")
	}
	if b.inUse() != 100 {
		t.Errorf("in use %d, want 100", b.inUse())
	}
	b.release(100)
	if b.inUse() != 0 {
		t.Errorf("in use %d after releasing all", b.inUse())
	}
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
	waitFor(t, "eight silent bodies to hold a step each", func() bool { return s.budget.inUse() == 8*budgetChunk })
	c := newBudgetClient(t)
	if code, b, _, _ := c.post(hs.URL+"/v2/models/lm/infer", paddedInfer(100<<10), false, ""); code != http.StatusOK {
		t.Errorf("a 100 KiB request beside the silent ones: %d %s", code, b)
	}
	if used := s.budget.inUse(); used != 8*budgetChunk {
		t.Errorf("the silent bodies hold %d bytes, want %d", used, 8*budgetChunk)
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
	waitFor(t, "the budget to come back", func() bool { return s.budget.inUse() == 0 })
}

// TestSmallShare: large requests cannot take the last eighth of the
// budget, so a small request is served at once while large ones hold
// everything else, and the large request that finds no room waits and is
// refused.
func TestSmallShare(t *testing.T) {
	const body = 64 << 10
	b := newBudget(BudgetOptions{Bytes: 64 * body, Wait: time.Minute}, body, newMetrics())
	if b.smallShare != 8*body {
		t.Fatalf("small share %d, want an eighth of the budget", b.smallShare)
	}
	large := b.reserve(context.Background())
	if err := large.grow(56 * body); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.reserve(short).grow(1); !isOverBudget(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a large request into the small share: %v, want a refusal", err)
	}
	small := b.reserve(context.Background())
	small.small = true
	for range 8 {
		if err := small.grow(body / 8); err != nil {
			t.Fatalf("a small request with the large part full: %v", err)
		}
	}
	if small.held != body {
		t.Errorf("small request holds %d", small.held)
	}
	// Past smallRequest it is large, and waits like one.
	late, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	small.ctx = late
	if err := small.grow(1); err == nil {
		t.Errorf("a request past %d bytes took the small share", smallRequest)
	}
	small.release()
	large.release()
	if b.inUse() != 0 {
		t.Errorf("in use %d after releasing all", b.inUse())
	}
}

// TestInflaterBytes: what a gzip or zlib reader allocates to inflate a
// body is within inflaterBytes, the charge taken for it beside the
// inflated bytes.
func TestInflaterBytes(t *testing.T) {
	plain := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	zipped := gzipped(plain)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(plain)
	zw.Close()
	buf := make([]byte, 32<<10)
	for _, c := range []struct {
		name string
		open func(io.Reader) (io.ReadCloser, error)
		data []byte
	}{
		{"gzip", func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }, zipped},
		{"zlib", zlib.NewReader, z.Bytes()},
	} {
		var before, after runtime.MemStats
		const runs = 20
		runtime.ReadMemStats(&before)
		for range runs {
			zr, err := c.open(bytes.NewReader(c.data))
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := zr.Read(buf); err != nil {
					break
				}
			}
			zr.Close()
		}
		runtime.ReadMemStats(&after)
		if per := int64(after.TotalAlloc-before.TotalAlloc) / runs; per > inflaterBytes {
			t.Errorf("%s: %d bytes allocated per body inflated, over the %d charged", c.name, per, inflaterBytes)
		} else {
			t.Logf("%s: %d bytes allocated per body inflated (%d charged)", c.name, per, inflaterBytes)
		}
	}
}
