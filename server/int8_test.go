package server

import (
	"encoding/json"
	"math"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// TestChooseScheduleInt8: P-int8 is a candidate only when config.yaml
// asks for int8, wins when the weights stream, loses a tie to P, and only
// P stores int8 weights.
func TestChooseScheduleInt8(t *testing.T) {
	tm := trafficModel{llc: 8 << 20, private: 256 << 10, workers: 2, steps: 20}
	net := dryNet(t, streamingLSTM)
	for _, prec := range []string{"", "f32", "bf16"} {
		_, _, traffic, err := chooseSchedule(net, ModelConfig{Precision: prec}, tm, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range traffic {
			if tr.Schedule == "P-int8" || tr.Precision == "int8" {
				t.Errorf("precision %q: candidate %s (%s)", prec, tr.Schedule, tr.Precision)
			}
		}
	}
	c, why, traffic, err := chooseSchedule(net, ModelConfig{Precision: "int8"}, tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, i8 := trafficOf(t, traffic, "P"), trafficOf(t, traffic, "P-int8")
	if c.String() != "P-int8" || c.prec != schedule.Int8 || i8.Precision != "int8" || c.stepperPrecision() != schedule.Int8 {
		t.Errorf("int8 asked for: chose %v (%s)", c, why)
	}
	if *i8.CoreBytes >= *p.CoreBytes/3 || i8.WorkingSetBytes >= p.WorkingSetBytes/3 {
		t.Errorf("P %+v (core %.0f), P-int8 %+v (core %.0f): want int8 under a third in every figure", p, *p.CoreBytes, i8, *i8.CoreBytes)
	}
	small := dryNet(t, rnn.Config{Cell: rnn.GRU, Input: 4, Hidden: 8, Layers: 1})
	c, why, _, err = chooseSchedule(small, ModelConfig{Precision: "int8"}, trafficModel{llc: 1 << 20, private: 1 << 20, workers: 2, steps: 5}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != "P" || c.stepperPrecision() != schedule.F32 || !strings.Contains(why, "tied with") {
		t.Errorf("a model that fits: chose %v (%s), want P on a tie", c, why)
	}
	c, _, traffic, err = chooseSchedule(net, ModelConfig{Schedule: "P", Precision: "int8"}, tm, nil, 0)
	if err != nil || c.String() != "P-int8" || len(traffic) != 4 {
		t.Errorf("schedule P, precision int8: %v, %d candidates (%v)", c, len(traffic), err)
	}
	for _, cfg := range []ModelConfig{{Schedule: "A", Precision: "int8"}, {Schedule: "A+", Precision: "int8"}} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "only P stores int8 weights") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	pb := candidate{sched: schedule.Partitioned, prec: schedule.BF16, workers: 2}
	pi := candidate{sched: schedule.Partitioned, prec: schedule.Int8, workers: 2}
	zero := 0.0
	tie := []api.ScheduleTraffic{{CoreBytes: &zero}, {CoreBytes: &zero}}
	if got := pick([]candidate{pi, pb}, tie); got != 1 {
		t.Errorf("P-int8 against P-bf16 on a tie: picked P-int8")
	}
}

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
		if got := candidateOf(m.prog); got.prec != schedule.Int8 || got.workers != runtime.GOMAXPROCS(0) {
			t.Fatalf("%s runs %v on %d workers (%s)", name, got, got.workers, m.reason)
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
	if err != nil || candidateOf(prog).String() != "P-int8" {
		t.Errorf("ProgramFor(P-int8): %v", err)
	}
	if _, err := ProgramFor(seqOf(t, s, "qlm").net, "A+-int8", 1, nil); err == nil {
		t.Error("ProgramFor(A+-int8): no error")
	}
}
