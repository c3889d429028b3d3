package server

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// candidate is one way to run a model's whole-request plans: a schedule,
// the precision of its stored weights (bf16 and int8 only with P) and the
// cores it runs on (1 except for P).
type candidate struct {
	sched   schedule.Schedule
	prec    schedule.Precision
	workers int
}

// String is the candidate's name in metadata and metric labels: A, A+, P,
// P-bf16 or P-int8.
func (c candidate) String() string {
	if c.prec != schedule.F32 {
		return c.sched.String() + "-" + c.prec.String()
	}
	return c.sched.String()
}

// preference is the last tie-break of the choice: lower wins. P first,
// float32 before bf16 before int8 (fewer bits lose accuracy for nothing
// on a tie), then A+, then A.
func (c candidate) preference() int {
	switch {
	case c.sched == schedule.Partitioned && c.prec == schedule.F32:
		return 0
	case c.sched == schedule.Partitioned && c.prec == schedule.BF16:
		return 1
	case c.sched == schedule.Partitioned:
		return 2
	case c.sched == schedule.APlus:
		return 3
	}
	return 4
}

// stepperPrecision is the precision of the cellular batcher's weights when
// whole-request plans run c: int8 when they do, so that a request's
// answer does not depend on whether it was batched; float32 otherwise
// (bf16's outputs stay within 2e-2 of float32's, and a Stepper has no bf16
// form).
func (c candidate) stepperPrecision() schedule.Precision {
	if c.prec == schedule.Int8 {
		return schedule.Int8
	}
	return schedule.F32
}

// ErrNoPool is wrapped when P needs a worker pool of a size its owner did
// not provide (see PoolSizes).
var ErrNoPool = errors.New("server: no worker pool of that size")

// program prepares net for c. P splits over c.workers cores on the pool of
// that many workers from pools (one worker runs inline, and a dry network
// needs none).
func (c candidate) program(net *rnn.Network, pools Pools) (*schedule.Program, error) {
	if c.sched != schedule.Partitioned {
		return schedule.NewProgram(net, c.sched)
	}
	opt := schedule.PartitionOptions{Workers: c.workers, Precision: c.prec}
	if c.workers > 1 && !net.Dry() {
		if opt.Pool = pools[c.workers]; opt.Pool == nil {
			return nil, fmt.Errorf("%w: P on %d cores (the owner makes the pools PoolSizes lists)", ErrNoPool, c.workers)
		}
	}
	return schedule.NewPartitioned(net, opt)
}

// candidateOf is the candidate prog runs.
func candidateOf(prog *schedule.Program) candidate {
	return candidate{sched: prog.Schedule, prec: prog.Precision(), workers: prog.Workers()}
}

// trafficModel is the host the schedule choice models.
type trafficModel struct {
	llc     int64 // last-level cache bytes, shared by every core
	private int64 // one core's private cache bytes
	workers int   // cores P splits over
	steps   int   // reference input length
}

// trafficModel is the host as the options and GOMAXPROCS describe it. P
// gets the cores one request may use: all of them divided by how many
// requests of a model run at once (batching.workers lanes or plans), so
// concurrent requests never fight over cores. With the default of one
// worker per core, P runs on one core (A+ with its output written in
// place and no product at a zero initial state); with workers: 1 it
// spreads one request at a time over every core.
func (s *Server) trafficModel() trafficModel {
	return trafficModel{
		llc:     llcOrDefault(s.opts.CacheBytes),
		private: privateOrDefault(s.opts.PrivateCacheBytes),
		workers: coresPerRequest(runtime.GOMAXPROCS(0), s.opts.Batching.Workers),
		steps:   s.opts.TrafficSteps,
	}
}

// coresPerRequest divides cores among concurrent requests, at least one
// each and at most schedule.MaxWorkers.
func coresPerRequest(cores, concurrent int) int {
	return min(max(1, cores/max(1, concurrent)), schedule.MaxWorkers)
}

// dramSlack is how far above the least warm DRAM traffic a candidate may
// be and still compete on per-core traffic.
const dramSlack = 0.02

