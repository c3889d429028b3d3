package schedule

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"rnnserve/internal/benchcpu"
	"rnnserve/internal/cputime"
	"rnnserve/rnn"
)

// BenchmarkTableIP is BenchmarkTableI for the partitioned schedule: every
// Table I shape at batch 1, on GOMAXPROCS workers (set it with -cpu), with
// float32 (sched=P), bf16 (sched=Pbf16) and int8 (sched=Pint8) weights,
// float32 with no slice packed (sched=Prows: every weight row-major,
// for comparing with P's packed W_hh and W_ih in one run), and float32 on
// one worker whatever GOMAXPROCS (sched=P1: the one-core P a server
// chooses on several cores where one runs a model faster). Like
// BenchmarkTableI it reuses its plan from Program.Acquire and reports
// ns/step and the weight bytes read per step (half for bf16's matrices, a
// quarter and 8 bytes a row for int8's).
//
//	go test ./schedule/ -run '^$' -bench 'BenchmarkTableIP/' -benchtime 200ms -cpu 2
//	go test ./schedule/ -run '^$' -bench 'TableIP/cell=lstm/hidden=1024/layers=1/T=100$/sched=(P|Prows)$' -count 5
//
// scripts/bench_compare.py runs it beside BenchmarkTableI and PyTorch.
//
// One -cpu value a process (benchcpu).
func BenchmarkTableIP(b *testing.B) {
	benchcpu.One(b)
	var pool *Pool // P on more than one worker runs on a pool the benchmark owns
	if n := runtime.GOMAXPROCS(0); n > 1 {
		var err error
		if pool, err = NewPool(PoolOptions{Workers: n}); err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
	}
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		for _, hidden := range []int{64, 128, 256, 512, 1024} {
			for _, layers := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
				var net *rnn.Network
				for _, T := range []int{1, 10, 50, 100} {
					for _, v := range []struct {
						sched   string
						prec    Precision
						pack    int
						workers int // 0: GOMAXPROCS
					}{{"P", F32, 0, 0}, {"P1", F32, 0, 1}, {"Pbf16", BF16, 0, 0}, {"Pint8", Int8, 0, 0}, {"Prows", F32, -1, 0}} {
						name := fmt.Sprintf("cell=%v/hidden=%d/layers=%d/T=%d/sched=%s", cell, hidden, layers, T, v.sched)
						b.Run(name, func(b *testing.B) {
							if net == nil {
								net = randomNet(b, rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, 1)
							}
							opt := PartitionOptions{Workers: runtime.GOMAXPROCS(0), Pool: pool, Precision: v.prec, PackBytes: v.pack}
							if v.workers > 0 {
								opt.Workers, opt.Pool = v.workers, nil
							}
							prog, err := NewPartitioned(net, opt)
							if err != nil {
								b.Fatal(err)
							}
							benchProgram(b, prog, T)
						})
					}
				}
			}
		}
	}
}

// benchProgram times running T steps of batch 1 on a plan from Acquire,
// as the server runs a request: the plan is built on the first call and
// reused after. That first call runs before the timer starts, as the
// peers' drivers warm up before they time (scripts/ort_bench.js for 0.2
// s, scripts/bench_torch.py two calls): building the plan and the
// weights' first trip from DRAM are not the steady state, and where an
// inference takes milliseconds (hidden 1024) a benchmark of a few
// iterations would carry them. Beside the wall time per step (ns/step)
// it reports the process's CPU time per step over the same iterations
// (cpu-ns/step, user and system, Unix only): on a shared machine, the
// time the benchmark ran rather than waited for a core (with P on
// several workers it counts every worker, spinning included).
func benchProgram(b *testing.B, prog *Program, T int) {
	in := randomInput(prog.Net, T, 1, false, rand.New(rand.NewPCG(1, 1)))
	p, err := prog.Plan(in, PlanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var weightBytes int64
	p.Walk(func(r Region, w bool) {
		if r.Buf.Kind == KindWeight && !w {
			weightBytes += r.Bytes()
		}
	})
	infer := func() {
		p, err := prog.Acquire(in, PlanOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Run(); err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
	infer()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := cputime.Process()
	for b.Loop() {
		infer()
	}
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(T), "ns/step")
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/float64(T), "cpu-ns/step")
	}
	b.ReportMetric(float64(weightBytes)/float64(T), "B/step")
}

