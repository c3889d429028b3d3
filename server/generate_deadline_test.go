package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// deadlineWriter is a ResponseWriter whose writes take a while, as to a
// client that reads slowly, and that counts the write deadlines set on
// it (http.ResponseController finds SetWriteDeadline).
type deadlineWriter struct {
	*httptest.ResponseRecorder
	mu        sync.Mutex
	deadlines int
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
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
// (4,096 tokens at 30 s each). The model makes 200 tokens long before a
// reader at 2 ms an event has them, so the stream sets far fewer
// deadlines than it writes events.
func TestGenerateStreamDeadline(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	req := httptest.NewRequest(http.MethodPost, "/v2/models/lm/generate_stream", strings.NewReader(`{"prompt": "ab", "max_tokens": 200}`))
	w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder()}
	s.Handler().ServeHTTP(w, req)
	events := strings.Count(w.Body.String(), "data: ")
	if w.Code != http.StatusOK || events != 201 {
		t.Fatalf("%d, %d events: %.300s", w.Code, events, w.Body.String())
	}
	if w.deadlines > events/2 {
		t.Errorf("%d write deadlines for %d events: each event got its own after the model had made every token", w.deadlines, events)
	}
}
