package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/internal/f32"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// Planning past the cores this host has (-predict). P's plan for c
// workers says which bytes each worker reads in each phase; replayed
// through a cache per core the size of its private L2, it says which of
// them each core fetches from past L2. Those bytes stream from the L3
// shared by each group of -l3-cores cores, or from DRAM, depending on
// how many distinct bytes the group streams (its footprint past L2): they
// are priced at the rate one core measured reading a buffer of that
// footprint, so that the host's own L3, as full as other tenants leave
// it, decides where the rate falls (with -dram-gbs, no more than that
// shared by all cores once the footprint is larger than the L3). The
// time of a phase is its slowest worker's, each of that worker's steps
// taking the longer of its bytes at their rates and its arithmetic (the
// products' multiply-adds at f32.GemmNT's rate, the gates at their
// measured cost per unit), plus the barrier that ends the phase: timed on
// two cores here and assumed to grow by -barrier-step-ns for every core
// beyond two, since every waiter polls every worker's counter and the
// last one's line travels to all of them. The bytes from DRAM the table
// reports are those that miss an LRU of the L3's size per group as well.

// machine is what the prediction assumes of a host: one core's rates,
// measured, and the caches and their sharing, given.
type machine struct {
	l2BW float64 // bytes per second from L2, one core
	// past is the rate, bytes per second, at which one core reads a
	// buffer of the given size (from L3 or DRAM).
	past           func(bytes int64) float64
	dramCap        float64                        // bytes per second, all cores; 0: no cap
	flops          map[schedule.Precision]float64 // each precision's products: multiply-adds ×2 per second, one core
	gate           map[rnn.CellKind]float64
	barrier2, step float64 // seconds: the barrier on two cores, and per core beyond
	l2, l3         int64
	l2Ways, l3Ways int
	l3Cores        int // cores sharing one L3
}

// barrier is the modelled cost of one phase's barrier on c cores.
func (m *machine) barrier(c int) float64 {
	if c <= 1 {
		return 0
	}
	return m.barrier2 + float64(c-2)*m.step
}

// pastRate is one core's rate for bytes past L2 when the group of cores
// it belongs to streams foot distinct bytes past their L2s and c cores
// run at once.
func (m *machine) pastRate(foot int64, c int) float64 {
	r := m.past(foot)
	if m.dramCap > 0 && foot > m.l3 {
		r = min(r, m.dramCap/float64(c))
	}
	return r
}

// prediction is one shape on one core count.
type prediction struct {
	seconds   float64 // per inference
	barrier   float64 // of which at barriers
	phases    int
	pastBytes int64 // per warm inference, all cores: bytes past the private L2s
	dramBytes int64 // of them, the bytes that miss an LRU L3 per group too
	foot      int64 // the largest group's footprint past L2
	slice     int64 // the largest W_hh slice of one worker and layer, bytes as stored
}

// stepCost is what one step of a worker asks of its core.
type stepCost struct {
	phase, worker int
	hit, past     int64   // bytes from L2 (or L1), and from past it
	flops         float64 // the products' multiply-adds ×2
	units         int     // gate units finished
}

