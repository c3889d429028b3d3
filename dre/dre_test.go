package dre

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

func dryNet(t testing.TB, cfg rnn.Config) *rnn.Network {
	t.Helper()
	net, err := rnn.NewNetwork(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	return net
}

func dryPlan(t testing.TB, cfg rnn.Config, s schedule.Schedule, T, B int) (*schedule.Program, *schedule.Plan) {
	t.Helper()
	prog, p, err := DryPlan(dryNet(t, cfg), s, T, B, 1)
	if err != nil {
		t.Fatal(err)
	}
	return prog, p
}

// The paper's Section IV example: one LSTM layer, input and hidden size
// 512, so that G is 8 MiB (four 1 MiB W and four 1 MiB U matrices).
var paperLSTM = rnn.Config{Cell: rnn.LSTM, Input: 512, Hidden: 512, Layers: 1}

// TestWorkedExample reproduces Section IV: with T = 100 and a cache smaller
// than G (2 MiB), Schedule A reads G from DRAM at every step, 800 MB per
// inference, and Schedule A+ reads G1 once and G2 at every step, 404 MB.
// The paper's MB are MiB (each 512×512 float32 matrix is "1 MB").
func TestWorkedExample(t *testing.T) {
	for _, tc := range []struct {
		s     schedule.Schedule
		paper float64 // MiB read per inference
	}{{schedule.A, 800}, {schedule.APlus, 404}} {
		prog, p := dryPlan(t, paperLSTM, tc.s, 100, 1)
		r, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: 2 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		got := float64(r.Steady.Read) / (1 << 20)
		t.Logf("Schedule %v: steady state reads %.1f MiB per inference (paper: %.0f MB), writes %.2f MiB; AvgRW %.1f MiB, DRE %.1f",
			tc.s, got, tc.paper, float64(r.Steady.Write)/(1<<20), r.AvgRW/(1<<20), r.DRE)
		if math.Abs(got-tc.paper)/tc.paper > 0.02 {
			t.Errorf("Schedule %v reads %.1f MiB per inference, want %.0f ± 2%%", tc.s, got, tc.paper)
		}
	}
}

// shortcutPlans are small plans covering the schedules, cells,
// embeddings, heads, bidirectional layers (strided regions), projections
// and batches.
func shortcutPlans(t testing.TB) map[string][2]any {
	plans := map[string][2]any{}
	for name, tc := range map[string]struct {
		cfg  rnn.Config
		s    schedule.Schedule
		T, B int
	}{
		"lstm-embed-head-A":  {rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 32, Layers: 2, Vocab: 50, HeadOut: 50, Activation: rnn.ActLogSoftmax}, schedule.A, 12, 1},
		"lstm-embed-head-A+": {rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 32, Layers: 2, Vocab: 50, HeadOut: 50, Activation: rnn.ActLogSoftmax}, schedule.APlus, 12, 1},
		"gru-bidir-A-b2":     {rnn.Config{Cell: rnn.GRU, Input: 8, Hidden: 24, Layers: 3, Bidirectional: true}, schedule.A, 7, 2},
		"gru-bidir-A+-b2":    {rnn.Config{Cell: rnn.GRU, Input: 8, Hidden: 24, Layers: 3, Bidirectional: true}, schedule.APlus, 7, 2},
		"lstm-proj-A":        {rnn.Config{Cell: rnn.LSTM, Input: 10, Hidden: 20, Proj: 8, Layers: 2}, schedule.A, 9, 1},
		"elman-bidir-A-b2":   {rnn.Config{Cell: rnn.RNNReLU, Input: 8, Hidden: 24, Layers: 2, Bidirectional: true}, schedule.A, 7, 2},
		"elman-head-A+":      {rnn.Config{Cell: rnn.RNNTanh, Input: 16, Hidden: 40, Layers: 2, Vocab: 30, HeadOut: 30}, schedule.APlus, 10, 1},
	} {
		prog, p := dryPlan(t, tc.cfg, tc.s, tc.T, tc.B)
		plans[name] = [2]any{prog, p}
	}
	return plans
}

// cacheSizes returns sizes from a few lines to more than the footprint,
// multiples of 4 lines of 64 bytes.
func cacheSizes(p *schedule.Plan) []int64 {
	var foot int64
	for _, s := range footprint(p, NewLayout(p.Buffers), 64) {
		foot += s.last - s.first + 1
	}
	var sizes []int64
	for _, lines := range []int64{4, foot / 8, foot / 3, foot / 2, foot - 4, foot + 4, 2 * foot} {
		sizes = append(sizes, max(4, lines/4*4)*64)
	}
	return slices.Compact(sizes)
}

