package server

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// BenchmarkSchedules times one 32-token batch-1 request of the bundled
// byte LM and the load test's lstm512 under every candidate the server's
// schedule choice weighs, so the choice can be checked against the
// clock; the first sub-benchmark of each model logs what auto chose. Run
//
//	go test ./server/ -run '^$' -bench Schedules -benchtime 1s -count 3
func BenchmarkSchedules(b *testing.B) {
	for _, bm := range benchModels(b) {
		e, ids, net := bm.entry, bm.ids, bm.entry.Model.Net
		s, err := New([]Entry{e}, testOptions(), testDeps(b, testOptions()))
		if err != nil {
			b.Fatal(err)
		}
		chosen := candidateOf(seqOf(b, s, e.Name).prog)
		for _, c := range []struct {
			name    string
			workers int
		}{{"A", 1}, {"A+", 1}, {"P", 1}, {"P", 2}, {"P-bf16", 1}} {
			prog, err := ProgramFor(net, c.name, c.workers, s.pools)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s/cores=%d", e.Name, c.name, c.workers), func(b *testing.B) {
				b.Logf("auto chose %v on %d core(s)", chosen, chosen.workers)
				for b.Loop() {
					p, err := prog.Plan(schedule.Input{T: len(ids), B: 1, Tokens: ids}, schedule.PlanOptions{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := p.Run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkChoiceTableI checks schedule: auto against the clock over Table
// I shapes (LSTM and GRU, hidden 64, 256 and 1024, 1 and 4 layers,
// T = 10 and 100, batch 1, random weights) at 1 core and at GOMAXPROCS
// cores: for each shape and core count it makes the server's choice as a
// model load does (traffic model, then the default timing budget), then
// times every candidate afresh, alternating, for -choicetime, and prints
// the chosen schedule's median time beside the fastest's. The metric
// worst_chosen/fastest is the largest ratio over all shapes (the target:
// at most 1.10). Run
//
//	go test ./server/ -run '^$' -bench ChoiceTableI -benchtime 1x
func BenchmarkChoiceTableI(b *testing.B) {
	cores := []int{1}
	if n := runtime.GOMAXPROCS(0); n > 1 {
		cores = append(cores, min(n, schedule.MaxWorkers))
	}
	pools := Pools{}
	for _, n := range cores {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		pools[n] = p
	}
	budget := DefaultOptions().ScheduleTiming
	var out strings.Builder
	fmt.Fprintf(&out, "\n| cell | hidden | layers | T | cores | chosen | chosen µs | fastest | fastest µs | chosen/fastest |\n|---|---:|---:|---:|---:|---|---:|---|---:|---:|\n")
	worst := 0.0
	for range b.N {
		for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
			for _, hidden := range []int{64, 256, 1024} {
				for _, layers := range []int{1, 4} {
					net, err := rnn.NewNetwork(rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, false)
					if err != nil {
						b.Fatal(err)
					}
					models.Randomize(net, 1)
					for _, T := range []int{10, 100} {
						for _, c := range cores {
							tm := trafficModel{llc: llcOrDefault(0), private: privateOrDefault(0), workers: c, steps: T}
							chosen, _, _, err := chooseSchedule(net, ModelConfig{}, tm, pools, budget)
							if err != nil {
								b.Fatal(err)
							}
							cands := []candidate{{sched: schedule.A, workers: 1}, {sched: schedule.APlus, workers: 1}, {sched: schedule.Partitioned, workers: c}}
							progs := make([]*schedule.Program, len(cands))
							at := -1
							for i, cd := range cands {
								if progs[i], err = cd.program(net, pools); err != nil {
									b.Fatal(err)
								}
								if cd == chosen {
									at = i
								}
							}
							if at < 0 {
								b.Fatalf("auto chose %v, not a candidate", chosen)
							}
							ts, err := timePrograms(progs, referenceInput(net, T), *choiceTime)
							if err != nil {
								b.Fatal(err)
							}
							fastest := 0
							for i := range ts {
								if ts[i].median < ts[fastest].median {
									fastest = i
								}
							}
							ratio := float64(ts[at].median) / float64(ts[fastest].median)
							worst = max(worst, ratio)
							fmt.Fprintf(&out, "| %v | %d | %d | %d | %d | %v | %.1f | %v | %.1f | %.2f |\n", cell, hidden, layers, T, c,
								chosen, us(ts[at].median), cands[fastest], us(ts[fastest].median), ratio)
						}
					}
				}
			}
		}
	}
	b.ReportMetric(worst, "worst_chosen/fastest")
	fmt.Print(out.String()) // the table, whole (b.Log would cut it)
}

var choiceTime = flag.Duration("choicetime", time.Second, "BenchmarkChoiceTableI: how long to time each shape's candidates")

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
