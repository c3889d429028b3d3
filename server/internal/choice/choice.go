// Package choice chooses the schedule of a sequence model's
// whole-request plans: it models each candidate's memory traffic on the
// host (Choose, with package dre's cache replay) and, given a timing
// budget, checks the traffic model's best candidates against the clock
// (clock.go). It knows networks, programs and worker pools, not requests
// or servers: package server calls it when it loads a model and shows
// what it returns in the model's metadata and metrics.
package choice

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// Candidate is one way to run a model's whole-request plans: a schedule,
// the precision of its stored weights (bf16 and int8 only with P) and the
// cores it runs on (1 except for P).
type Candidate struct {
	Sched   schedule.Schedule
	Prec    schedule.Precision
	Workers int
}

// String is the candidate's name in metadata and metric labels: A, A+, P,
// P-bf16 or P-int8.
func (c Candidate) String() string {
	if c.Prec != schedule.F32 {
		return c.Sched.String() + "-" + c.Prec.String()
	}
	return c.Sched.String()
}

// preference is the last tie-break of the choice: lower wins. P first,
// float32 before bf16 before int8 (fewer bits lose accuracy for nothing
// on a tie), then A+, then A.
func (c Candidate) preference() int {
	switch {
	case c.Sched == schedule.Partitioned && c.Prec == schedule.F32:
		return 0
	case c.Sched == schedule.Partitioned && c.Prec == schedule.BF16:
		return 1
	case c.Sched == schedule.Partitioned:
		return 2
	case c.Sched == schedule.APlus:
		return 3
	}
	return 4
}

// StepperPrecision is the precision of the cellular batcher's weights when
// whole-request plans run c: int8 when they do, so that a request's
// answer does not depend on whether it was batched; float32 otherwise
// (bf16's outputs stay within 2e-2 of float32's, and a Stepper has no bf16
// form).
func (c Candidate) StepperPrecision() schedule.Precision {
	if c.Prec == schedule.Int8 {
		return schedule.Int8
	}
	return schedule.F32
}

// ErrNoPool is wrapped when P needs a worker pool of a size its owner did
// not provide (server.PoolSizes lists the sizes).
var ErrNoPool = errors.New("server: no worker pool of that size")

// Program prepares net for c. P splits over c.Workers cores on the pool of
// that many workers from pools (one worker runs inline, and a dry network
// needs none).
func (c Candidate) Program(net *rnn.Network, pools Pools) (*schedule.Program, error) {
	return c.programBeside(net, pools, nil)
}

// programBeside is Program for a model served beside others, w its
// entry among those counted (schedule.PartitionOptions.Weights; nil:
// none).
func (c Candidate) programBeside(net *rnn.Network, pools Pools, w *schedule.Weights) (*schedule.Program, error) {
	if c.Sched != schedule.Partitioned {
		return schedule.NewProgram(net, c.Sched)
	}
	opt := schedule.PartitionOptions{Workers: c.Workers, Precision: c.Prec, Weights: w}
	if c.Workers > 1 && !net.Dry() {
		if opt.Pool = pools[c.Workers]; opt.Pool == nil {
			return nil, fmt.Errorf("%w: P on %d cores (the owner makes the pools server.PoolSizes lists)", ErrNoPool, c.Workers)
		}
	}
	return schedule.NewPartitioned(net, opt)
}

// Of is the candidate prog runs.
func Of(prog *schedule.Program) Candidate {
	return Candidate{Sched: prog.Schedule, Prec: prog.Precision(), Workers: prog.Workers()}
}

// Pools are worker pools by their number of workers.
type Pools map[int]*schedule.Pool

// Host is the host the schedule choice models.
type Host struct {
	LLC     int64 // last-level cache bytes, shared by every core
	Private int64 // one core's private cache bytes
	Workers int   // cores P splits over
	Steps   int   // reference input length
}

// CoresPerRequest divides cores among concurrent requests, at least one
// each and at most schedule.MaxWorkers.
func CoresPerRequest(cores, concurrent int) int {
	return min(max(1, cores/max(1, concurrent)), schedule.MaxWorkers)
}

// dramSlack is how far above the least warm DRAM traffic a candidate may
// be and still compete on per-core traffic.
const dramSlack = 0.02

