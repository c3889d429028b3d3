package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

func dryNet(t testing.TB, cfg rnn.Config) *rnn.Network {
	t.Helper()
	net, err := rnn.NewNetwork(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	return net
}

// newHTTPTestServer serves s for one test and stops both afterwards.
func newHTTPTestServer(t testing.TB, s *Server) *httptest.Server {
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Stop(context.Background())
	})
	return hs
}

// trafficOf returns the modelled traffic of the named schedule.
func trafficOf(t testing.TB, traffic []api.ScheduleTraffic, name string) api.ScheduleTraffic {
	t.Helper()
	for _, tr := range traffic {
		if tr.Schedule == name {
			if tr.CoreBytes == nil {
				t.Fatalf("%s has no per-core figure", name)
			}
			return tr
		}
	}
	t.Fatalf("no traffic for schedule %s in %+v", name, traffic)
	return api.ScheduleTraffic{}
}

// A two-layer LSTM of 900 KB: it fits an 8 MiB LLC, but one layer's W_hh
// (256 KiB) does not fit a 256 KiB private cache beside anything else,
// while half of it does.
var streamingLSTM = rnn.Config{Cell: rnn.LSTM, Input: 64, Hidden: 128, Layers: 2, Vocab: 50, HeadOut: 50, Activation: rnn.ActLogSoftmax}

