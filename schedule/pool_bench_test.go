package schedule

import (
	"fmt"
	"testing"
)

// BenchmarkPoolBarrier times one phase of no work across a Pool's
// workers: the cost of the barrier that ends every phase of schedule P.
//
//	go test ./schedule/ -run '^$' -bench PoolBarrier
func BenchmarkPoolBarrier(b *testing.B) {
	for _, pinned := range []bool{false, true} {
		b.Run(fmt.Sprintf("workers=2/pinned=%v", pinned), func(b *testing.B) {
			p, err := NewPool(PoolOptions{Workers: 2, NoPin: !pinned})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			phases := make([]func(int), 1000)
			for i := range phases {
				phases[i] = func(int) {}
			}
			for b.Loop() {
				p.Run(phases)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(phases)), "ns/phase")
		})
	}
}