// chooseSchedule picks the schedule of a model's whole-request plans and
// returns it, the reason, and the modelled traffic of every candidate (for
// the metadata and metrics). The candidates are A, A+ and P (on tm.workers
// cores), and P-bf16 or P-int8 when cfg allows bf16 or int8 weights. For
// each it models, for
// a batch-1 input of tm.steps steps,
//
//   - the warm DRAM bytes per inference: the plan's trace through an LRU
//     the size of the last-level cache, 100 inferences back to back, the
//     cold first one left out (a serving process pays it once);
//   - the per-core bytes: each worker's own steps through an LRU the size
//     of one core's private cache, warm likewise; the largest worker's
//     figure counts, as the cores run in parallel (A and A+ run on one).
//
// With schedule auto (or "") the rule is: least warm DRAM bytes; among the
// candidates within 2% of that least, least per-core bytes; on a tie, P
// before P-bf16 before P-int8 before A+ before A. A schedule set in
// config.yaml is taken as it is (P with precision bf16 is P-bf16, with
// int8 P-int8).
//
// With a timing budget (Options.ScheduleTiming) and weights, the best
// three candidates of that ranking are then timed on the host and the
// fastest wins if it beats the rule's choice by more than overruleMargin
// (see clock.go); the metadata shows both.
func chooseSchedule(net *rnn.Network, cfg ModelConfig, tm trafficModel, pools Pools, budget time.Duration) (candidate, string, []api.ScheduleTraffic, error) {
	want, prec, err := cfg.parseSchedule()
	if err != nil {
		return candidate{}, "", nil, err
	}
	cands := []candidate{
		{sched: schedule.A, workers: 1},
		{sched: schedule.APlus, workers: 1},
		{sched: schedule.Partitioned, workers: tm.workers},
	}
	if prec != schedule.F32 {
		cands = append(cands, candidate{sched: schedule.Partitioned, prec: prec, workers: tm.workers})
	}
	traffic := make([]api.ScheduleTraffic, len(cands))
	for i, c := range cands {
		if traffic[i], err = modelTraffic(net, c, tm); err != nil {
			return candidate{}, "", nil, fmt.Errorf("traffic of schedule %v: %w", c, err)
		}
	}
	if want != 0 {
		c := candidate{sched: want, prec: prec, workers: 1}
		if want == schedule.Partitioned {
			c.workers = tm.workers
		}
		return c, "set in the model's config.yaml", traffic, nil
	}
	best := pick(cands, traffic)
	why := reason(cands, traffic, best, tm)
	if budget <= 0 || net.Dry() {
		return cands[best], why, traffic, nil
	}
	fastest, timing, err := timeChoice(net, cands, traffic, pools, tm.steps, budget)
	if err != nil {
		return candidate{}, "", nil, fmt.Errorf("timing the schedules: %w", err)
	}
	if fastest == best {
		return cands[best], why + "; " + timing, traffic, nil
	}
	return cands[fastest], fmt.Sprintf("auto: %v on %d core(s): %s. The traffic model alone: %s",
		cands[fastest], cands[fastest].workers, timing, strings.TrimPrefix(why, "auto: ")), traffic, nil
}

// pick applies chooseSchedule's rule to the candidates' modelled traffic
// and returns the index of the one chosen.
func pick(cands []candidate, traffic []api.ScheduleTraffic) int {
	least := traffic[0].WarmDRAMBytes
	for _, t := range traffic {
		least = min(least, t.WarmDRAMBytes)
	}
	best := -1
	for i, t := range traffic {
		if t.WarmDRAMBytes > least*(1+dramSlack) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		c, b := *t.CoreBytes, *traffic[best].CoreBytes
		if c < b || c == b && cands[i].preference() < cands[best].preference() {
			best = i
		}
	}
	return best
}

// reason says what auto chose, by which part of the rule, and the figures.
func reason(cands []candidate, traffic []api.ScheduleTraffic, best int, tm trafficModel) string {
	least := traffic[best].WarmDRAMBytes
	for _, t := range traffic {
		least = min(least, t.WarmDRAMBytes)
	}
	var band, tied []string
	var dram, core []string
	for i, t := range traffic {
		dram = append(dram, fmt.Sprintf("%v %.4g", cands[i], t.WarmDRAMBytes))
		core = append(core, fmt.Sprintf("%v %.4g", cands[i], *t.CoreBytes))
		if t.WarmDRAMBytes <= least*(1+dramSlack) {
			band = append(band, cands[i].String())
			if i != best && *t.CoreBytes == *traffic[best].CoreBytes {
				tied = append(tied, cands[i].String())
			}
		}
	}
	var why string
	switch {
	case len(band) == 1:
		why = "the least warm DRAM bytes, no other schedule within 2%"
	case len(tied) > 0:
		why = fmt.Sprintf("least per-core bytes among %s (within 2%% of the least warm DRAM bytes), tied with %s: P, P-bf16, P-int8, A+, A in that order",
			strings.Join(band, ", "), strings.Join(tied, ", "))
	default:
		why = fmt.Sprintf("least per-core bytes among %s (within 2%% of the least warm DRAM bytes)", strings.Join(band, ", "))
	}
	return fmt.Sprintf("auto: %v on %d core(s): %s. Per warm %d-step inference, DRAM bytes at a %d-byte LLC: %s; bytes the busiest core moves beyond its %d-byte private cache: %s",
		cands[best], cands[best].workers, why, tm.steps, tm.llc, strings.Join(dram, ", "), tm.private, strings.Join(core, ", "))
}

