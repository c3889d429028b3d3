package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// newHTTPTestServer serves s for one test and stops both afterwards.
func newHTTPTestServer(t testing.TB, s *Server) *httptest.Server {
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Stop(context.Background())
	})
	return hs
}

// TestModelConfigErrors: the repository refuses a model whose
// config.yaml values are invalid with server's errors (package repository
// tests the values), and so does New, for entries built in code: the
// model is unavailable, with the reason.
func TestModelConfigErrors(t *testing.T) {
	bad := fstest.MapFS{"m/model.yaml": testRepo["feat/model.yaml"], "m/config.yaml": {Data: []byte("schedule: A+\nprecision: bf16\n")}}
	if _, err := LoadRepository(bad); !errors.Is(err, ErrRepository) || !errors.Is(err, ErrModelConfig) {
		t.Errorf("LoadRepository: %v, want an ErrRepository and an ErrModelConfig", err)
	}
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
		got := choice.Of(m.form.Load().prog)
		if got.Sched != schedule.Partitioned || got.Prec != c.prec || got.Workers != procs {
			t.Fatalf("%s runs %v on %d workers (%s), want %s on %d", c.name, got, got.Workers, reasonOf(m), c.want, procs)
		}
		_, body := get(t, hs.URL+"/v2/models/"+c.name)
		var md api.ModelMetadata
		if err := json.Unmarshal(body, &md); err != nil {
			t.Fatal(err)
		}
		if md.RNN.Schedule != c.want || !strings.HasPrefix(md.RNN.ScheduleReason, "auto: "+c.want+" on") {
			t.Errorf("%s metadata: schedule %q, reason %q", c.name, md.RNN.Schedule, md.RNN.ScheduleReason)
		}
		if !slices.ContainsFunc(md.RNN.Traffic, func(tr api.ScheduleTraffic) bool { return tr.Schedule == c.want && tr.CoreBytes != nil }) {
			t.Errorf("%s metadata: no modelled traffic of %s with its per-core figure: %+v", c.name, c.want, md.RNN.Traffic)
		}

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

// TestScheduleTiming turns the timing at load on: the traffic model's best
// three candidates are timed, the metadata shows their measured medians
// and how many runs each is of, the schedule that runs is the one with the
// least median or the traffic model's choice (within choice.OverruleMargin of it,
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
			if *tr.MeasuredSeconds <= 0 || tr.MeasuredRuns < choice.MinTimedRuns {
				t.Errorf("%s %s: measured %v s over %d runs", name, tr.Schedule, *tr.MeasuredSeconds, tr.MeasuredRuns)
			}
			if timedRuns == 0 || *tr.MeasuredSeconds < least {
				least, best = *tr.MeasuredSeconds, i
			}
			timedRuns++
		}
		if timedRuns != choice.TimedCandidates {
			t.Fatalf("%s: %d candidates timed, want %d (%+v)", name, timedRuns, choice.TimedCandidates, m.meta.RNN.Traffic)
		}
		tookP := strings.Contains(reasonOf(m), "takes P instead")
		kept := strings.Contains(reasonOf(m), "the clock keeps it")
		got, fastest := m.meta.RNN.Schedule, m.meta.RNN.Traffic[best].Schedule
		if got != fastest && !(tookP && got == "P") && !kept {
			t.Errorf("%s runs %s, but %s had the least median (reason %q)", name, got, fastest, reasonOf(m))
		}
		// Kept within the margin, or kept because a second look at the
		// two disagreed with the first timing (the metadata has the first).
		if kept && !strings.Contains(reasonOf(m), "on a second look") {
			for _, tr := range m.meta.RNN.Traffic {
				if tr.Schedule == got && tr.MeasuredSeconds != nil && *tr.MeasuredSeconds > least/(1-choice.OverruleMargin) {
					t.Errorf("%s kept %s at %v s, more than the margin above the least median %v s", name, got, *tr.MeasuredSeconds, least)
				}
			}
		}
		if !strings.HasPrefix(got, "P") && runtime.GOMAXPROCS(0) > 1 && !strings.Contains(reasonOf(m), "against P across all") {
			t.Errorf("%s: the clock chose %s, but the reason %q does not weigh P across all cores", name, fastest, reasonOf(m))
		}
		if tookP && m.form.Load().wide == nil {
			t.Errorf("%s took P for its wide form but has none", name)
		}
		if !strings.Contains(reasonOf(m), "timed on this host") {
			t.Errorf("%s reason %q does not give the timing", name, reasonOf(m))
		}
		if m.form.Load().wide != nil && !strings.Contains(reasonOf(m), "runs it across all of them") ||
			m.form.Load().wide == nil && choice.Of(m.form.Load().prog).Sched == schedule.Partitioned && choice.Of(m.form.Load().prog).Workers < runtime.GOMAXPROCS(0) && !strings.Contains(reasonOf(m), "stays on its own cores") {
			t.Errorf("%s: wide program %v, reason %q", name, m.form.Load().wide != nil, reasonOf(m))
		}
	}
	o.ScheduleTiming = -time.Second
	if err := o.Validate(); !errors.Is(err, ErrOptions) {
		t.Errorf("negative schedule_timing: %v", err)
	}
}
