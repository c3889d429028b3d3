package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/internal/f32"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// Planning past the cores this host has (-predict). P's plan for c
// workers says which bytes each worker reads in each phase; replayed
// through a cache per core the size of its private L2 and, for what
// misses there, a cache per group of -l3-cores cores the size of the
// shared L3, it says where each byte comes from. The time of a phase is
// its slowest worker's, each of that worker's steps taking the longer of
// its bytes at the rates of their levels and its arithmetic (the input
// projections' and products' multiply-adds at f32.GemmNT's rate, the
// gates at their measured cost per unit), plus the barrier that ends
// the phase. The rates are one core's, measured in the same run; DRAM's
// is one core's until -dram-gbs, shared by all cores, runs out. The
// barrier is timed on two cores here and assumed to grow by
// -barrier-step-ns for every core beyond two: every waiter polls every
// worker's counter, and the last one's line travels to all of them.

// machine is what the prediction assumes of a host: one core's rates,
// measured, and the caches and their sharing, given.
type machine struct {
	l2BW, l3BW, dramBW float64 // bytes per second, one core
	dramCap            float64 // bytes per second, all cores; 0: no cap
	flops              float64 // multiply-adds ×2 per second, one core
	gate               map[rnn.CellKind]float64
	barrier2, step     float64 // seconds: the barrier on two cores, and per core beyond
	l2, l3             int64
	l2Ways, l3Ways     int
	l3Cores            int // cores sharing one L3
}

// barrier is the modelled cost of one phase's barrier on c cores.
func (m *machine) barrier(c int) float64 {
	if c <= 1 {
		return 0
	}
	return m.barrier2 + float64(c-2)*m.step
}

// dramRate is one core's DRAM rate when c cores stream at once.
func (m *machine) dramRate(c int) float64 {
	if m.dramCap > 0 {
		return min(m.dramBW, m.dramCap/float64(c))
	}
	return m.dramBW
}

// prediction is one shape on one core count.
type prediction struct {
	seconds   float64 // per inference
	barrier   float64 // of which at barriers
	phases    int
	l3Bytes   int64 // per warm inference, all cores: bytes past the private L2s
	dramBytes int64 // and past the shared L3s
}

// stepCost is what one step of a worker asks of its core.
type stepCost struct {
	hit, l3, dram int64   // bytes from L2 (or L1), L3, DRAM
	flops         float64 // the products' multiply-adds ×2
	units         int     // gate units finished
}

func (s stepCost) seconds(m *machine, cell rnn.CellKind, c int) float64 {
	mem := float64(s.hit)/m.l2BW + float64(s.l3)/m.l3BW + float64(s.dram)/m.dramRate(c)
	return max(mem, s.flops/m.flops+float64(s.units)*m.gate[cell])
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
	shared := make([]*cachesim.LRU, (c+m.l3Cores-1)/m.l3Cores)
	for d := range shared {
		if shared[d], err = cachesim.NewLRU(cachesim.Config{Size: m.l3, LineSize: cachesim.DefaultLineSize, Ways: m.l3Ways}); err != nil {
			return prediction{}, err
		}
	}
	phases := 0
	for i := range p.Steps {
		phases = max(phases, p.Steps[i].Phase+1)
	}
	slowest := make([]float64, phases)
	var pr prediction
	const line = cachesim.DefaultLineSize
	for run := range 2 {
		clear(slowest)
		perWorker := make([]float64, c) // the current phase's time so far, by worker
		phase := 0
		flush := func() {
			for w, t := range perWorker {
				slowest[phase] = max(slowest[phase], t)
				perWorker[w] = 0
			}
		}
		for i := range p.Steps {
			st := &p.Steps[i]
			if st.Phase != phase {
				flush()
				phase = st.Phase
			}
			w := st.Worker
			var sc stepCost
			var lastWrite schedule.Region
			st.Regions(func(r schedule.Region, write bool) {
				if write {
					lastWrite = r
				}
				if !write && r.Buf.Kind == schedule.KindWeight {
					rows := 1.0
					if st.T < 0 {
						rows = float64(T)
					}
					if r.Buf.Role == schedule.RoleWIH || isHH(r.Buf) {
						sc.flops += 2 * rows * float64(r.Bytes()/int64(r.Buf.ElemSize))
					}
				}
				base, _ := l.Addr(r.Buf)
				a := base + r.Off
				for range r.Count {
					for ln := a / line; ln <= (a+r.Len-1)/line && r.Len > 0; ln++ {
						pc, sh := priv[w], shared[w/m.l3Cores]
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
						before = sh.Stats().Misses
						if write {
							sh.Write(ln*line, line)
						} else {
							sh.Read(ln*line, line)
						}
						if sh.Stats().Misses == before {
							sc.l3 += line
						} else {
							sc.dram += line
						}
					}
					a += r.Stride
				}
			})
			switch st.Kernel {
			case schedule.KLSTM, schedule.KLSTMStep, schedule.KGRU:
				sc.units = int(lastWrite.Bytes() / 4)
			}
			perWorker[w] += sc.seconds(m, cell, c)
			if run == 1 {
				pr.l3Bytes += sc.l3 + sc.dram
				pr.dramBytes += sc.dram
			}
		}
		flush()
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
	fmt.Fprintf(out, "The model (cmd/roofline's doc): one core's rates measured here, L2 %.1f GB/s, L3 %.1f GB/s, DRAM %.1f GB/s", m.l2BW/1e9, m.l3BW/1e9, m.dramBW/1e9)
	if m.dramCap > 0 {
		fmt.Fprintf(out, " up to %.0f GB/s for all cores", m.dramCap/1e9)
	} else {
		fmt.Fprint(out, " (no cap for all cores: -dram-gbs)")
	}
	fmt.Fprintf(out, ", products %.1f GFLOP/s; gates %.2f ns a unit (LSTM) and %.2f (GRU); the barrier %.0f ns on two cores and %.0f ns more for each core beyond; a %s %d-way L2 per core and a %s %d-way L3 per %d cores.\n\n",
		m.flops/1e9, m.gate[rnn.LSTM]*1e9, m.gate[rnn.GRU]*1e9, m.barrier2*1e9, m.step*1e9, size(m.l2), m.l2Ways, size(m.l3), m.l3Ways, m.l3Cores)
	fmt.Fprintln(out, "| cell | hidden | layers | T | weights | cores | W_hh/worker | predicted µs | of it barriers | measured µs | measured/predicted | past L2 MB | DRAM MB | speed-up over 1 core |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
							es := int64(4)
							if prec == schedule.BF16 {
								es = 2
							}
							slice := int64(cell.Gates()*((h+c-1)/c)*h) * es
							meas, ratio := "-", "-"
							if t, ok := measured[shapeKey{cell, h, L, T, c, prec}]; ok {
								meas, ratio = fmt.Sprintf("%.1f", t*1e6), fmt.Sprintf("%.2f", t/pr.seconds)
							}
							speed := "-"
							if one > 0 {
								speed = fmt.Sprintf("%.2f", one/pr.seconds)
							}
							fmt.Fprintf(out, "| %v | %d | %d | %d | %v | %d | %s | %.1f | %.0f%% | %s | %s | %.2f | %.2f | %s |\n",
								cell, h, L, T, prec, c, size(slice), pr.seconds*1e6, 100*pr.barrier/pr.seconds, meas, ratio,
								float64(pr.l3Bytes)/1e6, float64(pr.dramBytes)/1e6, speed)
						}
					}
				}
			}
		}
	}
	return nil
}
