package main

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRequestBody(t *testing.T) {
	var req struct {
		Inputs []struct {
			Shape []int   `json:"shape"`
			Data  []int64 `json:"data"`
		} `json:"inputs"`
	}
	body := requestBody(rand.New(rand.NewPCG(1, 1)), 7, 3, false)
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	in := req.Inputs[0]
	if in.Shape[0] != 1 || in.Shape[1] != 7 || len(in.Data) != 7 {
		t.Fatalf("body %s", body)
	}
	for _, id := range in.Data {
		if id < 0 || id >= 3 {
			t.Fatalf("token %d outside [0, 3)", id)
		}
	}
}

// TestDrive runs clients against a fake server that fails every third
// request, and checks the counts and percentiles.
func TestDrive(t *testing.T) {
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/v2/models/m/infer") {
			http.NotFound(w, r)
			return
		}
		time.Sleep(time.Millisecond)
		if n.Add(1)%3 == 0 {
			http.Error(w, `{"error": "x"}`, 400)
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer hs.Close()
	r, err := driveHTTP(hs.URL, "m", 4, 5, 10, 300*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(r.lat) + r.errors)
	if len(r.lat) == 0 || r.errors == 0 || total > n.Load() {
		t.Fatalf("%d ok, %d errors, %d served", len(r.lat), r.errors, n.Load())
	}
	if r.pct(0.5) < time.Millisecond || r.pct(0.99) < r.pct(0.5) || r.rate() <= 0 {
		t.Errorf("p50 %v p99 %v rate %v", r.pct(0.5), r.pct(0.99), r.rate())
	}
}

// TestHTTPFloor: the floor is the health endpoint's median round trip, and
// a failing server is an error.
func TestHTTPFloor(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/health/live" {
			http.NotFound(w, r)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}))
	defer hs.Close()
	d, err := httpFloor(hs.URL, 50*time.Millisecond)
	if err != nil || d < 2*time.Millisecond || d > time.Second {
		t.Errorf("floor %v, %v; want at least the handler's 2ms", d, err)
	}
	bad := httptest.NewServer(http.NotFoundHandler())
	defer bad.Close()
	if _, err := httpFloor(bad.URL, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404 health: %v", err)
	}
}

// TestServedSchedule: rnnserve's metadata gives the schedule and its cores;
// another server's (a peer without the "rnn" section) gives "-", and a
// failing or malformed metadata call is an error.
func TestServedSchedule(t *testing.T) {
	bodies := map[string]string{
		"/v2/models/rnn":  `{"name": "rnn", "rnn": {"schedule": "P", "wide_cores": 2, "traffic": [{"schedule": "A", "workers": 1}, {"schedule": "P", "workers": 1}]}}`,
		"/v2/models/one":  `{"name": "one", "rnn": {"schedule": "A+", "traffic": [{"schedule": "A+", "workers": 1}]}}`,
		"/v2/models/peer": `{"name": "peer", "versions": ["1"], "platform": "onnxruntime_onnx", "inputs": []}`,
		"/v2/models/bad":  `{"name": `,
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(b))
	}))
	defer hs.Close()
	for _, c := range []struct {
		model, sched string
		workers      int
	}{{"rnn", "P", 2}, {"one", "A+", 1}, {"peer", "-", 1}} {
		s, n, err := servedSchedule(hs.URL, c.model)
		if err != nil || s != c.sched || n != c.workers {
			t.Errorf("%s: %q on %d, %v; want %q on %d", c.model, s, n, err, c.sched, c.workers)
		}
	}
	for _, m := range []string{"bad", "missing"} {
		if s, _, err := servedSchedule(hs.URL, m); err == nil {
			t.Errorf("%s: %q, want an error", m, s)
		}
	}
}
