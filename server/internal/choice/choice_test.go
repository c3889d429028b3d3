package choice

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// choose is Choose for a schedule and a precision named as config.yaml
// names them ("" or "auto": the rule; "": f32).
func choose(t testing.TB, net *rnn.Network, sched, prec string, h Host, pools Pools, budget time.Duration) (Candidate, string, []api.ScheduleTraffic, error) {
	t.Helper()
	p, err := schedule.ParsePrecision(prec)
	if err != nil {
		t.Fatal(err)
	}
	var want schedule.Schedule
	if sched != "" && sched != "auto" {
		if want, err = schedule.Parse(sched); err != nil {
			t.Fatal(err)
		}
	}
	return Choose(net, want, p, h, &Builds{Net: net, Pools: pools, Cores: h.Workers, LLC: h.LLC}, budget)
}

func dryNet(t testing.TB, cfg rnn.Config) *rnn.Network {
	t.Helper()
	net, err := rnn.NewNetwork(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	return net
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
	tm := Host{LLC: 8 << 20, Private: 256 << 10, Workers: 2, Steps: 20}
	c, why, traffic, err := choose(t, dryNet(t, streamingLSTM), "", "", tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(why)
	if c.String() != "P" || c.Workers != 2 || !strings.HasPrefix(why, "auto: P on 2 core(s)") {
		t.Errorf("chose %v on %d workers (%s), want P on 2", c, c.Workers, why)
	}
	if len(traffic) != 3 {
		t.Fatalf("%d candidates, want A, A+ and P", len(traffic))
	}
	a, ap, p := trafficOf(t, traffic, "A"), trafficOf(t, traffic, "A+"), trafficOf(t, traffic, "P")
	for _, tr := range traffic {
		if tr.WarmDRAMBytes != 0 || tr.DRAMBytes <= 0 || tr.PrivateCacheBytes != tm.Private || tr.CacheBytes != tm.LLC || tr.Precision != "f32" {
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
	tm := Host{LLC: 128 << 10, Private: 64 << 10, Workers: 1, Steps: 20}
	c, why, traffic, err := choose(t, dryNet(t, streamingLSTM), "", "", tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(why)
	a, ap := trafficOf(t, traffic, "A"), trafficOf(t, traffic, "A+")
	if ap.WarmDRAMBytes > 0.8*a.WarmDRAMBytes {
		t.Errorf("warm DRAM bytes A %.0f, A+ %.0f: want A+ well under A", a.WarmDRAMBytes, ap.WarmDRAMBytes)
	}
	if c.Sched == schedule.A {
		t.Errorf("chose A (%s)", why)
	}
	// Between A and A+ alone, the rule takes A+.
	cands := []Candidate{{Sched: schedule.A, Workers: 1}, {Sched: schedule.APlus, Workers: 1}}
	if got := pick(cands, []api.ScheduleTraffic{a, ap}); got != 1 {
		t.Errorf("between A and A+ picked %v", cands[got])
	}
}

// TestChooseScheduleBF16: P-bf16 is a candidate only when config.yaml
// allows bf16, wins when the weights stream, and loses a tie to P.
func TestChooseScheduleBF16(t *testing.T) {
	tm := Host{LLC: 8 << 20, Private: 256 << 10, Workers: 2, Steps: 20}
	net := dryNet(t, streamingLSTM)
	for _, prec := range []string{"", "f32"} {
		c, _, traffic, err := choose(t, net, "", prec, tm, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range traffic {
			if tr.Schedule == "P-bf16" || tr.Precision != "f32" {
				t.Errorf("precision %q: candidate %s (%s)", prec, tr.Schedule, tr.Precision)
			}
		}
		if c.Prec != schedule.F32 {
			t.Errorf("precision %q: chose %v", prec, c)
		}
	}
	c, why, traffic, err := choose(t, net, "", "bf16", tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, bf := trafficOf(t, traffic, "P"), trafficOf(t, traffic, "P-bf16")
	if c.String() != "P-bf16" || c.Prec != schedule.BF16 || bf.Precision != "bf16" {
		t.Errorf("bf16 allowed: chose %v (%s)", c, why)
	}
	if *bf.CoreBytes >= *p.CoreBytes || bf.WorkingSetBytes >= p.WorkingSetBytes || bf.DRAMBytes >= p.DRAMBytes {
		t.Errorf("P %+v (core %.0f), P-bf16 %+v (core %.0f): want bf16 smaller in every figure", p, *p.CoreBytes, bf, *bf.CoreBytes)
	}
	// A model that fits every cache: nothing to gain from bf16.
	small := dryNet(t, rnn.Config{Cell: rnn.GRU, Input: 4, Hidden: 8, Layers: 1})
	c, why, _, err = choose(t, small, "", "bf16", Host{LLC: 1 << 20, Private: 1 << 20, Workers: 2, Steps: 5}, nil, 0)
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
	tm := Host{LLC: 8 << 20, Private: 256 << 10, Workers: 3, Steps: 5}
	net := dryNet(t, streamingLSTM)
	for _, c := range []struct {
		sched   string
		prec    string
		want    string
		workers int
		n       int
	}{
		{"A", "", "A", 1, 3},
		{"a+", "", "A+", 1, 3},
		{"P", "", "P", 3, 3},
		{"P", "bf16", "P-bf16", 3, 4},
	} {
		got, why, traffic, err := choose(t, net, c.sched, c.prec, tm, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != c.want || got.Workers != c.workers || why != "set in the model's config.yaml" || len(traffic) != c.n {
			t.Errorf("%s %s: %v on %d workers (%s), %d candidates; want %s on %d, %d", c.sched, c.prec, got, got.Workers, why, len(traffic), c.want, c.workers, c.n)
		}
	}
}

// TestPick applies the rule to made-up figures.
func TestPick(t *testing.T) {
	a := Candidate{Sched: schedule.A, Workers: 1}
	ap := Candidate{Sched: schedule.APlus, Workers: 1}
	p := Candidate{Sched: schedule.Partitioned, Workers: 2}
	pb := Candidate{Sched: schedule.Partitioned, Prec: schedule.BF16, Workers: 2}
	tr := func(dram, core float64) api.ScheduleTraffic {
		return api.ScheduleTraffic{WarmDRAMBytes: dram, CoreBytes: &core}
	}
	for _, c := range []struct {
		name    string
		cands   []Candidate
		traffic []api.ScheduleTraffic
		want    Candidate
	}{
		{"least DRAM, nothing else within 2%", []Candidate{a, ap, p}, []api.ScheduleTraffic{tr(100, 1), tr(200, 1), tr(103, 0)}, a},
		{"within 2%: least per-core", []Candidate{a, ap, p}, []api.ScheduleTraffic{tr(100, 50), tr(101.9, 40), tr(102.1, 10)}, ap},
		{"all tie: P", []Candidate{a, ap, p}, []api.ScheduleTraffic{tr(0, 7), tr(0, 7), tr(0, 7)}, p},
		{"A+ over A on a tie", []Candidate{a, ap}, []api.ScheduleTraffic{tr(5, 5), tr(5, 5)}, ap},
		{"P over P-bf16 on a tie", []Candidate{a, ap, p, pb}, []api.ScheduleTraffic{tr(0, 9), tr(0, 9), tr(0, 0), tr(0, 0)}, p},
		{"bf16 when it moves less", []Candidate{a, ap, p, pb}, []api.ScheduleTraffic{tr(9, 9), tr(8, 8), tr(8, 4), tr(4, 2)}, pb},
	} {
		if got := c.cands[pick(c.cands, c.traffic)]; got != c.want {
			t.Errorf("%s: picked %v, want %v", c.name, got, c.want)
		}
	}
}

// TestProgramFor: the metadata's schedule names build the programs the
// server runs; anything else is an error.
func TestProgramFor(t *testing.T) {
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 8, Hidden: 16, Layers: 2, Vocab: 256, HeadOut: 256, Activation: rnn.ActLogSoftmax}, false)
	if err != nil {
		t.Fatal(err)
	}
	pools := Pools{}
	if n := min(2, runtime.GOMAXPROCS(0)); n > 1 {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[n] = p
	}
	for _, name := range []string{"A", "A+", "P", "P-bf16"} {
		prog, err := ProgramFor(net, name, 2, pools)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := Of(prog)
		if c.String() != name || c.Sched == schedule.Partitioned && c.Workers != min(2, runtime.GOMAXPROCS(0)) {
			t.Errorf("ProgramFor(%q, 2) runs %s on %d cores", name, c, c.Workers)
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
		if got := CoresPerRequest(c.cores, c.concurrent); got != c.want {
			t.Errorf("CoresPerRequest(%d, %d) = %d, want %d", c.cores, c.concurrent, got, c.want)
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
// traffic model's choice (first) by more than OverruleMargin.
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

// TestWideVerdict: P across every core is given up only when two looks
// both find it no faster than P on one request's cores.
func TestWideVerdict(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		looks []([2]time.Duration)
		want  bool
		says  string
	}{
		{[][2]time.Duration{{2 * ms, 1 * ms}}, true, "runs it across all of them: on 1 core(s) 2ms, on 2 1ms"},
		{[][2]time.Duration{{2 * ms, 2 * ms}, {2 * ms, 1 * ms}}, true, "across all of them, on a second look: on 1 core(s) 2ms, on 2 2ms, then 2ms and 1ms"},
		{[][2]time.Duration{{2 * ms, 3 * ms}, {2 * ms, 2100 * time.Microsecond}}, false, "stays on its own cores (not faster across all of them here, twice): on 1 core(s) 2ms, on 2 3ms, then 2ms and 2.1ms"},
	} {
		n := 0
		got, says, err := wideVerdict(func() ([2]time.Duration, error) {
			if n >= len(c.looks) {
				t.Fatalf("looked %d times, want %d", n+1, len(c.looks))
			}
			n++
			return c.looks[n-1], nil
		}, 1, 2)
		if err != nil || got != c.want || !strings.Contains(says, c.says) || n != len(c.looks) {
			t.Errorf("wideVerdict(%v) = %v %q %v after %d looks, want %v %q", c.looks, got, says, err, n, c.want, c.says)
		}
	}
	n := 0
	if _, _, err := wideVerdict(func() ([2]time.Duration, error) {
		if n++; n == 2 {
			return [2]time.Duration{}, errors.New("plan failed")
		}
		return [2]time.Duration{ms, 2 * ms}, nil
	}, 1, 2); err == nil {
		t.Error("wideVerdict hid the second look's error")
	}
}

// TestChooseScheduleInt8: P-int8 is a candidate only when config.yaml
// asks for int8, wins when the weights stream, loses a tie to P, and only
// P stores int8 weights.
func TestChooseScheduleInt8(t *testing.T) {
	tm := Host{LLC: 8 << 20, Private: 256 << 10, Workers: 2, Steps: 20}
	net := dryNet(t, streamingLSTM)
	for _, prec := range []string{"", "f32", "bf16"} {
		_, _, traffic, err := choose(t, net, "", prec, tm, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range traffic {
			if tr.Schedule == "P-int8" || tr.Precision == "int8" {
				t.Errorf("precision %q: candidate %s (%s)", prec, tr.Schedule, tr.Precision)
			}
		}
	}
	c, why, traffic, err := choose(t, net, "", "int8", tm, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, i8 := trafficOf(t, traffic, "P"), trafficOf(t, traffic, "P-int8")
	if c.String() != "P-int8" || c.Prec != schedule.Int8 || i8.Precision != "int8" || c.StepperPrecision() != schedule.Int8 {
		t.Errorf("int8 asked for: chose %v (%s)", c, why)
	}
	if *i8.CoreBytes >= *p.CoreBytes/3 || i8.WorkingSetBytes >= p.WorkingSetBytes/3 {
		t.Errorf("P %+v (core %.0f), P-int8 %+v (core %.0f): want int8 under a third in every figure", p, *p.CoreBytes, i8, *i8.CoreBytes)
	}
	small := dryNet(t, rnn.Config{Cell: rnn.GRU, Input: 4, Hidden: 8, Layers: 1})
	c, why, _, err = choose(t, small, "", "int8", Host{LLC: 1 << 20, Private: 1 << 20, Workers: 2, Steps: 5}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != "P" || c.StepperPrecision() != schedule.F32 || !strings.Contains(why, "tied with") {
		t.Errorf("a model that fits: chose %v (%s), want P on a tie", c, why)
	}
	c, _, traffic, err = choose(t, net, "P", "int8", tm, nil, 0)
	if err != nil || c.String() != "P-int8" || len(traffic) != 4 {
		t.Errorf("schedule P, precision int8: %v, %d candidates (%v)", c, len(traffic), err)
	}
	pb := Candidate{Sched: schedule.Partitioned, Prec: schedule.BF16, Workers: 2}
	pi := Candidate{Sched: schedule.Partitioned, Prec: schedule.Int8, Workers: 2}
	zero := 0.0
	tie := []api.ScheduleTraffic{{CoreBytes: &zero}, {CoreBytes: &zero}}
	if got := pick([]Candidate{pi, pb}, tie); got != 1 {
		t.Errorf("P-int8 against P-bf16 on a tie: picked P-int8")
	}
}

// BenchmarkChoiceTableI checks schedule: auto against the clock over Table
// I shapes (LSTM and GRU, hidden 64, 256 and 1024, 1 and 4 layers,
// T = 10 and 100, batch 1, random weights) at 1 core and at GOMAXPROCS
// cores: for each shape and core count it makes the server's choice as a
// model load does (traffic model, then the default timing budget), then
// times every candidate afresh, alternating, for -choicetime, and prints
// the chosen schedule's median time beside the fastest's. The metric
// worst_chosen/fastest is the largest ratio over all shapes (the target:
// at most 1.10). Run
//
//	go test ./server/internal/choice -run '^$' -bench ChoiceTableI -benchtime 1x
func BenchmarkChoiceTableI(b *testing.B) {
	cores := []int{1}
	if n := runtime.GOMAXPROCS(0); n > 1 {
		cores = append(cores, min(n, schedule.MaxWorkers))
	}
	pools := Pools{}
	for _, n := range cores {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		pools[n] = p
	}
	budget := DefaultTiming
	var out strings.Builder
	fmt.Fprintf(&out, "\n| cell | hidden | layers | T | cores | chosen | chosen µs | fastest | fastest µs | chosen/fastest |\n|---|---:|---:|---:|---:|---|---:|---|---:|---:|\n")
	worst := 0.0
	for range b.N {
		for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
			for _, hidden := range []int{64, 256, 1024} {
				for _, layers := range []int{1, 4} {
					net, err := rnn.NewNetwork(rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, false)
					if err != nil {
						b.Fatal(err)
					}
					models.Randomize(net, 1)
					for _, T := range []int{10, 100} {
						for _, c := range cores {
							tm := Host{LLC: LLCOrDefault(0), Private: PrivateOrDefault(0), Workers: c, Steps: T}
							chosen, _, _, err := Choose(net, 0, schedule.F32, tm, &Builds{Net: net, Pools: pools, Cores: c, LLC: tm.LLC}, budget)
							if err != nil {
								b.Fatal(err)
							}
							cands := []Candidate{{Sched: schedule.A, Workers: 1}, {Sched: schedule.APlus, Workers: 1}, {Sched: schedule.Partitioned, Workers: c}}
							progs := make([]*schedule.Program, len(cands))
							at := -1
							for i, cd := range cands {
								if progs[i], err = cd.Program(net, pools); err != nil {
									b.Fatal(err)
								}
								if cd == chosen {
									at = i
								}
							}
							if at < 0 {
								b.Fatalf("auto chose %v, not a candidate", chosen)
							}
							ts, err := timePrograms(progs, ReferenceInput(net, T), *choiceTime, nil)
							if err != nil {
								b.Fatal(err)
							}
							fastest := 0
							for i := range ts {
								if ts[i].median < ts[fastest].median {
									fastest = i
								}
							}
							ratio := float64(ts[at].median) / float64(ts[fastest].median)
							worst = max(worst, ratio)
							fmt.Fprintf(&out, "| %v | %d | %d | %d | %d | %v | %.1f | %v | %.1f | %.2f |\n", cell, hidden, layers, T, c,
								chosen, us(ts[at].median), cands[fastest], us(ts[fastest].median), ratio)
						}
					}
				}
			}
		}
	}
	b.ReportMetric(worst, "worst_chosen/fastest")
	fmt.Print(out.String()) // the table, whole (b.Log would cut it)
}

var choiceTime = flag.Duration("choicetime", time.Second, "BenchmarkChoiceTableI: how long to time each shape's candidates")

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// TestChooseTrafficSerial: where P on one core runs as the Serial form of
// P across all cores (weights larger than the LLC, two cores), the
// traffic Choose ranks and reports for it is the cache replay of that
// program's plan, not of a one-core P with weights of its own; where it
// does not (one core), it is the latter's.
func TestChooseTrafficSerial(t *testing.T) {
	net := dryNet(t, streamingLSTM)
	h := Host{LLC: 128 << 10, Private: 64 << 10, Workers: 1, Steps: 20}
	replay := func(prog *schedule.Program) api.ScheduleTraffic {
		t.Helper()
		p, err := prog.Plan(dre.DryInput(net, h.Steps, 1, 1), schedule.PlanOptions{Head: true})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := dre.Analyze(p, dre.WorkingSetOfProgram(prog, h.Steps, 1),
			dre.Options{Cache: cachesim.Config{Size: h.LLC}, Runs: dre.DefaultRuns, PrivateCache: cachesim.Config{Size: h.Private}})
		if err != nil {
			t.Fatal(err)
		}
		core := slices.Max(rep.Workers)
		return api.ScheduleTraffic{DRAMBytes: rep.AvgRW, WarmDRAMBytes: rep.WarmRW(), CoreBytes: &core}
	}
	wide, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	own, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	serial, copied := replay(wide.Serial()), replay(own)
	if serial.WarmDRAMBytes == copied.WarmDRAMBytes && *serial.CoreBytes == *copied.CoreBytes {
		t.Fatalf("the Serial form and a copy of its own model the same traffic (%.0f, %.0f): the test tells nothing",
			serial.WarmDRAMBytes, *serial.CoreBytes)
	}
	for _, c := range []struct {
		cores int
		want  api.ScheduleTraffic
	}{{2, serial}, {1, copied}} {
		b := &Builds{Net: net, Cores: c.cores, LLC: h.LLC}
		if s, err := b.Serial(Candidate{Sched: schedule.Partitioned, Workers: 1}); err != nil || s != (c.cores == 2) {
			t.Fatalf("cores %d: Serial = %v (%v)", c.cores, s, err)
		}
		_, _, traffic, err := Choose(net, 0, schedule.F32, h, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := trafficOf(t, traffic, "P")
		if got.DRAMBytes != c.want.DRAMBytes || got.WarmDRAMBytes != c.want.WarmDRAMBytes || *got.CoreBytes != *c.want.CoreBytes {
			t.Errorf("cores %d: P on one core modelled at %.0f DRAM bytes (%.0f warm), %.0f per core; its served program's plan replays to %.0f (%.0f), %.0f",
				c.cores, got.DRAMBytes, got.WarmDRAMBytes, *got.CoreBytes, c.want.DRAMBytes, c.want.WarmDRAMBytes, *c.want.CoreBytes)
		}
	}
}
