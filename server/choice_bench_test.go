package server

import (
	"fmt"
	"testing"

	"rnnserve/schedule"
	"rnnserve/server/internal/choice"
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
		chosen := choice.Of(seqOf(b, s, e.Name).form.Load().prog)
		for _, c := range []struct {
			name    string
			workers int
		}{{"A", 1}, {"A+", 1}, {"P", 1}, {"P", 2}, {"P-bf16", 1}} {
			prog, err := ProgramFor(net, c.name, c.workers, s.pools)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s/cores=%d", e.Name, c.name, c.workers), func(b *testing.B) {
				b.Logf("auto chose %v on %d core(s)", chosen, chosen.Workers)
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