// Choose picks the schedule of a model's whole-request plans and returns
// it, the reason, and the modelled traffic of every candidate (for the
// metadata and metrics). The candidates are A, A+ and P (on h.Workers
// cores), and P-bf16 or P-int8 when prec allows bf16 or int8 weights.
// For each it models, for a batch-1 input of h.Steps steps,
//
//   - the warm DRAM bytes per inference: the plan's trace through an LRU
//     the size of the last-level cache, 100 inferences back to back, the
//     cold first one left out (a serving process pays it once);
//   - the per-core bytes: each worker's own steps through an LRU the size
//     of one core's private cache, warm likewise; the largest worker's
//     figure counts, as the cores run in parallel (A and A+ run on one).
//
// Each candidate's figures come from the plan of the program builds
// serves for it: for P on one core that Builds.Serial makes the Serial
// form of P across all cores, that form's plan, so the plan dre replays
// is the plan that runs.
//
// With want 0 (schedule auto in config.yaml) the rule is: least warm
// DRAM bytes; among the candidates within 2% of that least, least
// per-core bytes; on a tie, P before P-bf16 before P-int8 before A+
// before A. A schedule wanted is taken as it is (P with precision bf16 is
// P-bf16, with int8 P-int8).
//
// With a timing budget (server.Options.ScheduleTiming) and weights, the
// best three candidates of that ranking are then timed on the host (their
// programs made by builds, which keeps them for the caller) and the
// fastest wins if it beats the rule's choice by more than OverruleMargin
// (see clock.go); the metadata shows both.
func Choose(net *rnn.Network, want schedule.Schedule, prec schedule.Precision, h Host, builds *Builds, budget time.Duration) (Candidate, string, []api.ScheduleTraffic, error) {
	var err error
	cands := []Candidate{
		{Sched: schedule.A, Workers: 1},
		{Sched: schedule.APlus, Workers: 1},
		{Sched: schedule.Partitioned, Workers: h.Workers},
	}
	if prec != schedule.F32 {
		cands = append(cands, Candidate{Sched: schedule.Partitioned, Prec: prec, Workers: h.Workers})
	}
	if builds == nil {
		builds = &Builds{Net: net, Cores: h.Workers, LLC: h.LLC}
	}
	traffic := make([]api.ScheduleTraffic, len(cands))
	for i, c := range cands {
		if traffic[i], err = modelTraffic(builds, c, h); err != nil {
			return Candidate{}, "", nil, fmt.Errorf("traffic of schedule %v: %w", c, err)
		}
	}
	if want != 0 {
		c := Candidate{Sched: want, Prec: prec, Workers: 1}
		if want == schedule.Partitioned {
			c.Workers = h.Workers
		}
		return c, "set in the model's config.yaml", traffic, nil
	}
	best := pick(cands, traffic)
	why := reason(cands, traffic, best, h)
	if budget <= 0 || net.Dry() {
		return cands[best], why, traffic, nil
	}
	fastest, timing, err := timeChoice(net, cands, traffic, builds, h.Steps, budget)
	if err != nil {
		return Candidate{}, "", nil, fmt.Errorf("timing the schedules: %w", err)
	}
	if fastest == best {
		return cands[best], why + "; " + timing, traffic, nil
	}
	return cands[fastest], fmt.Sprintf("auto: %v on %d core(s): %s. The traffic model alone: %s",
		cands[fastest], cands[fastest].Workers, timing, strings.TrimPrefix(why, "auto: ")), traffic, nil
}

// pick applies Choose's rule to the candidates' modelled traffic
// and returns the index of the one chosen.
func pick(cands []Candidate, traffic []api.ScheduleTraffic) int {
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
func reason(cands []Candidate, traffic []api.ScheduleTraffic, best int, h Host) string {
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
		cands[best], cands[best].Workers, why, h.Steps, h.LLC, strings.Join(dram, ", "), h.Private, strings.Join(core, ", "))
}

// LLCOrDefault is the modelled last-level cache: the configured size, or the
// DRE paper's 12 MiB when none is known.
func LLCOrDefault(configured int64) int64 {
	if configured == 0 {
		return 12 << 20
	}
	return configured
}

