package dre

import (
	"fmt"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// BenchmarkAnalyzeTableI times Analyze on the largest configuration of the
// paper's Table I: hidden size 1024, 8 layers, T = 100, batch 1, a 10,000
// word embedding and softmax head, a 12 MB fully associative cache and 100
// runs (the MIN bound is asked for and skipped: its trace is too long). It
// reports the DRAM traffic per inference and the line accesses the cache
// simulated per second.
//
//	go test ./dre/ -run '^$' -bench 'BenchmarkAnalyzeTableI/cell=lstm' -benchtime 20x
//
// GRU under Schedule A is the slow case: it reads G in two column blocks,
// one region per row, so the cache holds thousands of extents.
func BenchmarkAnalyzeTableI(b *testing.B) {
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		cfg := rnn.Config{Cell: cell, Input: 1024, Hidden: 1024, Layers: 8, Vocab: 10000, HeadOut: 10000, Activation: rnn.ActSoftmax}
		for _, s := range []schedule.Schedule{schedule.A, schedule.APlus} {
			b.Run(fmt.Sprintf("cell=%v/sched=%v", cell, s), func(b *testing.B) {
				prog, p := dryPlan(b, cfg, s, 100, 1)
				opt := DefaultOptions()
				opt.Cache = cachesim.Config{Size: 12 << 20}
				var r *Report
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if r, err = Analyze(p, WorkingSetOfProgram(prog, p.T, p.B), opt); err != nil {
						b.Fatal(err)
					}
				}
				lines := float64(r.LineAccesses) * float64(r.RunsSimulated) * float64(b.N)
				b.ReportMetric(r.AvgRW, "B/inference")
				b.ReportMetric(lines/b.Elapsed().Seconds()/1e9, "Glines/s")
			})
		}
	}
}
