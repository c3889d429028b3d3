package server

import (
	"runtime"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// The schedule choice is package choice's: it models each candidate's
// traffic on the host and times the best on the clock. This file gives it
// the host as the options describe it and a model's config.yaml.

// Pools are worker pools by their number of workers.
type Pools = choice.Pools

// ErrNoPool is wrapped when P needs a worker pool of a size its owner did
// not provide (see PoolSizes).
var ErrNoPool = choice.ErrNoPool

// trafficModel is the host as the options and GOMAXPROCS describe it. P
// gets the cores one request may use: all of them divided by how many
// requests of a model run at once (batching.workers lanes or plans), so
// concurrent requests never fight over cores. With the default of one
// worker per core, P runs on one core (A+ with its output written in
// place and no product at a zero initial state); with workers: 1 it
// spreads one request at a time over every core.
func (s *Server) trafficModel() choice.Host {
	return choice.Host{
		LLC:     choice.LLCOrDefault(s.opts.CacheBytes),
		Private: choice.PrivateOrDefault(s.opts.PrivateCacheBytes),
		Workers: choice.CoresPerRequest(runtime.GOMAXPROCS(0), s.opts.Batching.Workers),
		Steps:   s.opts.TrafficSteps,
	}
}

// chooseSchedule is choice.Choose for the schedule and precision cfg
// sets (schedule auto: the choice's rule).
func chooseSchedule(net *rnn.Network, cfg ModelConfig, h choice.Host, builds *choice.Builds, timing time.Duration) (choice.Candidate, string, []api.ScheduleTraffic, error) {
	want, prec, err := cfg.ParseSchedule()
	if err != nil {
		return choice.Candidate{}, "", nil, err
	}
	return choose(net, want, prec, h, builds, timing)
}

// The clock's verdicts at load: tests replace them with verdicts of
// their own, to load a model as a host that timed it so would.
var (
	choose     = choice.Choose
	preferWide = choice.PreferWide
)

// ProgramFor prepares net to run whole-request plans under the schedule a
// model's metadata names (A, A+, P, P-bf16 or P-int8), P on the given
// number of cores (the metadata says how many), at most GOMAXPROCS, on the
// caller's pool of that many workers: for tools that time what the server
// runs, such as cmd/loadgen.
func ProgramFor(net *rnn.Network, name string, workers int, pools Pools) (*schedule.Program, error) {
	return choice.ProgramFor(net, name, workers, pools)
}
