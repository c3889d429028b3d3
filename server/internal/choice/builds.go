package choice

import (
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// Builds makes the programs of one model's load, each candidate's once: a
// candidate asked for again (by Choose's clock, by TimeWide or PreferWide,
// by the server keeping it) gets the program built before, so the program
// the clock timed is the program served, and no weight slice is cut twice.
//
// P on one core, where the model also gets P across all Cores in the same
// precision and those weights are larger than the last-level cache
// (Shares), is built as the wide program's Serial form, which reads the
// wide program's weight slices: the load never maps a copy of its own
// for it. That form is chosen before any clock runs, so it is also the
// one the clock times, and it stays the one-core form if the clock then
// keeps requests off the wide form (its weights are then held once, as a
// copy of its own would be).
type Builds struct {
	Net   *rnn.Network
	Pools Pools
	Cores int   // the model's cores: the workers of P's wide form
	LLC   int64 // last-level cache bytes
	progs map[Candidate]*schedule.Program
}

// Program returns c's program, built on the first call for c.
func (b *Builds) Program(c Candidate) (*schedule.Program, error) {
	if p, ok := b.progs[c]; ok {
		return p, nil
	}
	var p *schedule.Program
	if wc, ok := b.wideOf(c); ok {
		wide, err := b.Program(wc)
		if err != nil {
			return nil, err
		}
		if Shares(wide, b.LLC) {
			p = wide.Serial()
		}
	}
	if p == nil {
		var err error
		if p, err = c.Program(b.Net, b.Pools); err != nil {
			return nil, err
		}
	}
	if b.progs == nil {
		b.progs = map[Candidate]*schedule.Program{}
	}
	b.progs[c] = p
	return p, nil
}

// Serial reports whether c's program is (or would be built as) the Serial
// form of P across all Cores.
func (b *Builds) Serial(c Candidate) (bool, error) {
	wc, ok := b.wideOf(c)
	if !ok {
		return false, nil
	}
	wide, err := b.Program(wc)
	if err != nil {
		return false, err
	}
	return Shares(wide, b.LLC), nil
}

// wideOf is P across all Cores in c's precision, if c is P on one core
// and there is more than one.
func (b *Builds) wideOf(c Candidate) (Candidate, bool) {
	if c.Sched != schedule.Partitioned || c.Workers != 1 || b.Cores <= 1 {
		return Candidate{}, false
	}
	return Candidate{Sched: schedule.Partitioned, Prec: c.Prec, Workers: b.Cores}, true
}

// Shares says whether a model's P on one core should run as wide.Serial(),
// reading the weight slices of its P across every core rather than a copy
// of its own: when wide is P and its weights are larger than the
// last-level cache of llc bytes. Weights that large stream from DRAM
// every inference on either form, and a second copy of them costs more
// memory than the cache holds; the Serial form's extra call per part of
// each step is then small beside that stream (BenchmarkSerial: 0.99-1.07x
// the time of a copy of its own at hidden 1024, and up to 1.11x on small
// models, whose copy costs little). The one-core answers then equal the
// wide form's bit for bit.
func Shares(wide *schedule.Program, llc int64) bool {
	if wide.Schedule != schedule.Partitioned || wide.Workers() <= 1 {
		return false
	}
	var bytes int64
	for _, b := range wide.Weights() {
		bytes += b.Bytes()
	}
	return bytes > llc
}
