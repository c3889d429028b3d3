package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// deadlineWriter is a ResponseWriter whose first write waits at gate, as
// to a client that has not started reading, and that counts the write
// deadlines set on it (http.ResponseController finds SetWriteDeadline).
type deadlineWriter struct {
	*httptest.ResponseRecorder
	gate      chan struct{}
	once      sync.Once
	mu        sync.Mutex
	deadlines int
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { <-w.gate })
	return w.ResponseRecorder.Write(b)
}

func (w *deadlineWriter) SetWriteDeadline(time.Time) error {
	w.mu.Lock()
	w.deadlines++
	w.mu.Unlock()
	return nil
}

// TestGenerateStreamDeadline: a stream's tokens each get write_timeout
// while the model makes them, but once it has made them all (they wait in
// memory) the rest get one write_timeout together: a reader just fast
// enough for each event could otherwise hold its connection for hours
// (4,096 tokens at 30 s each). With the first event held until the model
// has made its 200 tokens (its steps have stopped), the stream sets a few
// deadlines, not one an event.
func TestGenerateStreamDeadline(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	steps := s.metrics.tokens.WithLabelValues("lm")
	before := testutil.ToFloat64(steps)
	req := httptest.NewRequest(http.MethodPost, "/v2/models/lm/generate_stream", strings.NewReader(`{"prompt": "ab", "max_tokens": 200}`))
	w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), gate: make(chan struct{})}
	go func() {
		// The lane's steps (the prompt's and one a token fed back) have
		// run, and no step has come for 300 ms: the model has made them all.
		last, changed := before, time.Now()
		for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(5 * time.Millisecond) {
			if v := testutil.ToFloat64(steps); v != last {
				last, changed = v, time.Now()
			} else if last-before >= 150 && time.Since(changed) > 300*time.Millisecond {
				break
			}
		}
		close(w.gate)
	}()
	s.Handler().ServeHTTP(w, req)
	events := strings.Count(w.Body.String(), "data: ")
	if w.Code != http.StatusOK || events != 201 {
		t.Fatalf("%d, %d events: %.300s", w.Code, events, w.Body.String())
	}
	if w.deadlines > events/10 {
		t.Errorf("%d write deadlines for %d events: each event got its own after the model had made every token", w.deadlines, events)
	}
}
