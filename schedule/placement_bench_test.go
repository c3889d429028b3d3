package schedule

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"gonum.org/v1/gonum/stat"

	"rnnserve/internal/benchcpu"
	"rnnserve/internal/f32"
	"rnnserve/internal/hugepage"
	"rnnserve/rnn"
)

// placementRounds is how many times BenchmarkPPlacement reads every page.
const placementRounds = 24

// placementRef is how many huge pages of fresh memory the page reads are
// held against: 96 MiB, three times a 32 MiB L3, so that a page read once
// a round comes from DRAM.
const placementRef = 48

// hugeChunks cuts each of ws at the 2 MiB boundaries of its addresses:
// each piece lies in one huge page where the host has THP (in 4 KiB pages
// of one 2 MiB range where not), so the time of each is that page's.
func hugeChunks(ws [][]float32) [][]float32 {
	const per = hugepage.Size / 4
	var out [][]float32
	for _, w := range ws {
		for len(w) > 0 {
			addr := uintptr(unsafe.Pointer(unsafe.SliceData(w)))
			n := min(len(w), int((hugepage.Size-addr%hugepage.Size)/4))
			if n < per/8 { // a sliver at a page's end: too short to time alone
				w = w[n:]
				continue
			}
			out = append(out, w[:n])
			w = w[n:]
		}
	}
	return out
}

// pageRates reads every chunk once a round, in an order shuffled anew
// each round, and returns its ns per KiB, a row a round: from DRAM where
// the chunks add up to well over the L3.
func pageRates(chunks [][]float32) [][]float64 {
	rng := rand.New(rand.NewPCG(7, 7))
	order := make([]int, len(chunks))
	for i := range order {
		order[i] = i
	}
	rows := make([][]float64, placementRounds)
	var sink float32
	for r := range rows {
		rows[r] = make([]float64, len(chunks))
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			t0 := time.Now()
			sink += f32.Sum(chunks[c])
			rows[r][c] = float64(time.Since(t0).Nanoseconds()) / float64(len(chunks[c])*4) * 1024
		}
	}
	besideSink += sink
	return rows
}

// placementOf is the median over rounds of W_hh's mean time a byte (rows'
// first nw entries) over the fresh pieces' (the rest), and the fresh
// pieces' median GB/s: above 1 where W_hh's pages read slower than fresh
// memory.
func placementOf(rows [][]float64, nw int) (ratio, refGBs float64) {
	var ratios, refs []float64
	for _, row := range rows {
		w, ref := stat.Mean(row[:nw], nil), stat.Mean(row[nw:], nil)
		ratios = append(ratios, w/ref)
		refs = append(refs, 1024/ref)
	}
	slices.Sort(ratios)
	slices.Sort(refs)
	return stat.Quantile(0.5, stat.Empirical, ratios, nil), stat.Quantile(0.5, stat.Empirical, refs, nil)
}

// whhOf is every W_hh p's recurrent products multiply, once each.
func whhOf(p *Plan) [][]float32 {
	var out [][]float32
	seen := map[*float32]bool{}
	for _, s := range p.Steps {
		m, _, ok := recurrentW(s)
		if !ok || s.Layer < 0 || m.Buf.F32 == nil {
			continue
		}
		w := m.Buf.F32[m.Off : m.Off+(m.Rows-1)*m.LD+m.Cols]
		if k := unsafe.SliceData(w); !seen[k] {
			seen[k] = true
			out = append(out, w)
		}
	}
	return out
}

// placementCopies is how many copies of the network BenchmarkPPlacement
// builds, each with weights of its own.
const placementCopies = 4

