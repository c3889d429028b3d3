package server

import (
	"fmt"
	"testing"
	"time"

	"rnnserve/schedule"
)

// BenchmarkLoneGap times the bundled byte LM's 32-token plan under P on
// one and on two cores, run back to back and with a pause before each run
// as lone requests have between them (the pause is not timed). On two
// cores the pause lets the pool's helper park, and the next run pays for
// waking it (on this VM a parked helper is two wake-ups away: an idle P,
// then the helper's locked thread), which the back-to-back figure hides.
// Run
//
//	go test ./server/ -run '^$' -bench LoneGap -benchtime 2s
func BenchmarkLoneGap(b *testing.B) {
	for _, bm := range benchModels(b) {
		if bm.entry.Name != "bytelm" {
			continue
		}
		e, ids, net := bm.entry, bm.ids, bm.entry.Model.Net
		s, err := New([]Entry{e}, testOptions(), testDeps(b, testOptions()))
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range []int{1, 2} {
			prog, err := ProgramFor(net, "P", w, s.pools)
			if err != nil {
				b.Fatal(err)
			}
			for _, gap := range []time.Duration{0, 300 * time.Microsecond} {
				b.Run(fmt.Sprintf("cores=%d/gap=%v", w, gap), func(b *testing.B) {
					var total time.Duration
					for b.Loop() {
						if gap > 0 {
							time.Sleep(gap)
						}
						t0 := time.Now()
						p, _ := prog.Acquire(schedule.Input{T: len(ids), B: 1, Tokens: ids}, schedule.PlanOptions{})
						p.Run()
						p.Release()
						total += time.Since(t0)
					}
					b.ReportMetric(float64(total.Microseconds())/float64(b.N), "run-µs")
				})
			}
		}
	}
}
