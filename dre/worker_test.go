package dre

import (
	"errors"
	"math"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// counter is a Sink that only adds up bytes.
type counter struct{ reads, writes, read, written int64 }

func (c *counter) Read(_, n int64)  { c.reads++; c.read += n }
func (c *counter) Write(_, n int64) { c.writes++; c.written += n }

func partPlan(t testing.TB, cfg rnn.Config, workers int, prec schedule.Precision, T int) (*schedule.Program, *schedule.Plan) {
	t.Helper()
	net := dryNet(t, cfg)
	// The 1 MiB L2 per core of the project's AMD host, whatever this host's:
	// the tests' expectations (which slices alternate) are for it.
	prog, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Workers: workers, Precision: prec, PrivateCacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p, err := prog.Plan(DryInput(net, T, 1, 1), schedule.PlanOptions{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	return prog, p
}

// TestReplayWorkerPartitions checks that the workers' sub-traces of a
// partitioned plan split the whole trace: every request goes to exactly
// one worker, and the workers' weight bytes are each about half.
func TestReplayWorkerPartitions(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 24, Hidden: 64, Proj: 16, Layers: 2, Vocab: 30, HeadOut: 30}
	_, p := partPlan(t, cfg, 2, schedule.F32, 7)
	l := NewLayout(p.Buffers)
	var all counter
	if err := Replay(p, l, &all); err != nil {
		t.Fatal(err)
	}
	var sum counter
	for w := range p.Workers() {
		var c counter
		if err := ReplayWorker(p, l, w, &c); err != nil {
			t.Fatal(err)
		}
		if c.reads == 0 || c.read > all.read*6/10 {
			t.Errorf("worker %d reads %d of the plan's %d bytes, want about half", w, c.read, all.read)
		}
		sum.reads, sum.writes, sum.read, sum.written = sum.reads+c.reads, sum.writes+c.writes, sum.read+c.read, sum.written+c.written
	}
	if sum != all {
		t.Errorf("the workers' traces add up to %+v, the plan's is %+v", sum, all)
	}
	if p.Workers() != 2 {
		t.Errorf("plan on %d workers, want 2", p.Workers())
	}
	if err := ReplayWorker(p, NewLayout(p.Buffers[1:]), 0, &sum); !errors.Is(err, ErrPlan) {
		t.Errorf("a layout without the plan's first buffer: %v, want ErrPlan", err)
	}
}

// workerBytes analyses p with a private cache cfg and returns each
// worker's warm bytes.
func workerBytes(t *testing.T, prog *schedule.Program, p *schedule.Plan, cfg cachesim.Config) []float64 {
	t.Helper()
	r, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: 32 << 20}, Runs: 10, PrivateCache: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Workers) != p.Workers() {
		t.Fatalf("%d worker figures for a plan on %d workers", len(r.Workers), p.Workers())
	}
	return r.Workers
}

// TestPrivateCacheTraffic compares the per-core traffic of a 2-worker
// partitioned plan with A+'s, whose plan runs on one core. In a private
// cache too small to keep W_hh between steps, A+'s core streams all of
// W_hh every step and each P worker its half; in one that holds all a
// worker touches but not A+'s W_hh with the rest, P's cores move nothing
// once warm while A+'s core streams W_hh again.
func TestPrivateCacheTraffic(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 32, Hidden: 128, Layers: 1}
	const T = 20
	aprog, ap := dryPlan(t, cfg, schedule.APlus, T, 1)
	pprog, pp := partPlan(t, cfg, 2, schedule.F32, T)
	whh := float64(4 * 128 * 128 * 4) // 256 KiB
	small := cachesim.Config{Size: 16 << 10}

	atr := workerBytes(t, aprog, ap, small)
	// One core: the same as the whole plan through the private cache.
	whole, err := Analyze(ap, WorkingSetOfProgram(aprog, T, 1), Options{Cache: small, Runs: 10})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(whole.WarmRW()-atr[0]) > 1e-9*atr[0] {
		t.Errorf("A+ worker 0 %.0f bytes, whole plan %.0f", atr[0], whole.WarmRW())
	}
	ptr := workerBytes(t, pprog, pp, small)
	a := atr[0]
	if a < (T-1)*whh || a > (T+2)*whh {
		t.Errorf("A+ core moves %.0f bytes per inference, want about %d W_hh (%.0f bytes each)", a, T, whh)
	}
	for w, got := range ptr {
		t.Logf("16 KiB private cache: A+ %.0f bytes, P worker %d %.0f bytes per inference", a, w, got)
		if r := got / a; r < 0.45 || r > 0.6 {
			t.Errorf("P worker %d moves %.3f of A+'s bytes, want about half", w, r)
		}
	}

	// 256 KiB holds one worker's W_ih and W_hh (160 KiB) and scratch, but
	// not A+'s W_hh (256 KiB) with anything else.
	mid := cachesim.Config{Size: 256 << 10}
	a = workerBytes(t, aprog, ap, mid)[0]
	for w, got := range workerBytes(t, pprog, pp, mid) {
		t.Logf("256 KiB private cache: A+ %.0f bytes, P worker %d %.0f bytes per inference", a, w, got)
		if got > 0.1*a {
			t.Errorf("P worker %d moves %.0f bytes, A+ %.0f: want P's weights to stay", w, got, a)
		}
	}
}

