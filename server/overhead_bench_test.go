package server

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
)

// BenchmarkOverhead compares one 32-token request to the bundled byte LM
// through the server's handler (JSON in and out, batcher or worker pool,
// no network) with the same work as a plan run in-process: the server's
// own overhead is the difference. Run with
//
//	go test ./server/ -run '^$' -bench Overhead -benchtime 2s
func BenchmarkOverhead(b *testing.B) {
	entries, err := LoadRepository(bundled.FS)
	if err != nil {
		b.Fatal(err)
	}
	const steps = 32
	ids := make([]int64, steps)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range ids {
		ids[i] = rng.Int64N(256)
	}
	toks := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]")
	body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": [%s]}], "outputs": [{"name": "hidden"}]}`, steps, toks)
	for _, batching := range []bool{false, true} {
		b.Run(fmt.Sprintf("server/batching=%v", batching), func(b *testing.B) {
			o := DefaultOptions()
			o.Batching.Enabled = &batching
			s, err := New(entries, o, quietLog)
			if err != nil {
				b.Fatal(err)
			}
			s.Start()
			defer s.Stop(b.Context())
			h := s.Handler()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v2/models/bytelm/infer", strings.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
	b.Run("engine", func(b *testing.B) {
		o := DefaultOptions()
		s, err := New(entries, o, quietLog)
		if err != nil {
			b.Fatal(err)
		}
		prog := s.models["bytelm"].prog
		for b.Loop() {
			p, err := prog.Plan(schedule.Input{T: steps, B: 1, Tokens: ids}, schedule.PlanOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
