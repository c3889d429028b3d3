package server

import (
	"context"
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
	"rnnserve/server/internal/choice"
)

// BenchmarkOverhead compares one 32-token request through the server's
// handler (JSON in, the final hidden state out as JSON or as Triton's
// binary tensor data; the batcher or the worker pool; no network) with
// the same work as a plan of the same program run in-process, the two
// alternating: the server's own overhead is the difference. Models: the
// bundled byte LM and the load test's lstm512. Run with
//
//	go test ./server/ -run '^$' -bench Overhead -benchtime 2s
func BenchmarkOverhead(b *testing.B) {
	for _, bm := range benchModels(b) {
		toks := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(bm.ids)), ","), "[]")
		ids, e := bm.ids, bm.entry
		for _, out := range []string{"json", "binary"} {
			body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": [%s]}], "outputs": [{"name": "hidden", "parameters": {"binary_data": %v}}]}`, len(bm.ids), toks, out == "binary")
			for _, batching := range []bool{false, true} {
				o := testOptions()
				o.Batching.Enabled = &batching
				s, err := New([]Entry{e}, o, testDeps(b, o))
				if err != nil {
					b.Fatal(err)
				}
				m := seqOf(b, s, e.Name)
				// A lone request on an idle model runs the wide program when
				// there is one: time that.
				engine := m.form.Load().prog
				if w := m.form.Load().wide; w != nil {
					engine = w
				}
				s.Start()
				h := s.Handler()
				// Alternate the two so both see the same machine: each
				// iteration runs one request through the handler and the same
				// plan directly, and the metrics are their mean times.
				b.Run(fmt.Sprintf("%s/%s/cores=%d/batching=%v/out=%s", e.Name, choice.Of(engine), engine.Workers(), batching, out), func(b *testing.B) {
					var server, engineTime, inside time.Duration
					infer := &m.stats.infer.ns
					for b.Loop() {
						before := infer.Load()
						t0 := time.Now()
						req := httptest.NewRequest(http.MethodPost, "/v2/models/"+e.Name+"/infer", strings.NewReader(body))
						w := httptest.NewRecorder()
						h.ServeHTTP(w, req)
						if w.Code != http.StatusOK {
							b.Fatalf("status %d: %s", w.Code, w.Body)
						}
						t1 := time.Now()
						inside += time.Duration(infer.Load() - before)
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
					// The same request's own compute time (the statistics'
					// compute_infer: building and running the plan, as the
					// engine column does) against its handler time: the
					// server's overhead paired within each request, free of
					// the engine's run-to-run spread.
					b.ReportMetric(float64((server-inside).Nanoseconds())/1e3/n, "paired-overhead-µs")
				})
				s.Stop(b.Context())
			}
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

// stubModel is a sequence model whose engine is left out: it validates a
// request as the real model does and answers with the same outputs (the
// final state of a plan it ran once), without running a plan. Through it
// the handler's time is the server's own overhead alone.
type stubModel struct {
	*seqModel
	res []rowResult
}

func (m *stubModel) infer(ctx context.Context, r *Request, tm *timing) ([]OutputTensor, int, error) {
	in, err := decodeSeq(r, m.net, m.names, m.opts)
	if err != nil {
		return nil, 0, err
	}
	outs, err := m.encode(in, m.res)
	return outs, in.B, err
}

// stubServer is a started server of bm's model with its engine stubbed
// out (stubModel), stopped when the benchmark ends.
func stubServer(b *testing.B, bm benchModel) *Server {
	o := testOptions()
	o.TrafficSteps = 2 // the engine is stubbed out: its modelled traffic does not matter
	s, err := New([]Entry{bm.entry}, o, testDeps(b, o))
	if err != nil {
		b.Fatal(err)
	}
	sm := seqOf(b, s, bm.entry.Name)
	in := &seqInput{B: 1, T: len(bm.ids), tokens: bm.ids, outputs: []outputSpec{{name: "hidden"}}}
	res, err := sm.runPlan(in, nil, false, sm.form.Load().prog, nil)
	if err != nil {
		b.Fatal(err)
	}
	table := map[string]model{bm.entry.Name: &stubModel{seqModel: sm, res: res}}
	s.models.Store(&table)
	s.Start()
	b.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// BenchmarkRESTOverhead times the REST path of one 32-token lstm512
// request asking for the final hidden state (1024 floats) with the engine
// stubbed out: gin's routing, reading and decoding the JSON body, the
// server's bookkeeping (lookup, statistics, metrics) and encoding the
// output as JSON or as binary tensor data. That is the in-process overhead
// a request pays above the engine. Run with
//
//	go test ./server/ -run '^$' -bench RESTOverhead -benchtime 2s -count 5
func BenchmarkRESTOverhead(b *testing.B) {
	bm := benchModels(b)[1]
	s := stubServer(b, bm)
	h := s.Handler()
	toks := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(bm.ids)), ","), "[]")
	for _, out := range []string{"json", "binary"} {
		body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": [%s]}], "outputs": [{"name": "hidden", "parameters": {"binary_data": %v}}]}`, len(bm.ids), toks, out == "binary")
		b.Run("lstm512/out="+out, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v2/models/"+bm.entry.Name+"/infer", strings.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
