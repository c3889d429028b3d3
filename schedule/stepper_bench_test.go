package schedule

import (
	"fmt"
	"testing"

	"rnnserve/rnn"
)

// BenchmarkStepper times one batched time step of the server load test's
// lstm512 and lstm2048 (embedding 128, 2 LSTM layers) at several batch sizes,
// with the floating-point rate of its three products per layer pair. Run
//
//	go test ./schedule/ -run '^$' -bench Stepper -cpu 1
func BenchmarkStepper(b *testing.B) {
	for _, H := range []int{512, 2048} {
		benchStepper(b, H)
	}
}

func benchStepper(b *testing.B, H int) {
	net := randomNet(b, rnn.Config{Cell: rnn.LSTM, Input: 128, Hidden: H, Layers: 2, Vocab: 256}, uint64(H))
	for _, rows := range []int{1, 8, 32, 64} {
		b.Run(fmt.Sprintf("H=%d/rows=%d", H, rows), func(b *testing.B) {
			st, err := NewStepper(net, rows)
			if err != nil {
				b.Fatal(err)
			}
			// Sequences of 256 steps, restarted when done (their input
			// projections, computed on Add, are part of the time).
			for range rows {
				if err := st.Add(&Sequence{Tokens: make([]int64, 256)}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				for _, q := range st.Step() {
					st.Remove(q)
					if err := st.Add(&Sequence{Tokens: make([]int64, 256)}); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Per row and step: x·W_ihᵀ of layer 1 and h·W_hhᵀ of both layers.
			flops := 2 * float64(rows) * 4 * float64(H) * float64(3*H)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows), "ns/row-step")
		})
	}
}

// BenchmarkStepperRequests serves requests shaped like the peers load
// test's (bytelm's shape: embedding 48 of 256 tokens, two LSTM layers of
// 192; 32 tokens a request) through one stepper held at rows rows, as a
// lane at 8 and 64 clients holds them: each finished request is replaced
// by a fresh one before the next step, the rows' phases staggered. It
// reports the time per request served, its share of the batched steps
// (CPU of one core). Run
//
//	go test ./schedule/ -run '^$' -bench StepperRequests -cpu 1
func BenchmarkStepperRequests(b *testing.B) {
	const T = 32
	net := randomNet(b, rnn.Config{Cell: rnn.LSTM, Input: 48, Hidden: 192, Layers: 2, Vocab: 256}, 192)
	tokens := make([]int64, T)
	for i := range tokens {
		tokens[i] = int64(i * 37 % 256)
	}
	for _, rows := range []int{3, 12, 23} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			st, err := NewStepper(net, rows)
			if err != nil {
				b.Fatal(err)
			}
			for i := range rows {
				if err := st.Add(&Sequence{Tokens: tokens[:T-i*T/rows]}); err != nil {
					b.Fatal(err)
				}
			}
			served := 0
			for b.Loop() {
				for _, q := range st.Step() {
					st.Remove(q)
					served++
					if err := st.Add(&Sequence{Tokens: tokens}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(served, 1)), "ns/request")
		})
	}
}