// TestShortcutExact proves the steady-state shortcut exact: for every plan,
// cache size and simulator, the counters of N runs replayed one by one
// equal those of the shortcut, which simulates two runs (the LRU argument
// in the package documentation).
func TestShortcutExact(t *testing.T) {
	const runs = 10
	differ := 0 // cases whose cold run counts differently from the others
	for name, pp := range shortcutPlans(t) {
		p := pp[1].(*schedule.Plan)
		l := NewLayout(p.Buffers)
		for _, size := range cacheSizes(p) {
			for _, ways := range []int{cachesim.FullyAssociative, 4} {
				t.Run(fmt.Sprintf("%s/size=%d/ways=%d", name, size, ways), func(t *testing.T) {
					cfg := cachesim.Config{Size: size, Ways: ways}
					full, err := NewCache(cfg)
					if err != nil {
						t.Fatal(err)
					}
					var per []cachesim.Stats
					var total cachesim.Stats
					for range runs {
						full.ResetStats()
						replay(p, l, full)
						per = append(per, full.Stats())
						total = addStats(total, full.Stats(), 1)
					}
					if per[0] != per[1] {
						differ++
					}
					c, _ := NewCache(cfg)
					tr := simulate(c, runs, func(s cachesim.Sink) { replay(p, l, s) }, true)
					if tr.Total != total || tr.Cold != per[0] || tr.Last != per[tr.Simulated-1] {
						t.Fatalf("shortcut after %d runs: total %+v, cold %+v, last %+v\nwant total %+v, cold %+v, run %d %+v",
							tr.Simulated, tr.Total, tr.Cold, tr.Last, total, per[0], tr.Simulated, per[tr.Simulated-1])
					}
					if tr.Simulated != 2 || tr.Period != 1 {
						t.Errorf("simulated %d runs, period %d; LRU from empty is steady after run 2", tr.Simulated, tr.Period)
					}
					slow := simulate(c, runs, func(s cachesim.Sink) { replay(p, l, s) }, false)
					if slow.Simulated != runs || slow.Period != 0 {
						t.Errorf("without the shortcut: %d runs simulated, period %d", slow.Simulated, slow.Period)
					}
				})
			}
		}
	}
	if differ == 0 {
		t.Error("no cold run differed from the warm ones: the test does not exercise the shortcut")
	}
}

// cyclicCache reads the lines of a request shifted by a pattern that
// depends on the run, so that its state cycles with period 3.
type cyclicCache struct {
	*cachesim.LRU
	run int
}

func (c *cyclicCache) ResetStats() { c.run++; c.LRU.ResetStats() }

func (c *cyclicCache) Read(addr, n int64) {
	k := int64(c.run % 3)
	c.LRU.Read(addr+640*k, 64*(k+1))
}

// TestSimulateLongerCycle checks the bookkeeping for cycles longer than
// one run, which LRU never produces but other caches may.
func TestSimulateLongerCycle(t *testing.T) {
	newCache := func() *cyclicCache {
		lru, err := cachesim.NewLRU(cachesim.Config{Size: 4 * 64, Ways: cachesim.FullyAssociative})
		if err != nil {
			t.Fatal(err)
		}
		return &cyclicCache{LRU: lru}
	}
	replay := func(s cachesim.Sink) { s.Read(640, 1) }
	for _, runs := range []int{1, 2, 5, 6, 7, 8, 100, 101} {
		fast := simulate(newCache(), runs, replay, true)
		slow := simulate(newCache(), runs, replay, false)
		if fast.Total != slow.Total || fast.Cold != slow.Cold {
			t.Errorf("%d runs: shortcut %+v, full %+v", runs, fast.Total, slow.Total)
		}
		if runs >= 6 && (fast.Period != 3 || fast.Simulated != 5) {
			t.Errorf("%d runs: period %d after %d runs, want 3 after 5", runs, fast.Period, fast.Simulated)
		}
	}
}