// TestChooseScheduleFitsLLC: every schedule keeps the model in the LLC,
// so all tie on DRAM, and P wins on the traffic each core has beyond its
// private cache.
func TestChooseScheduleFitsLLC(t *testing.T) {
	tm := trafficModel{llc: 8 << 20, private: 256 << 10, workers: 2, steps: 20}
	c, why, traffic, err := chooseSchedule(dryNet(t, streamingLSTM), ModelConfig{}, tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(why)
	if c.String() != "P" || c.workers != 2 || !strings.HasPrefix(why, "auto: P on 2 core(s)") {
		t.Errorf("chose %v on %d workers (%s), want P on 2", c, c.workers, why)
	}
	if len(traffic) != 3 {
		t.Fatalf("%d candidates, want A, A+ and P", len(traffic))
	}
	a, ap, p := trafficOf(t, traffic, "A"), trafficOf(t, traffic, "A+"), trafficOf(t, traffic, "P")
	for _, tr := range traffic {
		if tr.WarmDRAMBytes != 0 || tr.DRAMBytes <= 0 || tr.PrivateCacheBytes != tm.private || tr.CacheBytes != tm.llc || tr.Precision != "f32" {
			t.Errorf("%s: %+v; want no warm DRAM traffic, some cold", tr.Schedule, tr)
		}
	}
	if *p.CoreBytes > *ap.CoreBytes/2 || *ap.CoreBytes > *a.CoreBytes || p.Workers != 2 || ap.Workers != 1 {
		t.Errorf("per-core bytes A %.0f, A+ %.0f, P %.0f (P on %d workers): want P under half of A+, A+ under A",
			*a.CoreBytes, *ap.CoreBytes, *p.CoreBytes, p.Workers)
	}
}

// TestChooseScheduleSmallLLC: in an LLC far smaller than the model, A
// reads G at every step and A+ reads W_ih once, so A+ moves much less and
// A is never chosen.
func TestChooseScheduleSmallLLC(t *testing.T) {
	tm := trafficModel{llc: 128 << 10, private: 64 << 10, workers: 1, steps: 20}
	c, why, traffic, err := chooseSchedule(dryNet(t, streamingLSTM), ModelConfig{}, tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(why)
	a, ap := trafficOf(t, traffic, "A"), trafficOf(t, traffic, "A+")
	if ap.WarmDRAMBytes > 0.8*a.WarmDRAMBytes {
		t.Errorf("warm DRAM bytes A %.0f, A+ %.0f: want A+ well under A", a.WarmDRAMBytes, ap.WarmDRAMBytes)
	}
	if c.sched == schedule.A {
		t.Errorf("chose A (%s)", why)
	}
	// Between A and A+ alone, the rule takes A+.
	cands := []candidate{{sched: schedule.A, workers: 1}, {sched: schedule.APlus, workers: 1}}
	if got := pick(cands, []api.ScheduleTraffic{a, ap}); got != 1 {
		t.Errorf("between A and A+ picked %v", cands[got])
	}
}

// TestChooseScheduleBF16: P-bf16 is a candidate only when config.yaml
// allows bf16, wins when the weights stream, and loses a tie to P.
func TestChooseScheduleBF16(t *testing.T) {
	tm := trafficModel{llc: 8 << 20, private: 256 << 10, workers: 2, steps: 20}
	net := dryNet(t, streamingLSTM)
	for _, prec := range []string{"", "f32"} {
		c, _, traffic, err := chooseSchedule(net, ModelConfig{Precision: prec}, tm, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range traffic {
			if tr.Schedule == "P-bf16" || tr.Precision != "f32" {
				t.Errorf("precision %q: candidate %s (%s)", prec, tr.Schedule, tr.Precision)
			}
		}
		if c.prec != schedule.F32 {
			t.Errorf("precision %q: chose %v", prec, c)
		}
	}
	c, why, traffic, err := chooseSchedule(net, ModelConfig{Precision: "bf16"}, tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, bf := trafficOf(t, traffic, "P"), trafficOf(t, traffic, "P-bf16")
	if c.String() != "P-bf16" || c.prec != schedule.BF16 || bf.Precision != "bf16" {
		t.Errorf("bf16 allowed: chose %v (%s)", c, why)
	}
	if *bf.CoreBytes >= *p.CoreBytes || bf.WorkingSetBytes >= p.WorkingSetBytes || bf.DRAMBytes >= p.DRAMBytes {
		t.Errorf("P %+v (core %.0f), P-bf16 %+v (core %.0f): want bf16 smaller in every figure", p, *p.CoreBytes, bf, *bf.CoreBytes)
	}
	// A model that fits every cache: nothing to gain from bf16.
	small := dryNet(t, rnn.Config{Cell: rnn.GRU, Input: 4, Hidden: 8, Layers: 1})
	c, why, _, err = chooseSchedule(small, ModelConfig{Precision: "bf16"}, trafficModel{llc: 1 << 20, private: 1 << 20, workers: 2, steps: 5}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != "P" || !strings.Contains(why, "tied with") {
		t.Errorf("a model that fits: chose %v (%s), want P on a tie", c, why)
	}
}

// TestChooseScheduleSet: a schedule set in config.yaml is taken as it is,
// and every candidate's traffic is still modelled.
func TestChooseScheduleSet(t *testing.T) {
	tm := trafficModel{llc: 8 << 20, private: 256 << 10, workers: 3, steps: 5}
	net := dryNet(t, streamingLSTM)
	for _, c := range []struct {
		cfg     ModelConfig
		want    string
		workers int
		n       int
	}{
		{ModelConfig{Schedule: "A"}, "A", 1, 3},
		{ModelConfig{Schedule: "a+"}, "A+", 1, 3},
		{ModelConfig{Schedule: "P"}, "P", 3, 3},
		{ModelConfig{Schedule: "P", Precision: "bf16"}, "P-bf16", 3, 4},
	} {
		got, why, traffic, err := chooseSchedule(net, c.cfg, tm, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != c.want || got.workers != c.workers || why != "set in the model's config.yaml" || len(traffic) != c.n {
			t.Errorf("%+v: %v on %d workers (%s), %d candidates; want %s on %d, %d", c.cfg, got, got.workers, why, len(traffic), c.want, c.workers, c.n)
		}
	}
}

// TestPick applies the rule to made-up figures.
func TestPick(t *testing.T) {
	a := candidate{sched: schedule.A, workers: 1}
	ap := candidate{sched: schedule.APlus, workers: 1}
	p := candidate{sched: schedule.Partitioned, workers: 2}
	pb := candidate{sched: schedule.Partitioned, prec: schedule.BF16, workers: 2}
	tr := func(dram, core float64) api.ScheduleTraffic {
		return api.ScheduleTraffic{WarmDRAMBytes: dram, CoreBytes: &core}
	}
	for _, c := range []struct {
		name    string
		cands   []candidate
		traffic []api.ScheduleTraffic
		want    candidate
	}{
		{"least DRAM, nothing else within 2%", []candidate{a, ap, p}, []api.ScheduleTraffic{tr(100, 1), tr(200, 1), tr(103, 0)}, a},
		{"within 2%: least per-core", []candidate{a, ap, p}, []api.ScheduleTraffic{tr(100, 50), tr(101.9, 40), tr(102.1, 10)}, ap},
		{"all tie: P", []candidate{a, ap, p}, []api.ScheduleTraffic{tr(0, 7), tr(0, 7), tr(0, 7)}, p},
		{"A+ over A on a tie", []candidate{a, ap}, []api.ScheduleTraffic{tr(5, 5), tr(5, 5)}, ap},
		{"P over P-bf16 on a tie", []candidate{a, ap, p, pb}, []api.ScheduleTraffic{tr(0, 9), tr(0, 9), tr(0, 0), tr(0, 0)}, p},
		{"bf16 when it moves less", []candidate{a, ap, p, pb}, []api.ScheduleTraffic{tr(9, 9), tr(8, 8), tr(8, 4), tr(4, 2)}, pb},
	} {
		if got := c.cands[pick(c.cands, c.traffic)]; got != c.want {
			t.Errorf("%s: picked %v, want %v", c.name, got, c.want)
		}
	}
}

func TestModelConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  ModelConfig
		want string // "" for a valid config
	}{
		{ModelConfig{}, ""},
		{ModelConfig{Schedule: "auto", Precision: "bf16"}, ""},
		{ModelConfig{Schedule: "P", Precision: "bf16"}, ""},
		{ModelConfig{Schedule: "p", Precision: "f32"}, ""},
		{ModelConfig{Schedule: "A+"}, ""},
		{ModelConfig{Schedule: "B"}, `config.yaml: schedule "B": want auto, A, A+ or P`},
		{ModelConfig{Schedule: "cellular"}, `config.yaml: schedule "cellular"`},
		{ModelConfig{Precision: "fp8"}, `config.yaml: precision "fp8": want f32, bf16 or int8`},
		{ModelConfig{Schedule: "A", Precision: "bf16"}, "config.yaml: precision bf16 with schedule A: only P stores bf16 weights"},
		{ModelConfig{Schedule: "A+", Precision: "bf16"}, "config.yaml: precision bf16 with schedule A+"},
	} {
		err := c.cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrModelConfig) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%+v: %v, want an ErrModelConfig mentioning %q", c.cfg, err, c.want)
		}
	}
	// The repository refuses it on loading, naming the model.
	repo := fstest.MapFS{
		"m/model.yaml":  testRepo["feat/model.yaml"],
		"m/config.yaml": {Data: []byte("schedule: A+\nprecision: bf16\n")},
	}
	_, err := LoadRepository(repo)
	if !errors.Is(err, ErrRepository) || !errors.Is(err, ErrModelConfig) || !strings.Contains(fmt.Sprint(err), `model "m": `) {
		t.Errorf("LoadRepository: %v", err)
	}
	// So does New, for entries built in code: the model is unavailable,
	// with the reason.
	entries, err := LoadRepository(fstest.MapFS{"m/model.yaml": testRepo["feat/model.yaml"]})
	if err != nil {
		t.Fatal(err)
	}
	entries[0].Config.Schedule = "Q"
	s, err := New(entries, testOptions(), testDeps(t, testOptions()))
	if err != nil {
		t.Fatal(err)
	}
	if u := s.Unavailable(); len(u) != 1 || u[0].Name != "m" || !strings.Contains(u[0].Err.Error(), "config.yaml") {
		t.Errorf("New: unavailable %v, want m with its config error", u)
	}
}

// A repository of one language model under P and one allowed bf16,
// both unbatched so that infer requests run whole plans.
var partRepo = fstest.MapFS{
	"plm/model.yaml":  {Data: []byte("cell: lstm\ninput_size: 16\nhidden_size: 64\nnum_layers: 2\nembedding: {vocab_size: 40}\nhead: {out_features: 40, activation: log_softmax}\nseed: 11\n")},
	"plm/config.yaml": {Data: []byte("batching: false\n")},
	"blm/model.yaml":  {Data: []byte("cell: gru\ninput_size: 16\nhidden_size: 64\nnum_layers: 2\nembedding: {vocab_size: 40}\nhead: {out_features: 40, activation: log_softmax}\nseed: 12\n")},
	"blm/config.yaml": {Data: []byte("batching: false\nprecision: bf16\n")},
}

// TestServeChosenSchedule serves models whose weights stream from a small
// private cache: auto picks P (P-bf16 where bf16 is allowed), the
// metadata and metrics say so, and concurrent requests get the outputs of
// A+ (within 1e-5 for P, within bf16's rounding for P-bf16).
func TestServeChosenSchedule(t *testing.T) {
	entries, err := LoadRepository(partRepo)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes, o.PrivateCacheBytes, o.TrafficSteps = 8<<20, 16<<10, 10
	o.Batching.Workers = 1 // one request at a time: P spreads over every core
	s, err := New(entries, o, testDeps(t, o))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := newHTTPTestServer(t, s)
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name, want string
		prec       schedule.Precision
		tol, least float64 // bounds of the largest relative difference from A+
	}{
		{"plm", "P", schedule.F32, 1e-5, 0},
		{"blm", "P-bf16", schedule.BF16, 2e-2, 1e-6}, // rounded weights must show
	} {
		m := seqOf(t, s, c.name)
		got := candidateOf(m.prog)
		if got.sched != schedule.Partitioned || got.prec != c.prec || got.workers != procs {
			t.Fatalf("%s runs %v on %d workers (%s), want %s on %d", c.name, got, got.workers, m.reason, c.want, procs)
		}
		_, body := get(t, hs.URL+"/v2/models/"+c.name)
		var md api.ModelMetadata
		if err := json.Unmarshal(body, &md); err != nil {
			t.Fatal(err)
		}
		if md.RNN.Schedule != c.want || !strings.HasPrefix(md.RNN.ScheduleReason, "auto: "+c.want+" on") {
			t.Errorf("%s metadata: schedule %q, reason %q", c.name, md.RNN.Schedule, md.RNN.ScheduleReason)
		}
		trafficOf(t, md.RNN.Traffic, c.want)

		tokens := [][]int64{{1, 5, 9, 30, 2, 39, 0}, {7, 7, 7, 3, 2, 1, 12}}
		want := reference(t, s, c.name, tokens, nil, nil)
		B, T, V := 2, 7, 40
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, resp, _ := post(t, hs.URL+"/v2/models/"+c.name+"/infer", `{"inputs": [`+tokensJSON(tokens)+`], "outputs": [{"name": "logits"}]}`)
				if code != 200 {
					t.Errorf("%s: %d %s", c.name, code, resp)
					return
				}
				logits := parseOutputs(t, resp)["logits"]
				if len(logits) != B*T*V {
					t.Errorf("%s: %d logits", c.name, len(logits))
					return
				}
				worst := 0.0
				for b := 0; b < B; b++ {
					for tt := 0; tt < T; tt++ {
						for v := 0; v < V; v++ {
							w := float64(want.Head[(tt*B+b)*V+v])
							worst = max(worst, math.Abs(logits[(b*T+tt)*V+v]-w)/math.Max(1, math.Abs(w)))
						}
					}
				}
				if worst > c.tol || worst < c.least {
					t.Errorf("%s: logits differ from A+ by %.3g (relative), want %g..%g", c.name, worst, c.least, c.tol)
				}
			}()
		}
		wg.Wait()
	}
	_, metrics := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		`rnnserve_model_info{batching="false",model="plm",schedule="P"} 1`,
		`rnnserve_model_info{batching="false",model="blm",schedule="P-bf16"} 1`,
		`rnnserve_model_dram_bytes_per_inference{model="blm",schedule="P-bf16"}`,
		`rnnserve_model_dre{model="plm",schedule="A+"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestProgramFor: the metadata's schedule names build the programs the
// server runs; anything else is an error.
func TestProgramFor(t *testing.T) {
	entries, err := LoadRepository(testRepo)
	if err != nil {
		t.Fatal(err)
	}
	net := entries[slices.IndexFunc(entries, func(e Entry) bool { return e.Name == "lm" })].Model.Net
	pools := testDeps(t, Options{Batching: BatchOptions{Workers: 1}}).Pools
	for _, name := range []string{"A", "A+", "P", "P-bf16"} {
		prog, err := ProgramFor(net, name, 2, pools)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := candidateOf(prog)
		if c.String() != name || c.sched == schedule.Partitioned && c.workers != min(2, runtime.GOMAXPROCS(0)) {
			t.Errorf("ProgramFor(%q, 2) runs %s on %d cores", name, c, c.workers)
		}
	}
	for _, name := range []string{"", "B", "A+-bf16", "cellular"} {
		if _, err := ProgramFor(net, name, 1, pools); err == nil {
			t.Errorf("ProgramFor(%q): no error", name)
		}
	}
}

func TestCoresPerRequest(t *testing.T) {
	for _, c := range []struct{ cores, concurrent, want int }{
		{2, 2, 1}, {2, 1, 2}, {8, 2, 4}, {1, 4, 1}, {3, 2, 1}, {4, 0, 4}, {1 << 20, 1, schedule.MaxWorkers},
	} {
		if got := coresPerRequest(c.cores, c.concurrent); got != c.want {
			t.Errorf("coresPerRequest(%d, %d) = %d, want %d", c.cores, c.concurrent, got, c.want)
		}
	}
}

// TestWidePays: P is taken over the clock's choice only when P across
// every core beats it and P on one request's cores is within
// widePreference of it.
func TestWidePays(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		chosen, narrow, wide time.Duration
		want                 bool
	}{
		{10 * ms, 10500 * time.Microsecond, 6 * ms, true},
		{10 * ms, 11 * ms, 6 * ms, true}, // exactly widePreference
		{10 * ms, 11200 * time.Microsecond, 6 * ms, false},
		{10 * ms, 10 * ms, 10 * ms, false}, // wide not faster
		{10 * ms, 9 * ms, 12 * ms, false},
	} {
		if got := widePays(c.chosen, c.narrow, c.wide); got != c.want {
			t.Errorf("widePays(%v, %v, %v) = %v, want %v", c.chosen, c.narrow, c.wide, got, c.want)
		}
	}
}

// TestClockPick: the clock's fastest is run only when it beats the
// traffic model's choice (first) by more than overruleMargin.
func TestClockPick(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		medians []time.Duration
		want    int
	}{
		{[]time.Duration{10 * ms, 11 * ms, 12 * ms}, 0},
		{[]time.Duration{10 * ms, 9600 * time.Microsecond, 12 * ms}, 0}, // 4% faster: within the margin
		{[]time.Duration{10 * ms, 12 * ms, 9400 * time.Microsecond}, 2}, // 6% faster
		{[]time.Duration{10 * ms, 9 * ms, 8 * ms}, 2},
		{[]time.Duration{10 * ms}, 0},
	} {
		if got := clockPick(c.medians); got != c.want {
			t.Errorf("clockPick(%v) = %d, want %d", c.medians, got, c.want)
		}
	}
}

// TestDecide: the clock overrules the traffic model's choice only when a
// second look at the two agrees, and says which happened.
func TestDecide(t *testing.T) {
	ms := time.Millisecond
	name := func(k int) string { return fmt.Sprintf("cand%d", k) }
	for _, c := range []struct {
		medians []time.Duration
		again   [2]time.Duration
		want    int
		says    string
		recheck bool
	}{
		{[]time.Duration{10 * ms, 11 * ms, 12 * ms}, [2]time.Duration{}, 0, "the clock agrees", false},
		{[]time.Duration{10 * ms, 9800 * time.Microsecond}, [2]time.Duration{}, 0, "the clock keeps it: no other", false},
		{[]time.Duration{10 * ms, 12 * ms, 8 * ms}, [2]time.Duration{10 * ms, 8 * ms}, 2, "overrules it: cand2 is the fastest by more than 5%, twice (then 8ms against 10ms)", true},
		{[]time.Duration{10 * ms, 12 * ms, 8 * ms}, [2]time.Duration{10 * ms, 9900 * time.Microsecond}, 0, "keeps it on a second look: cand2 was the fastest by more than 5%, then 9.9ms against 10ms", true},
		{[]time.Duration{10 * ms, 5 * ms}, [2]time.Duration{4 * ms, 5 * ms}, 0, "keeps it on a second look", true},
	} {
		asked := -1
		got, says, err := decide(c.medians, func(k int) ([2]time.Duration, error) { asked = k; return c.again, nil }, name)
		if err != nil || got != c.want || !strings.Contains(says, c.says) || (asked >= 0) != c.recheck {
			t.Errorf("decide(%v, again %v) = %d %q %v (rechecked %d), want %d %q", c.medians, c.again, got, says, err, asked, c.want, c.says)
		}
	}
	if _, _, err := decide([]time.Duration{10 * ms, 5 * ms}, func(int) ([2]time.Duration, error) { return [2]time.Duration{}, errors.New("plan failed") }, name); err == nil {
		t.Error("decide hid the second timing's error")
	}
}

// TestScheduleTiming turns the timing at load on: the traffic model's best
// three candidates are timed, the metadata shows their measured medians
// and how many runs each is of, the schedule that runs is the one with the
// least median or the traffic model's choice (within overruleMargin of it,
// or kept on a second look), and the reason says so. Whether a request may spread over
// every core is timed too, and kept only when it was faster.
func TestScheduleTiming(t *testing.T) {
	entries, err := LoadRepository(partRepo)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes, o.PrivateCacheBytes, o.TrafficSteps = 8<<20, 16<<10, 10
	o.ScheduleTiming = 40 * time.Millisecond
	s, err := New(entries, o, testDeps(t, o))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plm", "blm"} {
		m := seqOf(t, s, name)
		var timedRuns, best int
		var least float64
		for i, tr := range m.meta.RNN.Traffic {
			if tr.MeasuredSeconds == nil {
				continue
			}
			if *tr.MeasuredSeconds <= 0 || tr.MeasuredRuns < minTimedRuns {
				t.Errorf("%s %s: measured %v s over %d runs", name, tr.Schedule, *tr.MeasuredSeconds, tr.MeasuredRuns)
			}
			if timedRuns == 0 || *tr.MeasuredSeconds < least {
				least, best = *tr.MeasuredSeconds, i
			}
			timedRuns++
		}
		if timedRuns != timedCandidates {
			t.Fatalf("%s: %d candidates timed, want %d (%+v)", name, timedRuns, timedCandidates, m.meta.RNN.Traffic)
		}
		tookP := strings.Contains(m.reason, "takes P instead")
		kept := strings.Contains(m.reason, "the clock keeps it")
		got, fastest := m.meta.RNN.Schedule, m.meta.RNN.Traffic[best].Schedule
		if got != fastest && !(tookP && got == "P") && !kept {
			t.Errorf("%s runs %s, but %s had the least median (reason %q)", name, got, fastest, m.reason)
		}
		// Kept within the margin, or kept because a second look at the
		// two disagreed with the first timing (the metadata has the first).
		if kept && !strings.Contains(m.reason, "on a second look") {
			for _, tr := range m.meta.RNN.Traffic {
				if tr.Schedule == got && tr.MeasuredSeconds != nil && *tr.MeasuredSeconds > least/(1-overruleMargin) {
					t.Errorf("%s kept %s at %v s, more than the margin above the least median %v s", name, got, *tr.MeasuredSeconds, least)
				}
			}
		}
		if !strings.HasPrefix(got, "P") && runtime.GOMAXPROCS(0) > 1 && !strings.Contains(m.reason, "against P across all") {
			t.Errorf("%s: the clock chose %s, but the reason %q does not weigh P across all cores", name, fastest, m.reason)
		}
		if tookP && m.wide == nil {
			t.Errorf("%s took P for its wide form but has none", name)
		}
		if !strings.Contains(m.reason, "timed on this host") {
			t.Errorf("%s reason %q does not give the timing", name, m.reason)
		}
		if m.wide != nil && !strings.Contains(m.reason, "runs it across all of them") ||
			m.wide == nil && candidateOf(m.prog).sched == schedule.Partitioned && candidateOf(m.prog).workers < runtime.GOMAXPROCS(0) && !strings.Contains(m.reason, "stays on its own cores") {
			t.Errorf("%s: wide program %v, reason %q", name, m.wide != nil, m.reason)
		}
	}
	o.ScheduleTiming = -time.Second
	if err := o.Validate(); !errors.Is(err, ErrOptions) {
		t.Errorf("negative schedule_timing: %v", err)
	}
}
