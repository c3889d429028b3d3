package server

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
)

// BenchmarkOverhead compares one 32-token request through the server's
// handler (JSON in and out, the batcher or the worker pool, no network)
// with the same work as a plan of the same program run in-process, the
// two alternating: the server's own overhead is the difference. Models:
// the bundled byte LM and the load test's lstm512. Run with
//
//	go test ./server/ -run '^$' -bench Overhead -benchtime 2s
func BenchmarkOverhead(b *testing.B) {
	for _, bm := range benchModels(b) {
		toks := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(bm.ids)), ","), "[]")
		body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": [%s]}], "outputs": [{"name": "hidden"}]}`, len(bm.ids), toks)
		ids, e := bm.ids, bm.entry
		for _, batching := range []bool{false, true} {
			o := DefaultOptions()
			o.Batching.Enabled = &batching
			s, err := New([]Entry{e}, o, testDeps(b, o))
			if err != nil {
				b.Fatal(err)
			}
			m := seqOf(b, s, e.Name)
			// A lone request on an idle model runs the wide program when
			// there is one: time that.
			engine := m.prog
			if m.wide != nil {
				engine = m.wide
			}
			s.Start()
			h := s.Handler()
			// Alternate the two so both see the same machine: each
			// iteration runs one request through the handler and the same
			// plan directly, and the metrics are their mean times.
			b.Run(fmt.Sprintf("%s/%s/cores=%d/batching=%v", e.Name, candidateOf(engine), engine.Workers(), batching), func(b *testing.B) {
				var server, engineTime time.Duration
				for b.Loop() {
					t0 := time.Now()
					req := httptest.NewRequest(http.MethodPost, "/v2/models/"+e.Name+"/infer", strings.NewReader(body))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
					t1 := time.Now()
					p, err := engine.Plan(schedule.Input{T: len(ids), B: 1, Tokens: ids}, schedule.PlanOptions{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := p.Run(); err != nil {
						b.Fatal(err)
					}
					server, engineTime = server+t1.Sub(t0), engineTime+time.Since(t1)
				}
				n := float64(b.N)
				b.ReportMetric(float64(server.Microseconds())/n, "server-µs")
				b.ReportMetric(float64(engineTime.Microseconds())/n, "engine-µs")
				b.ReportMetric(float64((server-engineTime).Microseconds())/n, "overhead-µs")
			})
			s.Stop(b.Context())
		}
	}
}

// benchModel is a model the server's benchmarks time, with the token ids
// of one 32-token request.
type benchModel struct {
	entry Entry
	ids   []int64
}

// benchModels loads the bundled byte LM and the load test's lstm512.
func benchModels(b *testing.B) []benchModel {
	var out []benchModel
	for _, repo := range []struct {
		name string
		fsys fs.FS
	}{{"bytelm", bundled.FS}, {"lstm512", os.DirFS("../configs/loadtest")}} {
		entries, err := LoadRepository(repo.fsys)
		if err != nil {
			b.Fatal(err)
		}
		i := slices.IndexFunc(entries, func(e Entry) bool { return e.Name == repo.name })
		if i < 0 {
			b.Fatalf("no model %s", repo.name)
		}
		ids := make([]int64, 32)
		rng := rand.New(rand.NewPCG(1, 2))
		for k := range ids {
			ids[k] = rng.Int64N(int64(entries[i].Model.Net.Vocab))
		}
		out = append(out, benchModel{entries[i], ids})
	}
	return out
}