// TestExtentLRUOnPlans replays plans through the ExtentLRU and the
// line-by-line fully associative LRU: every run's counters and the final
// states must be equal.
func TestExtentLRUOnPlans(t *testing.T) {
	for name, pp := range shortcutPlans(t) {
		p := pp[1].(*schedule.Plan)
		l := NewLayout(p.Buffers)
		for _, size := range cacheSizes(p) {
			cfg := cachesim.Config{Size: size, Ways: cachesim.FullyAssociative}
			e, _ := cachesim.NewExtentLRU(cfg)
			c, _ := cachesim.NewLRU(cfg)
			for run := range 3 {
				e.ResetStats()
				c.ResetStats()
				replay(p, l, e)
				replay(p, l, c)
				if e.Stats() != c.Stats() {
					t.Fatalf("%s, %d bytes, run %d: ExtentLRU %+v, LRU %+v", name, size, run+1, e.Stats(), c.Stats())
				}
			}
			if !e.Snapshot().Equal(c.Snapshot()) {
				t.Fatalf("%s, %d bytes: final states differ", name, size)
			}
		}
	}
}

func TestWorkingSetOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  rnn.Config
		T, B int
		want WorkingSet
	}{
		{
			// Weights: layer 0 per direction W_ih 20×3, W_hh 20×5, two
			// biases of 20: 200; layer 1 (input 10): 340; two directions:
			// 1080; head 4×10+4 = 44. Values: input 12×3 = 36, outputs
			// 2×12×10 = 240, states 2×2×2×(5+5) = 80, head 12×4 = 48.
			"lstm-bidir-embed-head",
			rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 5, Layers: 2, Bidirectional: true, Vocab: 7, HeadOut: 4},
			6, 2,
			WorkingSet{Weights: 4 * 1124, Embedding: 4 * 21, Intermediate: 4 * 404, Total: 4 * (1124 + 21 + 404)},
		},
		{
			// W_ih 18×4, W_hh 18×6, biases 2×18: 216; values 5×4 + 5×6 + 6.
			"gru",
			rnn.Config{Cell: rnn.GRU, Input: 4, Hidden: 6, Layers: 1},
			5, 1,
			WorkingSet{Weights: 4 * 216, Intermediate: 4 * 56, Total: 4 * 272},
		},
		{
			// W_ih 16×3, W_hh 16×2, biases 32, W_hr 2×4: 120; values
			// 3×3 + 3×2 + (2+4).
			"lstm-proj",
			rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Proj: 2, Layers: 1},
			3, 1,
			WorkingSet{Weights: 4 * 120, Intermediate: 4 * 21, Total: 4 * 141},
		},
	} {
		if got := WorkingSetOf(dryNet(t, tc.cfg), tc.T, tc.B); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// The paper's example: G is 8 MiB.
	if ws := WorkingSetOf(dryNet(t, paperLSTM), 100, 1); ws.Weights-2*4*2048 != 8<<20 {
		t.Errorf("Section IV LSTM: weights without biases %d, want 8 MiB", ws.Weights-2*4*2048)
	}
}

func TestPlanBytesOf(t *testing.T) {
	_, p := dryPlan(t, rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Layers: 1}, schedule.A, 5, 1)
	// G 16×7, bias 16; features 5×3; xh 7, y 16, c 4; output 5×4, h_n 4, c_n 4.
	want := PlanBytes{Weights: 4 * 128, Inputs: 4 * 15, Activations: 4 * 27, Outputs: 4 * 28, Total: 4 * 198}
	if got := PlanBytesOf(p); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestLayout(t *testing.T) {
	net := dryNet(t, rnn.Config{Cell: rnn.GRU, Input: 5, Hidden: 7, Layers: 2, Vocab: 30, HeadOut: 3})
	prog, err := schedule.NewProgram(net, schedule.APlus)
	if err != nil {
		t.Fatal(err)
	}
	var layouts []*Layout
	for _, T := range []int{2, 9} {
		p, err := prog.Plan(schedule.Input{T: T, B: 1, Tokens: make([]int64, T)}, schedule.PlanOptions{Head: true})
		if err != nil {
			t.Fatal(err)
		}
		l := NewLayout(p.Buffers)
		layouts = append(layouts, l)
		var end int64
		for _, b := range p.Buffers {
			a, ok := l.Addr(b)
			if !ok || a%Align != 0 || a < end {
				t.Fatalf("T=%d: buffer %s at %d (ok %v), previous one ends at %d", T, b.Name, a, ok, end)
			}
			end = a + b.Bytes()
		}
		if want := (end + Align - 1) / Align * Align; l.Size() != want {
			t.Errorf("T=%d: size %d, want %d", T, l.Size(), want)
		}
	}
	for _, w := range prog.Weights() {
		a0, _ := layouts[0].Addr(w)
		a1, _ := layouts[1].Addr(w)
		if a0 != a1 {
			t.Errorf("weight %s at %d in one plan and %d in the other", w.Name, a0, a1)
		}
	}
	if _, ok := layouts[0].Addr(&schedule.Buffer{}); ok {
		t.Error("a foreign buffer has an address")
	}
}

