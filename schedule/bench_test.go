package schedule

import (
	"fmt"
	"testing"

	"rnnserve/rnn"
)

// BenchmarkTableI times one inference of every shape of the DRE paper's
// Table I (batch 1, input size = hidden size, float features) under both
// schedules, on a plan from Program.Acquire as the server runs a request
// (built once, reused with each new input). It
// reports ns/step (time per inference / T) and B/step (bytes of weight
// matrices and biases read per time step, from the plan itself).
//
//	go test ./schedule/ -run '^$' -bench 'BenchmarkTableI/' -benchtime 200ms -cpu 1
//
// scripts/bench_compare.py runs it beside PyTorch and prints the table.
func BenchmarkTableI(b *testing.B) {
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		for _, hidden := range []int{64, 128, 256, 512, 1024} {
			for _, layers := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
				var net *rnn.Network // built on first use: only the selected shapes pay for it
				for _, T := range []int{1, 10, 50, 100} {
					for _, s := range []Schedule{A, APlus} {
						name := fmt.Sprintf("cell=%v/hidden=%d/layers=%d/T=%d/sched=%v", cell, hidden, layers, T, s)
						b.Run(name, func(b *testing.B) {
							if net == nil {
								net = randomNet(b, rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, 1)
							}
							benchPlan(b, net, s, T)
						})
					}
				}
			}
		}
	}
}

func benchPlan(b *testing.B, net *rnn.Network, s Schedule, T int) {
	prog, err := NewProgram(net, s)
	if err != nil {
		b.Fatal(err)
	}
	benchProgram(b, prog, T)
}
