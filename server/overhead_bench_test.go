package server

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
)

// BenchmarkOverhead compares one 32-token request through the server's
// handler (JSON in and out, the batcher or the worker pool, no network)
// with the same work as a plan of the same program run in-process: the
// server's own overhead is the difference. Models: the bundled byte LM
// and the load test's lstm512. Run with
//
//	go test ./server/ -run '^$' -bench Overhead -benchtime 2s
func BenchmarkOverhead(b *testing.B) {
	for _, repo := range []struct {
		name string
		fsys fs.FS
	}{{"bytelm", bundled.FS}, {"lstm512", os.DirFS("../configs/loadtest")}} {
		entries, err := LoadRepository(repo.fsys)
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
			o := DefaultOptions()
			o.Batching.Enabled = &batching
			s, err := New(entries, o, quietLog)
			if err != nil {
				b.Fatal(err)
			}
			m := s.models[repo.name]
			s.Start()
			b.Run(fmt.Sprintf("%s/%s/server/batching=%v", repo.name, candidateOf(m.prog), batching), func(b *testing.B) {
				h := s.Handler()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/v2/models/"+repo.name+"/infer", strings.NewReader(body))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
			s.Stop(b.Context())
			if batching {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s/engine", repo.name, candidateOf(m.prog)), func(b *testing.B) {
				for b.Loop() {
					p, err := m.prog.Plan(schedule.Input{T: steps, B: 1, Tokens: ids}, schedule.PlanOptions{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := p.Run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