// TestFootprint checks that one run touches every line of every buffer
// except the embedding, of which it touches only the rows of its tokens.
func TestFootprint(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 8, Layers: 1, Vocab: 1000, HeadOut: 5}
	net := dryNet(t, cfg)
	prog, err := schedule.NewProgram(net, schedule.A)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int64{7, 900, 7, 3, 900, 999} // rows of 64 bytes: one line each
	p, err := prog.Plan(schedule.Input{T: 6, B: 1, Tokens: tokens}, schedule.PlanOptions{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, b := range p.Buffers {
		if b.Name != "embedding" {
			want += (b.Bytes() + 63) / 64
		}
	}
	want += 4 // distinct tokens
	var got int64
	for _, s := range footprint(p, NewLayout(p.Buffers), 64) {
		got += s.last - s.first + 1
	}
	if got != want {
		t.Errorf("footprint %d lines, want %d", got, want)
	}
}

// TestOPTBound checks the MIN bound against LRU: never above any run's
// misses, zero when the cache holds the whole footprint (it may choose
// the starting contents), and skipped over the access limit.
func TestOPTBound(t *testing.T) {
	for name, pp := range shortcutPlans(t) {
		prog, p := pp[0].(*schedule.Program), pp[1].(*schedule.Plan)
		sizes := cacheSizes(p)
		for _, size := range sizes {
			r, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: size}, OPT: true, Runs: 5})
			if err != nil {
				t.Fatal(err)
			}
			if r.OPT == nil {
				t.Fatalf("%s: no bound: %s", name, r.OPTSkipped)
			}
			if r.OPT.ReadBytes > r.Steady.Read || r.OPT.ReadBytes > r.Cold.Read || r.OPT.Misses < 0 {
				t.Errorf("%s, %d bytes: bound %d bytes, LRU reads %d cold and %d steady", name, size, r.OPT.ReadBytes, r.Cold.Read, r.Steady.Read)
			}
			if size >= r.FootprintBytes && r.OPT.Misses != 0 {
				t.Errorf("%s, %d bytes over a footprint of %d: bound %d misses, want 0", name, size, r.FootprintBytes, r.OPT.Misses)
			}
		}
		r, err := Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: sizes[0]}, OPT: true, OPTMaxAccesses: 100, Runs: 2})
		if err != nil {
			t.Fatal(err)
		}
		if r.OPT != nil || r.OPTSkipped == "" {
			t.Errorf("%s: over the limit: bound %v, reason %q", name, r.OPT, r.OPTSkipped)
		}
		r, err = Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), Options{Cache: cachesim.Config{Size: sizes[0]}, Runs: 2})
		if err != nil {
			t.Fatal(err)
		}
		if r.OPT != nil || r.OPTSkipped != "" {
			t.Errorf("%s: not asked for: bound %v, reason %q", name, r.OPT, r.OPTSkipped)
		}
	}
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	want := Options{Cache: cachesim.Config{Size: 12 << 20, LineSize: 64, Ways: cachesim.FullyAssociative}, Runs: 100, OPTMaxAccesses: 50_000_000}
	if o != want {
		t.Errorf("defaults: %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if d := DefaultOptions(); !d.OPT || d.Runs != 100 {
		t.Errorf("DefaultOptions: %+v", d)
	}
	for name, mod := range map[string]func(*Options){
		"runs":       func(o *Options) { o.Runs = -1 },
		"many runs":  func(o *Options) { o.Runs = MaxRuns + 1 },
		"opt limit":  func(o *Options) { o.OPTMaxAccesses = 1 << 40 },
		"cache size": func(o *Options) { o.Cache.Size = 1000 },
		"cache ways": func(o *Options) { o.Cache.Ways = 7 },
	} {
		o := DefaultOptions()
		mod(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: err %v, want ErrInvalidOptions", name, err)
		}
	}
	o = DefaultOptions()
	o.Cache.Size = 1000
	if err := o.Validate(); !errors.Is(err, cachesim.ErrInvalidConfig) {
		t.Errorf("cache error does not wrap cachesim's: %v", err)
	}
}