// TestWarm checks WarmRW and WarmBytes: a model that fits in the cache
// moves bytes only in its cold run, and one that does not moves the same
// in every run.
func TestWarm(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.GRU, Input: 16, Hidden: 32, Layers: 2}
	prog, p := dryPlan(t, cfg, schedule.APlus, 10, 1)
	fits, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if fits.AvgRW <= 0 || fits.WarmRW() != 0 {
		t.Errorf("fitting model: AvgRW %v, WarmRW %v; want > 0 and 0", fits.AvgRW, fits.WarmRW())
	}
	thrash, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: 4 << 10}, Runs: 7})
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(thrash.Steady.Read + thrash.Steady.Write); thrash.Period != 1 || math.Abs(thrash.WarmRW()-want) > 1e-9*want {
		t.Errorf("thrashing model: WarmRW %v, steady run %v (period %d)", thrash.WarmRW(), want, thrash.Period)
	}
	c, _ := NewCache(cachesim.Config{Size: 1 << 20, Ways: cachesim.FullyAssociative})
	l := NewLayout(p.Buffers)
	tr := simulate(c, 5, func(s cachesim.Sink) { replay(p, l, s) }, true)
	if tr.WarmBytes() != 0 || (Traffic{Runs: 1, Cold: tr.Cold}).WarmBytes() != float64(tr.Cold.ReadBytes()+tr.Cold.WriteBytes()) {
		t.Errorf("WarmBytes %v of %+v", tr.WarmBytes(), tr)
	}
}

// TestWorkingSetOfPrecision checks that bf16 storage halves the recurrent
// weights of the working set and nothing else, and that Analyze counts a
// bf16 partitioned plan's weights at 2 bytes.
func TestWorkingSetOfPrecision(t *testing.T) {
	// W_ih 16×3, W_hh 16×2, W_hr 2×4: 88 recurrent weights; biases 2×16.
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Proj: 2, Layers: 1, Vocab: 5, HeadOut: 6}
	net := dryNet(t, cfg)
	f32 := WorkingSetOfPrecision(net, 3, 1, schedule.F32)
	if f32 != WorkingSetOf(net, 3, 1) {
		t.Errorf("F32 %+v differs from WorkingSetOf %+v", f32, WorkingSetOf(net, 3, 1))
	}
	bf16 := WorkingSetOfPrecision(net, 3, 1, schedule.BF16)
	head := int64(4 * (6*2 + 6))
	if want := 2*88 + 4*32 + head; bf16.Weights != want || f32.Weights != 4*88+4*32+head {
		t.Errorf("weights: bf16 %d, f32 %d; want %d, %d", bf16.Weights, f32.Weights, want, 4*88+4*32+head)
	}
	if bf16.Embedding != f32.Embedding || bf16.Intermediate != f32.Intermediate || bf16.Total != bf16.Weights+bf16.Embedding+bf16.Intermediate {
		t.Errorf("bf16 %+v, f32 %+v: only the weights may differ", bf16, f32)
	}

	// A GRU keeps both biases in a partitioned plan, so the working set's
	// weights and embedding are exactly the plan's weight buffers.
	gru := rnn.Config{Cell: rnn.GRU, Input: 10, Hidden: 24, Layers: 2, Vocab: 11, HeadOut: 11}
	for _, prec := range []schedule.Precision{schedule.F32, schedule.BF16} {
		prog, p := partPlan(t, gru, 2, prec, 5)
		r, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: 64 << 10}, Runs: 3})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.WorkingSet.Weights + r.WorkingSet.Embedding; got != r.PlanBytes.Weights {
			t.Errorf("%v: working set weights+embedding %d bytes, plan weights %d", prec, got, r.PlanBytes.Weights)
		}
		if want := WorkingSetOfPrecision(dryNet(t, gru), 5, 1, prec); r.WorkingSet != want {
			t.Errorf("%v: report working set %+v, want %+v", prec, r.WorkingSet, want)
		}
	}
}

// TestAlternatingStepsReuseCache: P reads W_hh forwards at even steps and
// backwards at odd ones, so a worker whose W_hh is about its private
// cache's size finds most of it still there at the next step. Through a
// 1 MiB fully associative LRU, an LSTM of hidden 256 (1 MiB of W_hh) or
// a GRU of hidden 320 (1.2 MiB) whose every step read W_hh forwards would
// miss all of it, the cyclic pattern LRU is worst at; alternating, a warm
// step misses a sixth to a third of it.
func TestAlternatingStepsReuseCache(t *testing.T) {
	for _, cfg := range []rnn.Config{
		{Cell: rnn.LSTM, Input: 256, Hidden: 256, Layers: 1},
		{Cell: rnn.GRU, Input: 320, Hidden: 320, Layers: 1},
	} {
		const T = 100
		prog, p := partPlan(t, cfg, 1, schedule.F32, T)
		r, err := Analyze(p, WorkingSetOfProgram(prog, T, 1), Options{Runs: 3, PrivateCache: cachesim.Config{Size: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		whh := float64(cfg.Cell.Gates() * cfg.Hidden * cfg.Hidden * 4)
		perStep := r.Workers[0] / T
		t.Logf("%v hidden %d: warm private-cache traffic %.0f bytes a step, W_hh %.0f", cfg.Cell, cfg.Hidden, perStep, whh)
		if perStep > whh/2 {
			t.Errorf("%v hidden %d: a warm step reads %.0f bytes past a 1 MiB LRU, want at most half of W_hh (%.0f): are the steps not alternating?",
				cfg.Cell, cfg.Hidden, perStep, whh/2)
		}
	}
}
