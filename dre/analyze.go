package dre

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	"rnnserve/cachesim"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// Report is the memory traffic of a plan run Runs times back to back, and
// its Data Reuse Efficiency. Byte counts are DRAM traffic per inference.
type Report struct {
	Schedule string    `json:"schedule,omitempty"` // the plan's schedule; empty for tree plans
	T        int       `json:"t"`
	B        int       `json:"b"`
	Cache    CacheInfo `json:"cache"`
	Runs     int       `json:"runs"`

	AvgReadBytes  float64 `json:"avg_read_bytes"`
	AvgWriteBytes float64 `json:"avg_write_bytes"`
	AvgRW         float64 `json:"avg_rw_bytes"` // AvgReadBytes + AvgWriteBytes

	WorkingSet     WorkingSet `json:"working_set"`     // given by the caller (WorkingSetOf...)
	PlanBytes      PlanBytes  `json:"plan_bytes"`      // the plan's buffers
	FootprintBytes int64      `json:"footprint_bytes"` // distinct lines one run touches
	DRE            float64    `json:"dre"`             // AvgRW / WorkingSet.Total

	LineAccesses  int64    `json:"line_accesses_per_run"`
	Cold          RunBytes `json:"cold"`   // run 1, from an empty cache
	Steady        RunBytes `json:"steady"` // the last run simulated
	RunsSimulated int      `json:"runs_simulated"`
	Period        int      `json:"period"` // 1 when the cache reached a steady state; 0 if it found no cycle

	// Workers is each worker's warm traffic through a private cache of
	// its own (Options.PrivateCache), by Step.Worker: what each core
	// fetches from the shared cache or DRAM per inference once warm.
	Workers []float64 `json:"worker_warm_bytes,omitempty"`

	OPT        *Bound `json:"opt,omitempty"`
	OPTSkipped string `json:"opt_skipped,omitempty"` // why OPT is missing when it was asked for
}

// CacheInfo is the simulated cache.
type CacheInfo struct {
	Size      int64  `json:"size_bytes"`
	LineSize  int64  `json:"line_size"`
	Ways      int    `json:"ways"` // -1: fully associative
	Simulator string `json:"simulator"`
}

// RunBytes is the DRAM traffic of one run.
type RunBytes struct {
	Read  int64 `json:"read_bytes"`
	Write int64 `json:"write_bytes"`
}

// Bound is Belady's MIN for one run, from the best possible cache contents:
// no cache of the same size misses less in any run.
type Bound struct {
	Misses    int64 `json:"misses"`
	ReadBytes int64 `json:"read_bytes"`
}

// Analyze is the traffic analysis: it replays p, a plan or the steps
// recorded while one ran (schedule.TraceStepper, TreeProgram.Generate),
// through the cache of opt, and reports its traffic and its DRE against
// the working set ws (WorkingSetOfProgram for a sequence program,
// treetraffic's for trees, an encoder-decoder's own). With
// opt.PrivateCache it also replays each worker's steps through a private
// cache of that size. It applies opt's defaults and validates them. Every
// DRE the project reports comes from here.
func Analyze(p *schedule.Plan, ws WorkingSet, opt Options) (*Report, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil plan", ErrPlan)
	}
	if ws.Total <= 0 {
		return nil, fmt.Errorf("%w: working set of %d bytes", ErrPlan, ws.Total)
	}
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	l := NewLayout(p.Buffers)
	if err := check(p, l); err != nil {
		return nil, err
	}
	c, err := NewCache(opt.Cache)
	if err != nil {
		return nil, fmt.Errorf("%w: cache: %w", ErrInvalidOptions, err)
	}
	tr := simulate(c, opt.Runs, func(s cachesim.Sink) { replay(p, l, s) }, true)

	line := opt.Cache.LineSize
	spans := footprint(p, l, line)
	var foot int64
	for _, s := range spans {
		foot += s.last - s.first + 1
	}
	r := &Report{
		T:              p.T,
		B:              p.B,
		Cache:          CacheInfo{Size: opt.Cache.Size, LineSize: line, Ways: opt.Cache.Ways, Simulator: "lru"},
		Runs:           opt.Runs,
		AvgReadBytes:   float64(tr.Total.ReadBytes()) / float64(opt.Runs),
		AvgWriteBytes:  float64(tr.Total.WriteBytes()) / float64(opt.Runs),
		WorkingSet:     ws,
		PlanBytes:      PlanBytesOf(p),
		FootprintBytes: foot * line,
		LineAccesses:   tr.Cold.Accesses,
		Cold:           RunBytes{Read: tr.Cold.ReadBytes(), Write: tr.Cold.WriteBytes()},
		Steady:         RunBytes{Read: tr.Last.ReadBytes(), Write: tr.Last.WriteBytes()},
		RunsSimulated:  tr.Simulated,
		Period:         tr.Period,
	}
	if p.Schedule != 0 {
		r.Schedule = p.Schedule.String()
	}
	if _, ok := c.(*cachesim.ExtentLRU); ok {
		r.Cache.Simulator = "extent-lru"
	}
	r.AvgRW = r.AvgReadBytes + r.AvgWriteBytes
	r.DRE = r.AvgRW / float64(r.WorkingSet.Total)

	if opt.PrivateCache.Size > 0 {
		for w := range p.Workers() {
			pc, err := NewCache(opt.PrivateCache)
			if err != nil {
				return nil, fmt.Errorf("%w: private cache: %w", ErrInvalidOptions, err)
			}
			t := simulate(pc, opt.Runs, func(s cachesim.Sink) { replayWorker(p, l, w, s) }, true)
			r.Workers = append(r.Workers, t.WarmBytes())
		}
	}
	if opt.OPT {
		n := tr.Cold.Accesses + foot
		if n > opt.OPTMaxAccesses {
			r.OPTSkipped = fmt.Sprintf("the trace would have %d line accesses (%d per run + %d to choose the starting contents), more than OPTMaxAccesses = %d",
				n, tr.Cold.Accesses, foot, opt.OPTMaxAccesses)
		} else {
			r.OPT = bound(p, l, spans, opt.Cache.Size, line)
		}
	}
	return r, nil
}