// BenchmarkTableIPKernels shows where one core's time goes under P: the
// steps of a one-worker plan run in the plan's order, each timed alone,
// and the time per time step of each kind is reported beside the whole:
// proj (the input projections, W_ih times every step's input), matmul
// (the recurrent products a GRU runs apart from its gates), gru_gates,
// lstm_step (an LSTM step's product and gates in one call) and other
// (the rest), in µs per time step. Reading the clock around every step
// adds some 20-40 ns a step, so the sum is a little above
// BenchmarkTableIP's time. The recurrent kinds (matmul, gru_gates,
// lstm_step) are also reported by where the step falls in its layer:
// rec-first, a step among the first ten after the layer's projections
// (which have just streamed W_ih through the caches), and, where T > 10,
// rec-after for the later ones, in µs per such step: what the
// projections' pass costs the steps that follow it.
//
//	go test ./schedule/ -run '^$' -bench 'TableIPKernels/cell=gru/hidden=256/layers=4/T=100$' -cpu 1
func BenchmarkTableIPKernels(b *testing.B) {
	tableIShapes(b, benchKernels)
}

// tableIShapes runs bench as a sub-benchmark at every Table I shape with
// T >= 10, each network made once for its two lengths.
func tableIShapes(b *testing.B, bench func(b *testing.B, net *rnn.Network, T int)) {
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		for _, hidden := range []int{64, 256, 1024} {
			for _, layers := range []int{1, 4} {
				var net *rnn.Network
				for _, T := range []int{10, 100} {
					b.Run(fmt.Sprintf("cell=%v/hidden=%d/layers=%d/T=%d", cell, hidden, layers, T), func(b *testing.B) {
						if net == nil {
							net = randomNet(b, rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, 1)
						}
						bench(b, net, T)
					})
				}
			}
		}
	}
}