// llcOrDefault is the modelled last-level cache: the configured size, or the
// DRE paper's 12 MiB when none is known.
func llcOrDefault(configured int64) int64 {
	if configured == 0 {
		return 12 << 20
	}
	return configured
}

// privateOrDefault is the modelled private cache of one core: the
// configured size, or 1 MiB (a current server core's L2) when none is
// known.
func privateOrDefault(configured int64) int64 {
	if configured == 0 {
		return 1 << 20
	}
	return configured
}

// modelTraffic models one candidate's traffic for a batch-1 input of
// tm.steps steps, on a dry copy of the network: DRAM traffic at the LLC
// size, and the busiest core's traffic beyond its private cache.
func modelTraffic(net *rnn.Network, c candidate, tm trafficModel) (api.ScheduleTraffic, error) {
	dry, err := rnn.NewNetwork(net.Config(), true)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	prog, err := c.program(dry, nil)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	p, err := prog.Plan(dre.DryInput(dry, tm.steps, 1, 1), schedule.PlanOptions{Head: true})
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	opt := dre.Options{Cache: cachesim.Config{Size: tm.llc}, Runs: dre.DefaultRuns, PrivateCache: cachesim.Config{Size: tm.private}}
	rep, err := dre.Analyze(p, dre.WorkingSetOfProgram(prog, tm.steps, 1), opt)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	var core float64
	for _, w := range rep.Workers {
		core = max(core, w)
	}
	return api.ScheduleTraffic{Schedule: c.String(), Precision: c.prec.String(), Workers: c.workers,
		CacheBytes: tm.llc, Steps: tm.steps, WorkingSetBytes: rep.WorkingSet.Total, DRAMBytes: rep.AvgRW, DRE: rep.DRE,
		WarmDRAMBytes: rep.WarmRW(), PrivateCacheBytes: tm.private, CoreBytes: &core}, nil
}

// cellularTraffic models the DRAM traffic of serving one batch-1 request of
// the given length through the cellular batcher, its weights at precision
// prec: it traces a real Stepper run of the model (schedule.TraceStepper)
// and replays it through the cache.
func cellularTraffic(net *rnn.Network, cacheBytes int64, steps int, prec schedule.Precision) (api.ScheduleTraffic, error) {
	q := &schedule.Sequence{Head: schedule.HeadLast}
	if net.Vocab > 0 {
		q.Tokens = make([]int64, steps) // which rows are read barely matters; id 0 throughout
	} else {
		q.Features = make([]float32, steps*net.Input)
	}
	if net.HeadOut > 0 && net.HeadInput == rnn.HeadEveryStep {
		q.Head = schedule.HeadAll
	}
	p, err := schedule.TraceStepper(net, q, prec)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	rep, err := dre.Analyze(p, dre.WorkingSetOfPrecision(net, steps, 1, prec), dre.Options{Cache: cachesim.Config{Size: cacheBytes}})
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	return api.ScheduleTraffic{Schedule: schedule.Cellular.String(), Precision: prec.String(), Workers: 1,
		CacheBytes: cacheBytes, Steps: steps, WorkingSetBytes: rep.WorkingSet.Total, DRAMBytes: rep.AvgRW, DRE: rep.DRE,
		WarmDRAMBytes: rep.WarmRW()}, nil
}

// ProgramFor prepares net to run whole-request plans under the schedule a
// model's metadata names (A, A+, P, P-bf16 or P-int8), P on the given
// number of cores (the metadata says how many), at most GOMAXPROCS, on the
// caller's pool of that many workers: for tools that time what the server
// runs, such as cmd/loadgen.
func ProgramFor(net *rnn.Network, name string, workers int, pools Pools) (*schedule.Program, error) {
	c := candidate{workers: 1}
	for _, p := range []schedule.Precision{schedule.BF16, schedule.Int8} {
		if base, ok := strings.CutSuffix(name, "-"+p.String()); ok {
			name, c.prec = base, p
		}
	}
	s, err := schedule.Parse(name)
	if err != nil {
		return nil, err
	}
	c.sched = s
	if s == schedule.Partitioned {
		c.workers = coresPerRequest(min(workers, runtime.GOMAXPROCS(0)), 1)
	} else if c.prec != schedule.F32 {
		return nil, fmt.Errorf("server: schedule %q: only P stores %v weights", name+"-"+c.prec.String(), c.prec)
	}
	return c.program(net, pools)
}