// predict models P on c cores for one inference of T steps of net (dry:
// only its shapes are used) in precision prec: two inferences are
// replayed through the caches and the second is counted.
func predict(net *rnn.Network, cell rnn.CellKind, prec schedule.Precision, T, c int, m *machine) (prediction, error) {
	prog, err := schedule.NewPartitioned(net, schedule.PartitionOptions{Workers: c, Precision: prec, PrivateCacheBytes: m.l2})
	if err != nil {
		return prediction{}, err
	}
	p, err := prog.Plan(dre.DryInput(net, T, 1, 1), schedule.PlanOptions{})
	if err != nil {
		return prediction{}, err
	}
	l := dre.NewLayout(p.Buffers)
	priv := make([]*cachesim.LRU, c)
	for w := range priv {
		if priv[w], err = cachesim.NewLRU(cachesim.Config{Size: m.l2, LineSize: cachesim.DefaultLineSize, Ways: m.l2Ways}); err != nil {
			return prediction{}, err
		}
	}
	groups := (c + m.l3Cores - 1) / m.l3Cores
	shared := make([]*cachesim.LRU, groups)
	missed := make([]map[int64]bool, groups) // lines past L2, by group
	for d := range shared {
		if shared[d], err = cachesim.NewLRU(cachesim.Config{Size: m.l3, LineSize: cachesim.DefaultLineSize, Ways: m.l3Ways}); err != nil {
			return prediction{}, err
		}
		missed[d] = map[int64]bool{}
	}
	var pr prediction
	var costs []stepCost
	const line = cachesim.DefaultLineSize
	for run := range 2 {
		for i := range p.Steps {
			st := &p.Steps[i]
			w, d := st.Worker, st.Worker/m.l3Cores
			sc := stepCost{phase: st.Phase, worker: w}
			var lastWrite schedule.Region
			st.Regions(func(r schedule.Region, write bool) {
				if write {
					lastWrite = r
				}
				if !write && isHH(r.Buf) {
					pr.slice = max(pr.slice, r.Buf.Bytes())
				}
				if !write && r.Buf.Kind == schedule.KindWeight && (r.Buf.Role == schedule.RoleWIH || isHH(r.Buf)) {
					rows := 1.0
					if st.T < 0 {
						rows = float64(T)
					}
					sc.flops += 2 * rows * float64(r.Bytes()/int64(r.Buf.ElemSize))
				}
				base, _ := l.Addr(r.Buf)
				a := base + r.Off
				for range r.Count {
					for ln := a / line; ln <= (a+r.Len-1)/line && r.Len > 0; ln++ {
						pc, sh := priv[w], shared[d]
						before := pc.Stats().Misses
						if write {
							pc.Write(ln*line, line)
						} else {
							pc.Read(ln*line, line)
						}
						if pc.Stats().Misses == before {
							sc.hit += line
							continue
						}
						sc.past += line
						before = sh.Stats().Misses
						if write {
							sh.Write(ln*line, line)
						} else {
							sh.Read(ln*line, line)
						}
						if run == 1 {
							missed[d][ln] = true
							if sh.Stats().Misses != before {
								pr.dramBytes += line
							}
						}
					}
					a += r.Stride
				}
			})
			switch st.Kernel {
			case schedule.KLSTM, schedule.KLSTMStep, schedule.KGRU:
				sc.units = int(lastWrite.Bytes() / 4)
			}
			if run == 1 {
				costs = append(costs, sc)
				pr.pastBytes += sc.past
			}
		}
	}
	rate := make([]float64, groups)
	for d := range groups {
		foot := int64(len(missed[d])) * line
		pr.foot = max(pr.foot, foot)
		rate[d] = m.pastRate(foot, c)
	}
	phases := 0
	for _, sc := range costs {
		phases = max(phases, sc.phase+1)
	}
	slowest := make([]float64, phases)
	perWorker := make([]float64, c)
	for i, sc := range costs {
		mem := float64(sc.hit)/m.l2BW + float64(sc.past)/rate[sc.worker/m.l3Cores]
		perWorker[sc.worker] += max(mem, sc.flops/m.flops[prec]+float64(sc.units)*m.gate[cell])
		if i == len(costs)-1 || costs[i+1].phase != sc.phase {
			for w, t := range perWorker {
				slowest[sc.phase] = max(slowest[sc.phase], t)
				perWorker[w] = 0
			}
		}
	}
	for _, t := range slowest {
		pr.seconds += t
	}
	pr.phases = phases
	pr.barrier = float64(phases) * m.barrier(c)
	pr.seconds += pr.barrier
	return pr, nil
}

// gateCost times the gates of one step of 256 units of cell on one core,
// per unit.
func gateCost(cell rnn.CellKind, o *options) float64 {
	const n = 256
	r := rand.New(rand.NewPCG(3, 3))
	v := func(k int) []float32 {
		s := make([]float32, k)
		for i := range s {
			s[i] = float32(2*r.Float64() - 1)
		}
		return s
	}
	y, bias, c, h, x := v(4*n), v(4*n), v(n), v(n), v(3*n)
	f := func() { f32.LSTMGates(n, n, y, bias, c, h) }
	if cell == rnn.GRU {
		f = func() { f32.GRUGates(n, n, x, y, bias, bias, c, h) }
	}
	best := 0.0
	for range o.reps {
		calls, start := 0, time.Now()
		for time.Since(start) < o.time/10 {
			for range 64 {
				f()
			}
			calls += 64
		}
		if per := time.Since(start).Seconds() / float64(calls*n); best == 0 || per < best {
			best = per
		}
	}
	return best
}

