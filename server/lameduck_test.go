package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"rnnserve/server/api"
)

// TestLameDuck: readiness fails at once, requests are still served, each
// with Connection: close.
func TestLameDuck(t *testing.T) {
	s, hs := newTestServer(t, nil, true)
	body := `{"inputs": [` + tokensJSON([][]int64{{1, 2}}) + `]}`
	if code, _, h := post(t, hs.URL+"/v2/models/lm/infer", body); code != http.StatusOK || h.Get("Connection") == "close" {
		t.Fatalf("before: %d, Connection %q", code, h.Get("Connection"))
	}
	s.LameDuck()
	if !s.InLameDuck() {
		t.Error("InLameDuck is false after LameDuck")
	}
	for _, path := range []string{"/v2/health/ready", "/v2/models/lm/ready"} {
		if code, b := get(t, hs.URL+path); code != http.StatusServiceUnavailable {
			t.Errorf("GET %s in the lame-duck period: %d %s, want 503", path, code, b)
		}
	}
	if code, b := get(t, hs.URL+"/v2/health/live"); code != http.StatusOK {
		t.Errorf("live in the lame-duck period: %d %s", code, b)
	}
	resp, err := http.Post(hs.URL+"/v2/models/lm/infer", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("infer in the lame-duck period: %d, close %v; want 200 closing the connection", resp.StatusCode, resp.Close)
	}
}

// slowBatch makes every step of a batch take at least d: a long
// generation or sequence, for a test to act while it runs.
type slowBatch[W any] struct {
	batch[W]
	d time.Duration
}

func (b slowBatch[W]) step() []finishedJob[W] {
	time.Sleep(b.d)
	return b.batch.step()
}

// newSlowServer is a started test server with one lane whose steps take
// 2 ms each: long generations and sequences for a test to act on.
func newSlowServer(t *testing.T) (*Server, *httptest.Server) {
	s, hs := newTestServer(t, func(o *Options) { o.Batching.Workers = 1 }, false)
	for _, l := range seqOf(t, s, "lm").batch.lanes {
		l.batch = slowBatch[*seqWork]{l.batch, 2 * time.Millisecond}
	}
	s.Start()
	return s, hs
}

// TestCut: requests still in flight when the drain timeout expires end
// with ErrCut: a stream with a final error line (SSE and NDJSON), a
// whole generation and an infer with 503; Cut names each and Idle sees
// them go.
func TestCut(t *testing.T) {
	s, hs := newSlowServer(t)
	gen := `{"text_input": "abc", "parameters": {"max_tokens": 4000}}`
	type answer struct {
		what  string
		code  int
		lines []string
	}
	answers := make(chan answer, 4)
	started := make(chan struct{}, 2)
	stream := func(what, path, accept string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(gen))
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			answers <- answer{what: what}
			return
		}
		defer resp.Body.Close()
		a := answer{what: what, code: resp.StatusCode}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "" {
				continue
			}
			if len(a.lines) == 0 {
				started <- struct{}{}
			}
			a.lines = append(a.lines, sc.Text())
		}
		answers <- a
	}
	go stream("SSE", "/v2/models/lm/generate_stream", "text/event-stream")
	go stream("NDJSON", "/v2/models/lm/generate", "application/x-ndjson")
	var whole, infer answer
	var wg sync.WaitGroup
	wg.Go(func() {
		code, b, _ := post(t, hs.URL+"/v2/models/lm/generate", gen)
		whole = answer{what: "generate", code: code, lines: []string{string(b)}}
	})
	wg.Go(func() {
		long := make([][]int64, 1)
		long[0] = make([]int64, 3000)
		code, b, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+tokensJSON(long)+`]}`)
		infer = answer{what: "infer", code: code, lines: []string{string(b)}}
	})
	<-started
	<-started
	deadline := time.Now().Add(10 * time.Second)
	for s.InFlight() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cut := s.Cut()
	if len(cut) != 4 || !strings.Contains(strings.Join(cut, "; "), "generate lm (rest) after") || !strings.Contains(strings.Join(cut, "; "), "infer lm (rest) after") {
		t.Errorf("Cut returned %q, want the four requests named", cut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for range 2 {
		a := <-answers
		last := a.lines[len(a.lines)-1]
		switch a.what {
		case "SSE":
			var e api.Error
			if a.code != http.StatusOK || len(a.lines) < 2 || json.Unmarshal([]byte(strings.TrimPrefix(last, "data: ")), &e) != nil || !strings.Contains(e.Error, "drain timeout") {
				t.Errorf("SSE stream: %d, %d lines, last %q; want tokens and then an error event", a.code, len(a.lines), last)
			}
		case "NDJSON":
			var d api.GenerateDone
			if a.code != http.StatusOK || len(a.lines) < 2 || json.Unmarshal([]byte(last), &d) != nil || !d.Done || d.Reason != "error" ||
				!strings.Contains(d.Error, "drain timeout") || d.Tokens != len(a.lines)-1 {
				t.Errorf("NDJSON stream: %d, %d lines, last %q; want tokens and then a done line with the error", a.code, len(a.lines), last)
			}
		}
	}
	for _, a := range []answer{whole, infer} {
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.lines[0], "drain timeout") {
			t.Errorf("%s: %d %s, want 503 naming the drain timeout", a.what, a.code, a.lines[0])
		}
	}
}