// BenchmarkPPlacement asks whether where a process's weights landed in
// memory sets its speed: on the project's VMs the same P at the same
// shape runs up to 1.3x slower in one process than in the next. It
// builds four copies of the network, each packing its weights into
// pages of its own, and each iteration runs one inference of P on every
// copy, in an order turned one on each time, so that the host's speed of
// the moment is in all four alike: cN-µs/step is copy N's median time a
// step over its median over the copies (1: placement does not matter),
// copy-spread the slowest copy's over the fastest's. Then it reads every
// huge page of each copy's W_hh and 32 fresh huge pages, in a new order
// each of 24 rounds, once a round (from DRAM): cN-whh-dram is copy N's
// W_hh time per byte over the fresh pages' median, and ref-dram-GB/s the
// fresh pages' rate. Held together over many processes, the copies'
// times against their pages' DRAM rates say whether placement explains
// the spread. ns/step is per step of one inference, as BenchmarkTableIP's.
//
//	go test ./schedule/ -run '^$' -bench 'PPlacement/cell=lstm/hidden=1024/layers=1/T=100$' -cpu 1 -benchtime 100x
func BenchmarkPPlacement(b *testing.B) {
	benchcpu.One(b)
	n := runtime.GOMAXPROCS(0)
	var pool *Pool
	if n > 1 {
		var err error
		if pool, err = NewPool(PoolOptions{Workers: n}); err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
	}
	ref := &struct{ w []float32 }{}
	tableIShapes(b, func(b *testing.B, net *rnn.Network, T int) {
		in := randomInput(net, T, 1, false, rand.New(rand.NewPCG(1, 1)))
		var progs [placementCopies]*Program
		var whh [placementCopies][][]float32
		for c := range progs {
			prog, err := NewPartitioned(net, PartitionOptions{Workers: n, Pool: pool})
			if err != nil {
				b.Fatal(err)
			}
			p, err := prog.Plan(in, PlanOptions{})
			if err != nil {
				b.Fatal(err)
			}
			progs[c], whh[c] = prog, whhOf(p)
			if len(hugeChunks(whh[c])) == 0 {
				b.Skip("W_hh under an eighth of a huge page: nothing to time a page by")
			}
		}
		infer := func(c int) time.Duration {
			t0 := time.Now()
			p, err := progs[c].Acquire(in, PlanOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Run(); err != nil {
				b.Fatal(err)
			}
			p.Release()
			return time.Since(t0)
		}
		for c := range progs {
			infer(c)
		}
		var took [placementCopies][]float64
		round := 0
		for b.Loop() {
			for i := range placementCopies {
				c := (i + round) % placementCopies
				took[c] = append(took[c], float64(infer(c).Nanoseconds()))
			}
			round++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*placementCopies*T), "ns/step")
		var meds [placementCopies]float64
		for c := range took {
			slices.Sort(took[c])
			meds[c] = took[c][len(took[c])/2]
		}
		mid := slices.Clone(meds[:])
		slices.Sort(mid)
		center := (mid[(placementCopies-1)/2] + mid[placementCopies/2]) / 2
		for c := range meds {
			b.ReportMetric(meds[c]/center, fmt.Sprintf("c%d-time", c))
		}
		b.ReportMetric(mid[placementCopies-1]/mid[0], "copy-spread")

		if ref.w == nil {
			ref.w = hugepage.Floats(ref, placementRef*hugepage.Size/4)
			for i := range ref.w {
				ref.w[i] = 1
			}
		}
		var chunks [][]float32
		var of []int // the copy each chunk is of
		for c := range whh {
			cs := hugeChunks(whh[c])
			chunks = append(chunks, cs...)
			for range cs {
				of = append(of, c)
			}
		}
		// The fresh pieces take copy 0's lengths in turn, each from the
		// start of a page of its own: a read shorter than a page runs
		// slower a byte (the prefetchers start over), so like is held to
		// like; all 48 pages are read, so the pieces come from DRAM even
		// where W_hh is small.
		nw, n0 := len(chunks), 0
		for n0 < nw && of[n0] == 0 {
			n0++
		}
		for pg := range placementRef {
			chunks = append(chunks, ref.w[pg*hugepage.Size/4:][:len(chunks[pg%n0])])
		}
		rows := pageRates(chunks)
		for c := range progs {
			var sub [][]float64
			for _, row := range rows {
				var r []float64
				for i, v := range row[:nw] {
					if of[i] == c {
						r = append(r, v)
					}
				}
				sub = append(sub, append(r, row[nw:]...))
			}
			ratio, _ := placementOf(sub, len(sub[0])-(len(chunks)-nw))
			b.ReportMetric(ratio, fmt.Sprintf("c%d-whh-dram", c))
		}
		_, gbs := placementOf(rows, nw)
		b.ReportMetric(gbs, "ref-dram-GB/s")
	})
}