func TestAnalyzeErrors(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 4, Hidden: 4, Layers: 1}
	net := dryNet(t, cfg)
	prog, p, err := DryPlan(net, schedule.A, 3, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ws := WorkingSetOfProgram(prog, 3, 1)
	for name, tc := range map[string]struct {
		p    *schedule.Plan
		ws   WorkingSet
		opt  Options
		want error
	}{
		"nil plan":             {nil, ws, Options{}, ErrPlan},
		"no working set":       {p, WorkingSet{}, Options{}, ErrPlan},
		"bad options":          {p, ws, Options{Runs: -3}, ErrInvalidOptions},
		"set-assoc + bad ":     {p, ws, Options{Cache: cachesim.Config{Size: 4096, Ways: 5}}, ErrInvalidOptions},
		"bad private cache":    {p, ws, Options{PrivateCache: cachesim.Config{Size: 4096, Ways: 5}}, ErrInvalidOptions},
		"buffer not laid out":  {&schedule.Plan{Buffers: p.Buffers[1:], Steps: p.Steps}, ws, Options{}, ErrPlan},
		"region outside (len)": {shrunk(t, net, 1), ws, Options{}, ErrPlan},
	} {
		if _, err := Analyze(tc.p, tc.ws, tc.opt); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", name, err, tc.want)
		}
	}
	if _, _, err := DryPlan(net, schedule.A, 0, 1, 1); !errors.Is(err, schedule.ErrInput) {
		t.Errorf("T = 0: err %v, want schedule.ErrInput", err)
	}
	if _, _, err := DryPlan(net, schedule.Schedule(9), 3, 1, 1); !errors.Is(err, schedule.ErrUnknownSchedule) {
		t.Errorf("bad schedule: err %v, want schedule.ErrUnknownSchedule", err)
	}
}

// shrunk is a dry A plan of net whose buffer number k after the weights
// is made half as large as the regions its steps declare.
func shrunk(t *testing.T, net *rnn.Network, k int) *schedule.Plan {
	t.Helper()
	prog, p, err := DryPlan(net, schedule.A, 3, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Buffers[len(prog.Weights())+k].Elems /= 2
	return p
}

// TestReplayErrors checks that Replay refuses regions outside their
// buffer or in a buffer the layout does not have, and sends a strided
// region block by block.
func TestReplayErrors(t *testing.T) {
	net := dryNet(t, rnn.Config{Cell: rnn.GRU, Input: 3, Hidden: 4, Layers: 1})
	p := shrunk(t, net, 0)
	tr, err := cachesim.NewTrace(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := Replay(p, NewLayout(p.Buffers), tr); !errors.Is(err, ErrPlan) {
		t.Errorf("region past the end: err %v, want ErrPlan", err)
	}
	if tr.Len() != 0 {
		t.Errorf("%d accesses replayed", tr.Len())
	}
	_, q, err := DryPlan(net, schedule.A, 2, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Replay(q, NewLayout(q.Buffers[:1]), tr); !errors.Is(err, ErrPlan) {
		t.Errorf("buffer not laid out: err %v, want ErrPlan", err)
	}
	// A strided region: Schedule A writes x_t into the first 3 of every
	// 7 values of xh ([x; h] rows of 3 + 4) for B = 2.
	_, q, err = DryPlan(net, schedule.A, 1, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLayout(q.Buffers)
	var strided []schedule.Region
	q.Walk(func(r schedule.Region, w bool) {
		if w && r.Count > 1 {
			strided = append(strided, r)
		}
	})
	if len(strided) == 0 {
		t.Fatal("no strided write in a batch-2 Schedule A plan")
	}
	r := strided[0]
	tr, _ = cachesim.NewTrace(4)
	replayRegion(l, r, true, tr)
	if tr.Len() != int(r.Count)*int(r.Len/4) {
		t.Errorf("strided region of %d blocks of %d bytes: %d accesses", r.Count, r.Len, tr.Len())
	}
	base, _ := l.Addr(r.Buf)
	for i := range tr.Len() {
		line, w := tr.At(i)
		if !w {
			t.Error("a write replayed as a read")
		}
		blk, in := i/int(r.Len/4), i%int(r.Len/4)
		if want := (base + r.Off + int64(blk)*r.Stride + int64(4*in)) / 4; line != want {
			t.Errorf("access %d at line %d, want %d", i, line, want)
		}
	}
}