func benchKernels(b *testing.B, net *rnn.Network, T int) {
	prog, err := NewPartitioned(net, PartitionOptions{Workers: 1})
	if err != nil {
		b.Fatal(err)
	}
	p, err := prog.Plan(randomInput(net, T, 1, false, rand.New(rand.NewPCG(1, 1))), PlanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	kinds := []string{"proj", "matmul", "gru_gates", "lstm_step", "other"}
	kind := make([]int, len(p.Steps))
	for i, s := range p.Steps {
		switch o := s.op.(type) {
		case *gemmOp:
			kind[i] = 1
			if o.once {
				kind[i] = 0
			}
		case *gruOp:
			kind[i] = 2
		case *lstmStepOp:
			kind[i] = 3
		default:
			kind[i] = 4
		}
	}
	// class[i]: 0 for a recurrent kind's step among its layer's first ten
	// time steps, 1 for one after them, -1 for the other kinds; steps
	// counts the time steps of each layer and direction in each class (an
	// LSTM's first step from a zero state has no recurrent kind).
	const firstSteps = 10
	class := make([]int, len(p.Steps))
	var steps [2]map[[3]int]bool
	steps[0], steps[1] = map[[3]int]bool{}, map[[3]int]bool{}
	for i, s := range p.Steps {
		class[i] = -1
		if k := kind[i]; k < 1 || k > 3 {
			continue
		}
		into := s.T
		if s.Dir == 1 {
			into = T - 1 - s.T
		}
		class[i] = 1
		if into < firstSteps {
			class[i] = 0
		}
		steps[class[i]][[3]int{s.Layer, s.Dir, s.T}] = true
	}
	spent := make([]time.Duration, len(kinds))
	var rec [2]time.Duration // by class
	for b.Loop() {
		for i := range p.Steps {
			t0 := time.Now()
			p.Steps[i].op.run()
			d := time.Since(t0)
			spent[kind[i]] += d
			if c := class[i]; c >= 0 {
				rec[c] += d
			}
		}
	}
	var total time.Duration
	for k, name := range kinds {
		total += spent[k]
		b.ReportMetric(float64(spent[k].Nanoseconds())/1e3/float64(b.N*T), name+"-µs/step")
	}
	b.ReportMetric(float64(total.Nanoseconds())/1e3/float64(b.N*T), "sum-µs/step")
	if n := steps[0]; len(n) > 0 {
		b.ReportMetric(float64(rec[0].Nanoseconds())/1e3/float64(b.N*len(n)), "rec-first-µs/step")
	}
	if n := steps[1]; len(n) > 0 {
		b.ReportMetric(float64(rec[1].Nanoseconds())/1e3/float64(b.N*len(n)), "rec-after-µs/step")
	}
}

// BenchmarkTableIPPhases shows where the time of P on several cores goes
// (GOMAXPROCS workers, at least two): the plan runs phase by phase on the
// pool as Run does, each worker's part of each phase timed, and per time
// step it reports the phases' longest parts by kind beside the whole
// (ns/step, as BenchmarkTableIP's): proj (the input projections), first
// (each layer's first step with a recurrent product, which reads W_hh
// while the projection's W_ih still holds the caches: from DRAM when the
// model does not fit L3), steps (the other time steps), and wait (the
// rest of the time: barriers, and parts one worker ran after another's);
// spread is the sum over phases of the longest part less the shortest,
// time a core waited at a barrier for the other's part (also by kind:
// proj-spread, first-spread, steps-spread), and
// proj-shortest the projections' shortest parts (proj less it: what the
// slower core's share cost the phases); and per worker w, its parts of
// the later steps (wN-steps) and the share of those phases it was the
// last to finish (wN-slowest-share: near 1/workers each where the
// spread comes and goes, one worker's where a core is slower). In µs per
// time step. Reading the clock around every part costs some 50 ns a phase, so
// at hidden 64 (a phase of about a microsecond) the whole is above
// BenchmarkTableIP's time by a half; at hidden 1024 it is within the noise.
//
//	go test ./schedule/ -run '^$' -bench 'TableIPPhases/cell=gru/hidden=1024/layers=4/T=10$' -cpu 2
func BenchmarkTableIPPhases(b *testing.B) {
	benchcpu.One(b)
	n := runtime.GOMAXPROCS(0)
	if n < 2 {
		b.Skip("P on one core has one part a phase: see BenchmarkTableIPKernels")
	}
	pool, err := NewPool(PoolOptions{Workers: n})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	tableIShapes(b, func(b *testing.B, net *rnn.Network, T int) { benchPhases(b, net, T, pool) })
}

// The kinds of phase of a P plan (phaseKinds): an input projection's,
// a layer's first step with a recurrent product, and every other.
const (
	phaseProj = iota
	phaseFirst
	phaseSteps
)

// phaseKinds gives every phase of p its kind.
func phaseKinds(p *Plan) []int {
	kind := make([]int, len(p.span)/p.workers)
	for ph := range kind {
		kind[ph] = phaseSteps
	}
	seen := map[[2]int]bool{} // layers and directions whose first product is found
	for _, s := range p.Steps {
		switch o := s.op.(type) {
		case *gemmOp:
			if o.once {
				kind[s.Phase] = phaseProj
				continue
			}
		case *lstmStepOp:
		default:
			continue
		}
		if s.Layer >= 0 && !seen[[2]int{s.Layer, s.Dir}] {
			seen[[2]int{s.Layer, s.Dir}] = true
			kind[s.Phase] = phaseFirst
		}
	}
	return kind
}

// poolPlan is a float32 P plan of net over pool's workers for one
// random input of T steps at batch 1.
func poolPlan(tb testing.TB, net *rnn.Network, T int, pool *Pool) *Plan {
	prog, err := NewPartitioned(net, PartitionOptions{Workers: pool.Workers(), Pool: pool})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := prog.Plan(randomInput(net, T, 1, false, rand.New(rand.NewPCG(1, 1))), PlanOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func benchPhases(b *testing.B, net *rnn.Network, T int, pool *Pool) {
	p := poolPlan(b, net, T, pool)
	W := p.workers
	phases := len(p.span) / W
	const proj, first, steps = phaseProj, phaseFirst, phaseSteps
	kind := phaseKinds(p)
	took := make([]time.Duration, phases*W) // each part's time, written by whoever runs it
	run := func(ph, w int) {
		t0 := time.Now()
		p.runPhase(ph, w)
		took[ph*W+w] = time.Since(t0)
	}
	var byKind, spreadBy [3]time.Duration
	var spread, projLo time.Duration
	perW := make([]time.Duration, W)
	slowest := make([]int, W)
	for b.Loop() {
		pool.Phases(phases, run)
		for ph := range phases {
			lo, hi := took[ph*W], took[ph*W]
			for _, d := range took[ph*W+1 : ph*W+W] {
				lo, hi = min(lo, d), max(hi, d)
			}
			byKind[kind[ph]] += hi
			if kind[ph] == proj {
				projLo += lo
			}
			spread += hi - lo
			spreadBy[kind[ph]] += hi - lo
			if kind[ph] == steps {
				for w := range W {
					perW[w] += took[ph*W+w]
					if took[ph*W+w] == hi {
						slowest[w]++
					}
				}
			}
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N*T) }
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/step")
	b.ReportMetric(per(byKind[proj]), "proj-µs/step")
	b.ReportMetric(per(projLo), "proj-shortest-µs/step")
	b.ReportMetric(per(byKind[first]), "first-µs/step")
	b.ReportMetric(per(byKind[steps]), "steps-µs/step")
	b.ReportMetric(per(b.Elapsed()-byKind[proj]-byKind[first]-byKind[steps]), "wait-µs/step")
	b.ReportMetric(per(spread), "spread-µs/step")
	stepPhases := 0
	for _, n := range slowest {
		stepPhases += n
	}
	for w := range W {
		b.ReportMetric(per(perW[w]), fmt.Sprintf("w%d-steps-µs/step", w))
		b.ReportMetric(float64(slowest[w])/float64(max(stepPhases, 1)), fmt.Sprintf("w%d-slowest-share", w))
	}
	for k, name := range []string{"proj", "first", "steps"} {
		b.ReportMetric(per(spreadBy[k]), name+"-spread-µs/step")
	}
}

// BenchmarkProjectionsBeside runs P on one core over models=k networks
// of 6.8 MiB each (lstm, input 768, hidden 384, one layer: a 4.5 MiB
// W_ih; T = 10) as a server with k models loaded. With alone and counted
// requests for all k come in turn; alone judges "near" by each model's
// own weights (below half of a 32 MiB L3: the groups take every row of
// the projections straight from the cache), counted by a Resident that
// each run stamps (from three models on the others that ran in between
// take it above half: the first row pulls each block of W_ih in alone).
// With one only the first model is requested, the others idle: counted
// by the Resident (near, as they push nothing out), and with one-loaded
// judged as by the bytes of every model loaded (the others' entries are
// stamped with each run as if they ran, which they do not). ns/step is
// per step of a request.
//
//	go test ./schedule/ -run '^$' -bench 'BenchmarkProjectionsBeside' -cpu 1 -count 3
func BenchmarkProjectionsBeside(b *testing.B) {
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 768, Hidden: 384, Layers: 1}
	const T = 10
	var nets []*rnn.Network
	for _, k := range []int{1, 3, 6} {
		for _, mode := range []string{"alone", "counted", "one", "one-loaded"} {
			b.Run(fmt.Sprintf("models=%d/%s", k, mode), func(b *testing.B) {
				for len(nets) < k {
					nets = append(nets, randomNet(b, cfg, uint64(len(nets)+1)))
				}
				var res Resident
				var plans []*Plan
				var ws []*Weights
				for _, net := range nets[:k] {
					opt := PartitionOptions{Workers: 1}
					if mode != "alone" {
						opt.Weights = res.Add(net.WeightBytes())
						ws = append(ws, opt.Weights)
					}
					prog, err := NewPartitioned(net, opt)
					if err != nil {
						b.Fatal(err)
					}
					p, err := prog.Acquire(randomInput(net, T, 1, false, rand.New(rand.NewPCG(1, 1))), PlanOptions{})
					if err != nil {
						b.Fatal(err)
					}
					plans = append(plans, p)
				}
				// run runs the i-th request and stamps what ran.
				run := func(i int) {
					j := i % k
					if mode == "one" || mode == "one-loaded" {
						j = 0
					}
					plans[j].Run()
					switch {
					case mode == "one-loaded":
						for _, w := range ws {
							w.Ran()
						}
					case ws != nil:
						ws[j].Ran()
					}
				}
				for i := range k {
					run(i)
				}
				i := 0
				for b.Loop() {
					run(i)
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/step")
			})
		}
	}
}