// PrivateOrDefault is the modelled private cache of one core: the
// configured size, or 1 MiB (a current server core's L2) when none is
// known.
func PrivateOrDefault(configured int64) int64 {
	if configured == 0 {
		return 1 << 20
	}
	return configured
}

// modelTraffic models one candidate's traffic for a batch-1 input of
// h.Steps steps, over the plan of the program builds would serve for it
// (the Serial form of P across all cores for P on one core where
// Builds.Serial says so), made on a dry copy of the network: DRAM traffic
// at the LLC size, and the busiest core's traffic beyond its private
// cache.
func modelTraffic(builds *Builds, c Candidate, h Host) (api.ScheduleTraffic, error) {
	prog, err := builds.dryProgram(c)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	p, err := prog.Plan(dre.DryInput(prog.Net, h.Steps, 1, 1), schedule.PlanOptions{Head: true})
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	opt := dre.Options{Cache: cachesim.Config{Size: h.LLC}, Runs: dre.DefaultRuns, PrivateCache: cachesim.Config{Size: h.Private}}
	rep, err := dre.Analyze(p, dre.WorkingSetOfProgram(prog, h.Steps, 1), opt)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	var core float64
	for _, w := range rep.Workers {
		core = max(core, w)
	}
	return api.ScheduleTraffic{Schedule: c.String(), Precision: c.Prec.String(), Workers: c.Workers,
		CacheBytes: h.LLC, Steps: h.Steps, WorkingSetBytes: rep.WorkingSet.Total, DRAMBytes: rep.AvgRW, DRE: rep.DRE,
		WarmDRAMBytes: rep.WarmRW(), PrivateCacheBytes: h.Private, CoreBytes: &core}, nil
}

// CellularTraffic models the DRAM traffic of serving one batch-1 request of
// the given length through the cellular batcher, whose steppers read the
// weight buffers of st, a Stepper of net: it traces a real run of the
// model over them (Stepper.Trace, no weight buffer of its own) and
// replays it through the cache.
func CellularTraffic(net *rnn.Network, st *schedule.Stepper, cacheBytes int64, steps int) (api.ScheduleTraffic, error) {
	prec := st.Precision()
	q := &schedule.Sequence{Head: schedule.HeadLast}
	if net.Vocab > 0 {
		q.Tokens = make([]int64, steps) // which rows are read barely matters; id 0 throughout
	} else {
		q.Features = make([]float32, steps*net.Input)
	}
	if net.HeadOut > 0 && net.HeadInput == rnn.HeadEveryStep {
		q.Head = schedule.HeadAll
	}
	p, err := st.Trace(q)
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
// caller's pool of that many Workers: for tools that time what the server
// runs, such as cmd/loadgen.
func ProgramFor(net *rnn.Network, name string, workers int, pools Pools) (*schedule.Program, error) {
	c := Candidate{Workers: 1}
	for _, p := range []schedule.Precision{schedule.BF16, schedule.Int8} {
		if base, ok := strings.CutSuffix(name, "-"+p.String()); ok {
			name, c.Prec = base, p
		}
	}
	s, err := schedule.Parse(name)
	if err != nil {
		return nil, err
	}
	c.Sched = s
	if s == schedule.Partitioned {
		c.Workers = CoresPerRequest(min(workers, runtime.GOMAXPROCS(0)), 1)
	} else if c.Prec != schedule.F32 {
		return nil, fmt.Errorf("server: schedule %q: only P stores %v weights", name+"-"+c.Prec.String(), c.Prec)
	}
	return c.Program(net, pools)
}

// ReferenceInput is batch 1 of steps steps, the input the measured
// traffic and the schedule timing run: token ids drawn as dre.DryPlan
// draws them for the modelled figures (seed 1), or zero features.
func ReferenceInput(net *rnn.Network, steps int) schedule.Input {
	in := schedule.Input{T: steps, B: 1}
	if net.Vocab > 0 {
		rng := rand.New(rand.NewPCG(1, 0x5eed))
		in.Tokens = make([]int64, steps)
		for i := range in.Tokens {
			in.Tokens[i] = rng.Int64N(int64(net.Vocab))
		}
	} else {
		in.Features = make([]float32, steps*net.Input)
	}
	return in
}
