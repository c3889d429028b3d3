package choice

import (
	"fmt"
	"runtime"

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
	// Weights is the model's entry among those the server counts, for
	// P's programs (schedule.PartitionOptions.Weights); nil: none.
	Weights *schedule.Weights
	progs   map[Candidate]*schedule.Program
	dry     *rnn.Network // Net's shapes, for what a program would hold (copies)
}

// Program returns c's program, built on the first call for c.
func (b *Builds) Program(c Candidate) (*schedule.Program, error) {
	if p, ok := b.progs[c]; ok {
		return p, nil
	}
	wc, serial, err := b.serial(c)
	if err != nil {
		return nil, err
	}
	var p *schedule.Program
	if serial {
		wide, err := b.Program(wc)
		if err != nil {
			return nil, err
		}
		p = wide.Serial()
	} else if p, err = c.programBeside(b.Net, b.Pools, b.Weights); err != nil {
		return nil, err
	}
	if b.progs == nil {
		b.progs = map[Candidate]*schedule.Program{}
	}
	b.progs[c] = p
	return p, nil
}

// Release forgets every program built and, if one that is not in keep
// (nor the Serial form of one of keep's, or its source: they read the same
// weights) held weight copies of its own, runs a collection, so that the
// copies of the programs the clock timed and did not keep are unmapped
// when the load ends rather than at some later collection: mapped memory
// is outside the Go heap, whose pacer does not count it. It reports
// whether it collected. The programs of keep stay as they are.
func (b *Builds) Release(keep ...*schedule.Program) bool {
	built := make([]*schedule.Program, 0, len(b.progs))
	for _, p := range b.progs {
		built = append(built, p)
	}
	b.progs = nil
	if !Unheld(built, keep) {
		return false
	}
	clear(built)
	runtime.GC()
	return true
}

// Unheld reports whether a program of dropped holds weight copies of its
// own that no program of keep reads (keep's Serial forms and their
// sources read the same weights); nil programs are skipped.
func Unheld(dropped, keep []*schedule.Program) bool {
	held := map[*schedule.Buffer]bool{}
	for _, p := range keep {
		if p != nil {
			for _, w := range p.Weights() {
				held[w] = true
			}
		}
	}
	for _, p := range dropped {
		if p == nil {
			continue
		}
		if ws := p.Weights(); p.CopyBytes() > 0 && len(ws) > 0 && !held[ws[0]] {
			return true
		}
	}
	return false
}

// HoldBeside says whether the programs of extra may stay built beside
// those of kept for a while (the server's later looks at a form it does
// not serve), by the rule withinBound keeps for programs timed together:
// the weight copies of both together within the larger of the two's and
// the last-level cache of llc bytes, that is, whichever holds fewer
// copies holds at most llc. Otherwise it says why not. A program that
// reads another's weights (a Serial form) counts them once.
func HoldBeside(kept, extra []*schedule.Program, llc int64) (bool, string) {
	a, b := copyBytes(kept), copyBytes(extra)
	if min(a, b) <= llc {
		return true, ""
	}
	return false, fmt.Sprintf("weight copies of %.1f MiB beside the %.1f MiB of the schedule served would pass %.1f MiB (the larger and the last-level cache)",
		float64(b)/(1<<20), float64(a)/(1<<20), float64(max(a, b)+llc)/(1<<20))
}

// copyBytes is the bytes of weight copies progs hold, each buffer once.
func copyBytes(progs []*schedule.Program) int64 {
	seen := map[*schedule.Buffer]bool{}
	var n int64
	for _, p := range progs {
		if p == nil {
			continue
		}
		if ws := p.Weights(); len(ws) > 0 && !seen[ws[0]] {
			for _, w := range ws {
				seen[w] = true
			}
			n += p.CopyBytes()
		}
	}
	return n
}

// Serial reports whether c's program is (or would be built as) the Serial
// form of P across all Cores.
func (b *Builds) Serial(c Candidate) (bool, error) {
	_, serial, err := b.serial(c)
	return serial, err
}

// serial is Serial, and P across all Cores in c's precision. It decides
// on a dry copy of that program (Shares reads only its weights' sizes),
// so that asking builds nothing.
func (b *Builds) serial(c Candidate) (Candidate, bool, error) {
	wc, ok := b.wideOf(c)
	if !ok {
		return Candidate{}, false, nil
	}
	dry, err := b.dryNet()
	if err != nil {
		return Candidate{}, false, err
	}
	wide, err := wc.Program(dry, nil)
	if err != nil {
		return Candidate{}, false, err
	}
	return wc, Shares(wide, b.LLC), nil
}

// dryProgram is c's program as Program builds it (the Serial form of P
// across all Cores where Serial says so), on a dry copy of Net: its plans
// walk the same buffers, of the same sizes, and it holds no weights.
func (b *Builds) dryProgram(c Candidate) (*schedule.Program, error) {
	dry, err := b.dryNet()
	if err != nil {
		return nil, err
	}
	wc, serial, err := b.serial(c)
	if err != nil {
		return nil, err
	}
	if !serial {
		return c.Program(dry, nil)
	}
	wide, err := wc.Program(dry, nil)
	if err != nil {
		return nil, err
	}
	return wide.Serial(), nil
}

// dryNet is a dry copy of Net, made once.
func (b *Builds) dryNet() (*rnn.Network, error) {
	if b.dry == nil {
		dry, err := rnn.NewNetwork(b.Net.Config(), true)
		if err != nil {
			return nil, err
		}
		b.dry = dry
	}
	return b.dry, nil
}

// copies is the bytes of weights c's program holds of its own (see
// schedule.Program.CopyBytes): a Serial P on one core counts its wide
// form's, which it reads.
func (b *Builds) copies(c Candidate) (int64, error) {
	p, err := b.dryProgram(c)
	if err != nil {
		return 0, err
	}
	return p.CopyBytes(), nil
}

// adds is the bytes of weights building c now would map beside the
// programs built so far: none if it is built, or if it is the Serial form
// of a wide program that is.
func (b *Builds) adds(c Candidate) (int64, error) {
	if _, ok := b.progs[c]; ok {
		return 0, nil
	}
	wc, serial, err := b.serial(c)
	if err != nil {
		return 0, err
	}
	if _, ok := b.progs[wc]; serial && ok {
		return 0, nil
	}
	return b.copies(c)
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
