package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rnnserve/rnn/tree"
	"rnnserve/schedule"
)

// benchTreeEntry is the tree benchmark's model (schedule.BenchmarkTreeLSTM:
// a Binary TreeLSTM with embeddings 300, hidden 150, 5 classes, a
// vocabulary of 5000 words w0..w4999, seeded random weights) served with
// exec, and the SST-like trees as request bodies of one tree each.
func benchTreeEntry(b *testing.B, exec string) (Entry, []string, []*tree.Tree) {
	b.Helper()
	dir := b.TempDir()
	words := make([]string, 5000)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	spec := fmt.Sprintf("kind: tree\ncell: binary_treelstm\nembedding_size: 300\nhidden_size: 150\nclasses: 5\n"+
		"vocab_file: vocab.txt\nexecutor: %s\nseed: 1\n", exec)
	if err := os.MkdirAll(filepath.Join(dir, "sst"), 0o755); err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string]string{"model.yaml": spec, "vocab.txt": strings.Join(words, "\n") + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, "sst", name), []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	e, err := LoadModel(os.DirFS(dir), "sst")
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile("../schedule/testdata/trees/sstlike.txt")
	if err != nil {
		b.Fatal(err)
	}
	var bodies []string
	var trees []*tree.Tree
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		tr, err := tree.ParseBracketed(line, e.Tree.ParseOptions())
		if err != nil {
			b.Fatal(err)
		}
		trees = append(trees, tr)
		bodies = append(bodies, treeRequest([]string{line}, "", "class"))
	}
	return e, bodies, trees
}

// BenchmarkTreeServing sends one-tree requests (SST-like trees, the
// tree benchmark's model, depth-batched) from 1, 8 and 64 concurrent
// clients through the server's REST handler in-process (JSON in, the
// class out; no network), so that the tree model's batcher groups the
// trees of concurrent requests into one plan. It reports the trees served
// per second, the mean trees per plan, and engine-trees/s: the same
// program running plans of that many trees back to back in-process,
// timed right after. Their ratio is what batching through the server
// keeps of the engine's speed.
//
//	go test ./server/ -run '^$' -bench TreeServing -benchtime 3s -cpu 2
func BenchmarkTreeServing(b *testing.B) {
	e, bodies, trees := benchTreeEntry(b, "depth_batched")
	o := testOptions()
	s, err := New([]Entry{e}, o, testDeps(b, o))
	if err != nil {
		b.Fatal(err)
	}
	s.Start()
	b.Cleanup(func() { s.Stop(b.Context()) })
	h := s.Handler()
	m, err := s.acquire(e.Name, "")
	if err != nil {
		b.Fatal(err)
	}
	m.base().leave()
	tm := m.(*treeModel)
	for _, clients := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.ReportAllocs()
			st := &tm.stats
			plans0, trees0 := st.executions.Load(), st.tokens.Load()
			var wg sync.WaitGroup
			var next sync.Mutex
			left := b.N
			start := time.Now()
			for c := range clients {
				wg.Go(func() {
					k := c
					for {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						req := httptest.NewRequest(http.MethodPost, "/v2/models/"+e.Name+"/infer", strings.NewReader(bodies[k%len(bodies)]))
						w := httptest.NewRecorder()
						h.ServeHTTP(w, req)
						if w.Code != http.StatusOK {
							b.Errorf("status %d: %s", w.Code, w.Body)
							return
						}
						k += clients
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			plans, served := st.executions.Load()-plans0, st.tokens.Load()-trees0
			b.StopTimer()
			perPlan := float64(served) / float64(max(plans, 1))
			b.ReportMetric(float64(served)/elapsed.Seconds(), "trees/s")
			b.ReportMetric(perPlan, "trees/plan")
			// The engine alone on plans of the mean batch, for as long.
			B := max(1, int(perPlan+0.5))
			opt := schedule.TreeOptions{Executor: tm.exec, Pool: tm.pool}
			n, t0 := 0, time.Now()
			for k := 0; time.Since(t0) < elapsed; k++ {
				i := (k * B) % (len(trees) - B + 1)
				tp, err := tm.prog.Acquire(trees[i:i+B], opt)
				if err != nil {
					b.Fatal(err)
				}
				if err := tp.Run(); err != nil {
					b.Fatal(err)
				}
				tp.Release()
				n += B
			}
			b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "engine-trees/s")
		})
	}
}
