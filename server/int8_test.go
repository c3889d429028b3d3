package server

import (
	"encoding/json"
	"math"
	"runtime"
	"testing"
	"testing/fstest"

	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// An int8 language model served two ways: whole-request plans and
// batched steps.
var int8Repo = fstest.MapFS{
	"qlm/model.yaml":   {Data: []byte("cell: lstm\ninput_size: 16\nhidden_size: 64\nnum_layers: 2\nembedding: {vocab_size: 40}\nhead: {out_features: 40, activation: log_softmax}\nseed: 13\n")},
	"qlm/config.yaml":  {Data: []byte("batching: false\nprecision: int8\n")},
	"qlmb/model.yaml":  {Data: []byte("cell: lstm\ninput_size: 16\nhidden_size: 64\nnum_layers: 2\nembedding: {vocab_size: 40}\nhead: {out_features: 40, activation: log_softmax}\nseed: 13\n")},
	"qlmb/config.yaml": {Data: []byte("batching: true\nprecision: int8\n")},
}

// TestServeInt8 serves a model with precision int8 unbatched and batched:
// auto picks P-int8 where the weights stream, the metadata says so (the
// cellular batcher's traffic at int8 too), and both ways give the same
// logits bit for bit (each row is quantized on its own, and the batcher's
// steps run the same kernels in the same order), within int8's rounding
// of float32's and not equal to them.
func TestServeInt8(t *testing.T) {
	entries, err := LoadRepository(int8Repo)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes, o.PrivateCacheBytes, o.TrafficSteps = 8<<20, 16<<10, 10
	o.Batching.Workers = 1
	s, err := New(entries, o, testDeps(t, o))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := newHTTPTestServer(t, s)
	tokens := [][]int64{{1, 5, 9, 30, 2, 39, 0}, {7, 7, 7, 3, 2, 1, 12}}
	B, T, V := 2, 7, 40
	logits := map[string][]float64{}
	for _, name := range []string{"qlm", "qlmb"} {
		m := seqOf(t, s, name)
		if got := choice.Of(m.form.Load().prog); got.Prec != schedule.Int8 || got.Workers != runtime.GOMAXPROCS(0) {
			t.Fatalf("%s runs %v on %d workers (%s)", name, got, got.Workers, reasonOf(m))
		}
		_, body := get(t, hs.URL+"/v2/models/"+name)
		var md api.ModelMetadata
		if err := json.Unmarshal(body, &md); err != nil {
			t.Fatal(err)
		}
		if md.RNN.Schedule != "P-int8" || md.RNN.Batching != (name == "qlmb") {
			t.Errorf("%s metadata: schedule %q, batching %v", name, md.RNN.Schedule, md.RNN.Batching)
		}
		cellular := false
		for _, tr := range md.RNN.Traffic {
			if tr.Schedule == "cellular" {
				cellular = true
				if tr.Precision != "int8" {
					t.Errorf("%s: cellular traffic at precision %q, want int8", name, tr.Precision)
				}
			}
		}
		if !cellular {
			t.Errorf("%s: no cellular traffic in the metadata", name)
		}
		code, resp, _ := post(t, hs.URL+"/v2/models/"+name+"/infer", `{"inputs": [`+tokensJSON(tokens)+`], "outputs": [{"name": "logits"}]}`)
		if code != 200 {
			t.Fatalf("%s: %d %s", name, code, resp)
		}
		logits[name] = parseOutputs(t, resp)["logits"]
	}
	want := reference(t, s, "qlm", tokens, nil, nil)
	worst := 0.0
	for b := 0; b < B; b++ {
		for tt := 0; tt < T; tt++ {
			for v := 0; v < V; v++ {
				i := (b*T+tt)*V + v
				if logits["qlm"][i] != logits["qlmb"][i] {
					t.Fatalf("row %d step %d logit %d: whole plan %v, batched %v", b, tt, v, logits["qlm"][i], logits["qlmb"][i])
				}
				w := float64(want.Head[(tt*B+b)*V+v])
				worst = max(worst, math.Abs(logits["qlm"][i]-w)/math.Max(1, math.Abs(w)))
			}
		}
	}
	if worst > 2e-2 || worst < 1e-6 {
		t.Errorf("int8 logits differ from float32's by %.3g (relative), want 1e-6..2e-2", worst)
	}
	prog, err := ProgramFor(seqOf(t, s, "qlm").net, "P-int8", 1, testDeps(t, Options{Batching: BatchOptions{Workers: 1}}).Pools)
	if err != nil || choice.Of(prog).String() != "P-int8" {
		t.Errorf("ProgramFor(P-int8): %v", err)
	}
	if _, err := ProgramFor(seqOf(t, s, "qlm").net, "A+-int8", 1, nil); err == nil {
		t.Error("ProgramFor(A+-int8): no error")
	}
}