// barrierCost times a phase of no work on p's workers.
func barrierCost(p *schedule.Pool, o *options) float64 {
	phases := make([]func(int), 1000)
	for i := range phases {
		phases[i] = func(int) {}
	}
	best := 0.0
	for range o.reps {
		runs, start := 0, time.Now()
		for time.Since(start) < o.time/10 {
			p.Run(phases)
			runs++
		}
		if per := time.Since(start).Seconds() / float64(runs*len(phases)); best == 0 || per < best {
			best = per
		}
	}
	return best
}

// shapeKey names a measured shape.
type shapeKey struct {
	cell       rnn.CellKind
	h, L, T, c int
	prec       schedule.Precision
}

// predictTable prints, for every shape, P's modelled time and traffic on
// each core count of -predict and of -cores, beside the time measured
// where this host has the cores.
func predictTable(out io.Writer, m *machine, measured map[shapeKey]float64, o *options) error {
	fmt.Fprintln(out, "## P on more cores: predicted")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "The model (cmd/roofline's doc): one core's rates measured here, L2 %.1f GB/s and past it the read rate of the group's footprint (8 MiB %.1f GB/s, 32 MiB %.1f, 512 MiB %.1f)", m.l2BW/1e9, m.past(8<<20)/1e9, m.past(32<<20)/1e9, m.past(512<<20)/1e9)
	if m.dramCap > 0 {
		fmt.Fprintf(out, ", DRAM no more than %.0f GB/s for all cores", m.dramCap/1e9)
	} else {
		fmt.Fprint(out, ", no cap on DRAM for all cores (-dram-gbs)")
	}
	fmt.Fprintf(out, ", products %s; gates %.2f ns a unit (LSTM) and %.2f (GRU); the barrier %.0f ns on two cores and %.0f ns more for each core beyond; a %s %d-way L2 per core and a %s %d-way L3 per %d cores.\n\n",
		productRates(m, o.precision), m.gate[rnn.LSTM]*1e9, m.gate[rnn.GRU]*1e9, m.barrier2*1e9, m.step*1e9, size(m.l2), m.l2Ways, size(m.l3), m.l3Ways, m.l3Cores)
	fmt.Fprintln(out, "Past L2: the bytes a warm inference reads past the cores' L2s; footprint: the distinct ones, of the largest group of cores sharing an L3; DRAM: those that miss an LRU of the L3's size too.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| cell | hidden | layers | T | weights | cores | W_hh/worker | predicted µs | of it barriers | measured µs | measured/predicted | past L2 MB | footprint | DRAM MB | speed-up over 1 core |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	counts := append(append([]int{1}, o.cores...), o.predict...)
	slices.Sort(counts)
	for _, cell := range o.cells {
		for _, h := range o.hidden {
			for _, L := range o.layers {
				net, err := rnn.NewNetwork(rnn.Config{Cell: cell, Input: h, Hidden: h, Layers: L}, true)
				if err != nil {
					return err
				}
				for _, T := range o.lengths {
					for _, prec := range o.precision {
						var one float64
						for i, c := range counts {
							if i > 0 && c == counts[i-1] {
								continue
							}
							pr, err := predict(net, cell, prec, T, c, m)
							if err != nil {
								return err
							}
							if c == 1 {
								one = pr.seconds
							}
							meas, ratio := "-", "-"
							if t, ok := measured[shapeKey{cell, h, L, T, c, prec}]; ok {
								meas, ratio = fmt.Sprintf("%.1f", t*1e6), fmt.Sprintf("%.2f", t/pr.seconds)
							}
							speed := "-"
							if one > 0 {
								speed = fmt.Sprintf("%.2f", one/pr.seconds)
							}
							fmt.Fprintf(out, "| %v | %d | %d | %d | %v | %d | %s | %.1f | %.0f%% | %s | %s | %.2f | %s | %.2f | %s |\n",
								cell, h, L, T, prec, c, size(pr.slice), pr.seconds*1e6, 100*pr.barrier/pr.seconds, meas, ratio,
								float64(pr.pastBytes)/1e6, size(pr.foot), float64(pr.dramBytes)/1e6, speed)
						}
					}
				}
			}
		}
	}
	return nil
}

// productRates lists the products' rate on one core of each precision in
// precs.
func productRates(m *machine, precs []schedule.Precision) string {
	var s []string
	for _, prec := range precs {
		s = append(s, fmt.Sprintf("%.1f GFLOP/s in %v", m.flops[prec]/1e9, prec))
	}
	return strings.Join(s, ", ")
}