// WorkingSetOfProgram is the working set of T steps of batch B of prog's
// network, its recurrent weights counted at the size prog stores them
// (2 bytes for a bf16 Partitioned program, see WorkingSetOfPrecision).
func WorkingSetOfProgram(prog *schedule.Program, T, B int) WorkingSet {
	return WorkingSetOfPrecision(prog.Net, T, B, prog.Precision())
}

// bound runs MIN over one replay of p preceded by one read of every line
// it touches (spans), and returns the misses of the replay.
func bound(p *schedule.Plan, l *Layout, spans []lineSpan, size, line int64) *Bound {
	t, err := cachesim.NewTrace(line)
	if err != nil {
		panic(err) // the line size was validated
	}
	var prefix int64
	for _, s := range spans {
		t.Read(s.first*line, (s.last-s.first+1)*line)
		prefix += s.last - s.first + 1
	}
	replay(p, l, t)
	m := cachesim.OPT(t, size).Misses - prefix
	return &Bound{Misses: m, ReadBytes: m * line}
}

// lineSpan is the lines first..last.
type lineSpan struct{ first, last int64 }

// footprint returns the distinct lines of lineSize bytes that one replay
// of p touches, as sorted disjoint spans.
func footprint(p *schedule.Plan, l *Layout, lineSize int64) []lineSpan {
	// Plans repeat the same regions at every step: expand each once.
	seen := make(map[schedule.Region]struct{})
	var spans []lineSpan
	p.Walk(func(r schedule.Region, _ bool) {
		if r.Len == 0 || r.Count == 0 {
			return
		}
		if _, ok := seen[r]; ok {
			return
		}
		seen[r] = struct{}{}
		a := l.addr[r.Buf] + r.Off
		for range r.Count {
			spans = append(spans, lineSpan{a / lineSize, (a + r.Len - 1) / lineSize})
			a += r.Stride
		}
	})
	slices.SortFunc(spans, func(x, y lineSpan) int { return cmp.Compare(x.first, y.first) })
	merged := spans[:0]
	for _, s := range spans {
		if k := len(merged) - 1; k >= 0 && s.first <= merged[k].last+1 {
			merged[k].last = max(merged[k].last, s.last)
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// DryPlan builds the Program of net for schedule s and its plan for T steps
// of batch B, with the head applied (a Partitioned program on one worker;
// build others with schedule.NewPartitioned and DryInput). A network with an embedding reads
// pseudo-random token ids drawn from seed (they decide which embedding rows
// are read); a network with weights and without an embedding reads zero
// features. net is usually dry (models.Shape), so that models of any size
// can be analysed without allocating their weights.
func DryPlan(net *rnn.Network, s schedule.Schedule, T, B int, seed uint64) (*schedule.Program, *schedule.Plan, error) {
	return DryVariantPlan(net, schedule.Variant{Schedule: s}, T, B, seed)
}

// DryVariantPlan is DryPlan for a schedule variant: P-bf16 and P-int8 store
// their weights at 2 and 1 bytes (plus int8's scales), and the plan reads
// those bytes.
func DryVariantPlan(net *rnn.Network, v schedule.Variant, T, B int, seed uint64) (*schedule.Program, *schedule.Plan, error) {
	prog, err := schedule.NewVariantProgram(net, v)
	if err != nil {
		return nil, nil, err
	}
	p, err := prog.Plan(DryInput(net, T, B, seed), schedule.PlanOptions{Head: true})
	if err != nil {
		return nil, nil, fmt.Errorf("dre: plan of %d steps, batch %d: %w", T, B, err)
	}
	return prog, p, nil
}

// DryInput is the input DryPlan gives net's plans: for a network with an
// embedding, T·B pseudo-random token ids drawn from seed; for one with
// weights and without an embedding, zero features; for a dry one without
// an embedding, no data. Use it to analyse a Program built some other way
// (schedule.NewPartitioned with its own workers or precision).
func DryInput(net *rnn.Network, T, B int, seed uint64) schedule.Input {
	in := schedule.Input{T: T, B: B}
	// Out-of-range sizes get no inputs; Plan then says what is wrong.
	if T >= 1 && B >= 1 && int64(T)*int64(B)*int64(max(net.Input, 1)) <= 1<<31 {
		switch {
		case net.Vocab > 0:
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			in.Tokens = make([]int64, T*B)
			for i := range in.Tokens {
				in.Tokens[i] = rng.Int64N(int64(net.Vocab))
			}
		case !net.Dry():
			in.Features = make([]float32, T*B*net.Input)
		}
	}
	return in
}
