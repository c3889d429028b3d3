package server

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"testing"

	"rnnserve/models/bundled"
	"rnnserve/schedule"
)

// BenchmarkSchedules times one 32-token batch-1 request of the bundled
// byte LM and the load test's lstm512 under every candidate the server's
// schedule choice weighs, so the choice can be checked against the
// clock; the first sub-benchmark of each model logs what auto chose. Run
//
//	go test ./server/ -run '^$' -bench Schedules -benchtime 1s -count 3
func BenchmarkSchedules(b *testing.B) {
	for _, repo := range []struct {
		name string
		fsys fs.FS
	}{{"bytelm", bundled.FS}, {"lstm512", os.DirFS("../configs/loadtest")}} {
		entries, err := LoadRepository(repo.fsys)
		if err != nil {
			b.Fatal(err)
		}
		var e Entry
		for _, x := range entries {
			if x.Name == repo.name {
				e = x
			}
		}
		net := e.Model.Net
		const steps = 32
		ids := make([]int64, steps)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range ids {
			ids[i] = rng.Int64N(int64(net.Vocab))
		}
		s, err := New([]Entry{e}, DefaultOptions(), quietLog)
		if err != nil {
			b.Fatal(err)
		}
		chosen := candidateOf(s.models[repo.name].prog)
		for _, c := range []struct {
			name    string
			workers int
		}{{"A", 1}, {"A+", 1}, {"P", 1}, {"P", 2}, {"P-bf16", 1}} {
			prog, err := ProgramFor(net, c.name, c.workers)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s/cores=%d", repo.name, c.name, c.workers), func(b *testing.B) {
				b.Logf("auto chose %v on %d core(s)", chosen, chosen.workers)
				for b.Loop() {
					p, err := prog.Plan(schedule.Input{T: steps, B: 1, Tokens: ids}, schedule.PlanOptions{})
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
