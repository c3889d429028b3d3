package server

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rnnserve/dre/counters"
	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
)

// Measured traffic: when the host has hardware counters, a probe runs
// each model's reference inference (batch 1, Options.TrafficSteps steps,
// the model's whole-request schedule: the input the modelled
// rnnserve_model_* figures are for) every measureInterval, measureRuns
// times after one warm-up, on a goroutine locked to its OS thread, and
// exports what the counters saw. Requests themselves are not counted: the
// counters are per thread and the probe owns its thread, so the figures
// are those of the model's own inference (plus what concurrent requests
// evict from the shared LLC, which is real traffic too).
const (
	measureInterval = time.Minute
	measureRuns     = 5
	measureLine     = 64 // bytes per LLC miss
)

// measuredTraffic is the probe and its metrics.
type measuredTraffic struct {
	log  *slog.Logger
	open func() (counters.Counter, error) // on the calling, locked thread
	llc  bool                             // an LLC-miss event is available
	dram bool                             // both memory-controller events are

	llcMisses  *prometheus.CounterVec // model
	dramBytes  *prometheus.CounterVec // model
	inferences *prometheus.CounterVec // model
	perInf     *prometheus.GaugeVec   // model, schedule, source
}

// newMeasuredTraffic detects the host's counters. Without any it logs why,
// once, registers nothing (the rnnserve_measured_* metrics are absent) and
// returns nil.
func newMeasuredTraffic(reg *prometheus.Registry, log *slog.Logger) *measuredTraffic {
	return newMeasuredTrafficWith(reg, log,
		func() (*counters.Detection, error) { return counters.Detect(counters.Options{}) },
		func() (counters.Counter, error) {
			c, _, err := counters.Open(counters.Options{})
			return c, err
		})
}

func newMeasuredTrafficWith(reg *prometheus.Registry, log *slog.Logger,
	detect func() (*counters.Detection, error), open func() (counters.Counter, error)) *measuredTraffic {
	d, err := detect()
	if err == nil {
		err = d.Err()
	}
	if err != nil {
		log.Info("measured memory traffic off: no hardware counters (-log-level debug says why)")
		log.Debug("measured memory traffic off: the rnnserve_measured_* metrics are absent", "reason", err.Error())
		return nil
	}
	mt := &measuredTraffic{log: log, open: open,
		llc:  d.Has(counters.LLCLoadMisses) || d.Has(counters.CacheMisses),
		dram: d.Has(counters.DRAMReadBytes) && d.Has(counters.DRAMWriteBytes)}
	if !mt.llc && !mt.dram {
		log.Info("measured memory traffic off: no LLC-miss or DRAM-byte counters (-log-level debug says which there are)")
		log.Debug("measured memory traffic off: the rnnserve_measured_* metrics are absent", "counters", d.Summary())
		return nil
	}
	mt.inferences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rnnserve_measured_inferences_total", Help: "Reference inferences the measured-traffic probe ran with hardware counters.",
	}, []string{"model"})
	mt.perInf = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rnnserve_measured_dram_bytes_per_inference",
		Help: "Measured DRAM bytes of one reference inference (the input of rnnserve_model_dram_bytes_per_inference): source llc_misses is the probe thread's LLC misses x 64 (reads only), source imc the memory controller's bytes (whole machine, idle baseline subtracted).",
	}, []string{"model", "schedule", "source"})
	reg.MustRegister(mt.inferences, mt.perInf)
	if mt.llc {
		mt.llcMisses = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_measured_llc_misses_total", Help: "LLC misses of the measured-traffic probe's reference inferences, per model.",
		}, []string{"model"})
		reg.MustRegister(mt.llcMisses)
	}
	if mt.dram {
		mt.dramBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rnnserve_measured_dram_bytes_total", Help: "Memory-controller bytes (read + written, whole machine, idle baseline subtracted) during the probe's reference inferences, per model.",
		}, []string{"model"})
		reg.MustRegister(mt.dramBytes)
	}
	log.Info("measured memory traffic is on", "counters", d.Summary(), "interval", measureInterval)
	return mt
}

// run probes every model now and then every measureInterval, until stop
// is closed.
// Only models with a whole-request program are probed (not tree models).
func (mt *measuredTraffic) run(stop <-chan struct{}, table func() map[string]model, steps int) {
	t := time.NewTicker(measureInterval)
	defer t.Stop()
	failed := map[string]bool{}
	for {
		for _, m := range table() {
			sm, ok := m.(*seqModel)
			if !ok {
				continue
			}
			if err := mt.probe(stop, sm, steps); err != nil && !failed[sm.name] {
				failed[sm.name] = true // logged once per model
				mt.log.Warn("measured memory traffic: probe failed", "model", sm.name, "err", err)
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// probe measures one model's reference inference, holding one of its
// worker slots so that it never adds to the model's concurrency.
func (mt *measuredTraffic) probe(stop <-chan struct{}, m *seqModel, steps int) error {
	select {
	case <-stop:
		return nil
	default:
	}
	select {
	case m.cores <- struct{}{}:
	case <-stop:
		return nil
	}
	defer m.cores.give()
	prog := m.form.Load().prog
	p, err := prog.Plan(choice.ReferenceInput(m.net, steps), schedule.PlanOptions{Head: true})
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := mt.open()
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := p.Run(); err != nil { // warm-up: the steady state is measured
		return err
	}
	var runErr error
	meas, err := counters.Run(c, measureRuns, func() {
		if _, err := p.Run(); err != nil {
			runErr = err
		}
	})
	if err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	return mt.record(m.name, choice.Of(prog).String(), meas)
}

// record exports one measurement.
func (mt *measuredTraffic) record(name, sched string, meas *counters.Measurement) error {
	runs := float64(meas.Runs)
	mt.inferences.WithLabelValues(name).Add(runs)
	if mt.llc {
		if v, ok := meas.Counts.LLCMisses(); ok {
			mt.llcMisses.WithLabelValues(name).Add(v)
			mt.perInf.WithLabelValues(name, sched, "llc_misses").Set(v / runs * measureLine)
		}
	}
	if mt.dram {
		if v, ok := meas.Counts.DRAMBytes(); ok {
			mt.dramBytes.WithLabelValues(name).Add(v)
			mt.perInf.WithLabelValues(name, sched, "imc").Set(v / runs)
		}
	}
	return nil
}
