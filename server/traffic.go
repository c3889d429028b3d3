package server

import (
	"fmt"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// chooseSchedule picks the schedule of a model's whole-request plans. With
// "auto" (or "") it models the DRAM traffic of A and A+ for a reference
// input of steps time steps at the host's last-level cache size and takes
// the one that moves fewer bytes (A+ on a tie: it never reads more). The
// traffic of both is returned for the metadata and metrics.
func chooseSchedule(net *rnn.Network, want string, cacheBytes int64, steps int) (schedule.Schedule, string, []api.ScheduleTraffic, error) {
	cacheBytes = llcOrDefault(cacheBytes)
	var traffic []api.ScheduleTraffic
	for _, s := range []schedule.Schedule{schedule.A, schedule.APlus} {
		t, err := modelTraffic(net, s, cacheBytes, steps)
		if err != nil {
			return 0, "", nil, fmt.Errorf("traffic of schedule %v: %w", s, err)
		}
		traffic = append(traffic, t)
	}
	a, ap := traffic[0], traffic[1]
	switch want {
	case "", "auto":
		if a.DRAMBytes < ap.DRAMBytes {
			return schedule.A, fmt.Sprintf("auto: A moves %.4g DRAM bytes per %d-step inference at a %d-byte LLC, A+ %.4g", a.DRAMBytes, steps, cacheBytes, ap.DRAMBytes), traffic, nil
		}
		return schedule.APlus, fmt.Sprintf("auto: A+ moves %.4g DRAM bytes per %d-step inference at a %d-byte LLC, A %.4g", ap.DRAMBytes, steps, cacheBytes, a.DRAMBytes), traffic, nil
	}
	s, err := schedule.Parse(want)
	if err != nil {
		return 0, "", nil, fmt.Errorf("config.yaml schedule: %w (or auto)", err)
	}
	return s, "set in the model's config.yaml", traffic, nil
}

// llcOrDefault is the modelled last-level cache: the configured size, or the
// DRE paper's 12 MiB when none is known.
func llcOrDefault(configured int64) int64 {
	if configured == 0 {
		return 12 << 20
	}
	return configured
}

// modelTraffic models one schedule's steady-state DRAM traffic for a
// batch-1 input of the given length, on a dry copy of the network.
func modelTraffic(net *rnn.Network, s schedule.Schedule, cacheBytes int64, steps int) (api.ScheduleTraffic, error) {
	dry, err := rnn.NewNetwork(net.Config(), true)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	prog, p, err := dre.DryPlan(dry, s, steps, 1, 1)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	opt := dre.DefaultOptions()
	opt.Cache = cachesim.Config{Size: cacheBytes, Ways: cachesim.FullyAssociative}
	rep, err := dre.Analyze(prog, p, opt)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	return api.ScheduleTraffic{Schedule: s.String(), CacheBytes: cacheBytes, Steps: steps,
		WorkingSetBytes: rep.WorkingSet.Total, DRAMBytes: rep.AvgRW, DRE: rep.DRE}, nil
}

// cellularTraffic models the DRAM traffic of serving one batch-1 request of
// the given length through the cellular batcher: it traces a real Stepper
// run of the model (schedule.TraceStepper) and replays it through the cache.
func cellularTraffic(net *rnn.Network, cacheBytes int64, steps int) (api.ScheduleTraffic, error) {
	q := &schedule.Sequence{Head: schedule.HeadLast}
	if net.Vocab > 0 {
		q.Tokens = make([]int64, steps) // which rows are read barely matters; id 0 throughout
	} else {
		q.Features = make([]float32, steps*net.Input)
	}
	if net.HeadOut > 0 {
		q.Head = schedule.HeadAll
	}
	p, err := schedule.TraceStepper(net, q)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	opt := dre.DefaultOptions()
	c, err := dre.NewCache(cachesim.Config{Size: cacheBytes, Ways: cachesim.FullyAssociative})
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	tr, err := dre.Simulate(p, dre.NewLayout(p.Buffers), c, opt.Runs)
	if err != nil {
		return api.ScheduleTraffic{}, err
	}
	ws := dre.WorkingSetOf(net, steps, 1).Total
	rw := float64(tr.Total.ReadBytes()+tr.Total.WriteBytes()) / float64(tr.Runs)
	return api.ScheduleTraffic{Schedule: schedule.Cellular.String(), CacheBytes: cacheBytes, Steps: steps,
		WorkingSetBytes: ws, DRAMBytes: rw, DRE: rw / float64(ws)}, nil
}
