package dre_test

import (
	"fmt"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// ExampleAnalyze compares the two schedules of a small LSTM layer whose
// weights (32 KiB) do not fit its 16 KiB cache: Schedule A reads G at every
// one of the 20 steps, A+ only the recurrent half.
func ExampleAnalyze() {
	net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 32, Hidden: 32, Layers: 1}, true)
	if err != nil {
		panic(err)
	}
	for _, s := range []schedule.Schedule{schedule.A, schedule.APlus} {
		prog, plan, err := dre.DryPlan(net, s, 20, 1, 1)
		if err != nil {
			panic(err)
		}
		r, err := dre.Analyze(plan, dre.WorkingSetOfProgram(prog, plan.T, plan.B), dre.Options{Cache: cachesim.Config{Size: 16 << 10}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-2s working set %d B, AvgRW %.0f B per inference, DRE %.1f (%d runs, %d simulated)\n",
			r.Schedule, r.WorkingSet.Total, r.AvgRW, r.DRE, r.Runs, r.RunsSimulated)
	}
	// Output:
	// A  working set 39168 B, AvgRW 709627 B per inference, DRE 18.1 (100 runs, 2 simulated)
	// A+ working set 39168 B, AvgRW 414196 B per inference, DRE 10.6 (100 runs, 2 simulated)
}
