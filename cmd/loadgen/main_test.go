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
	r := driveHTTP(hs.URL, "m", 4, 5, 10, 300*time.Millisecond, false)
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
