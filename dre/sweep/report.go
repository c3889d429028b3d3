package sweep

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"rnnserve/models"
)

const mib = 1 << 20

// Report writes, as Markdown, the numbers docs/dre-reproduction.md quotes
// from an output directory's rows: the applications' A+ savings (Figure
// 6), the shares of benchmarks above each DRE (Figures 3-5), and checks of
// the paper's Section III-C observations.
func Report(w io.Writer, sw *Sweep, rows []Row) {
	fmt.Fprintf(w, "# dresim report: sweep %q, %d rows\n", sw.Name, len(rows))
	reportApps(w, sw, rows)
	grid := filter(rows, func(r *Row) bool { return r.Kind == "grid" })
	if len(grid) == 0 {
		return
	}
	reportShares(w, sw, grid)
	reportObservations(w, sw, grid)
	reportVocab(w, sw, grid)
	reportSmall(w, grid)
}

// reportApps prints AvgRW(A)/AvgRW(A+) per application and input length,
// for every cache (smallest first), with the traffic of both schedules
// and the savings the paper's text gives.
func reportApps(w io.Writer, sw *Sweep, rows []Row) {
	for _, c := range cachesBySize(sw.Caches) {
		t := appRatios(rows, c.Name)
		if len(t.apps) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## A+ savings, A / A+ traffic (%s cache)\n\n| app |", c.Name)
		for _, T := range t.lengths {
			fmt.Fprintf(w, " T=%d |", T)
		}
		fmt.Fprintf(w, " paper (Section V-B, 12 MB) |\n|---|%s---|\n", strings.Repeat("---|", len(t.lengths)))
		for i, app := range t.apps {
			fmt.Fprintf(w, "| %s |", app.label(" "))
			var paper []string
			for j, T := range t.lengths {
				if s := paperSavingOf(app.model, T); s > 0 {
					paper = append(paper, fmt.Sprintf("%.2fx at T=%d", s, T))
				}
				a := findApp(rows, app, T, "A", c.Name)
				p := findApp(rows, app, T, "A+", c.Name)
				if t.ratio[i][j] == 0 || a == nil || p == nil {
					fmt.Fprint(w, " - |")
					continue
				}
				fmt.Fprintf(w, " %.2fx (%s / %s, DRE %.1f / %.1f) |", 1/t.ratio[i][j], mibs(a.AvgRW), mibs(p.AvgRW), a.DRE, p.DRE)
			}
			if len(paper) == 0 {
				paper = []string{"-"}
			}
			fmt.Fprintf(w, " %s |\n", strings.Join(paper, ", "))
		}
	}
}

func mibs(b float64) string {
	switch {
	case b >= 100*mib:
		return fmt.Sprintf("%.0f MiB", b/mib)
	case b >= mib:
		return fmt.Sprintf("%.1f MiB", b/mib)
	}
	return fmt.Sprintf("%.2f MiB", b/mib)
}

// reportShares prints the shares of Figures 3-5 for every cache and both
// schedules, by vocabulary and by input length.
func reportShares(w io.Writer, sw *Sweep, grid []Row) {
	pc := sw.Plots
	cells := distinct(grid, func(r *Row) string { return r.Cell })
	for _, cell := range cells {
		rs := filter(grid, func(r *Row) bool { return r.Cell == cell })
		fmt.Fprintf(w, "\n## Share of %s benchmarks above each DRE (Figures 3 and 5)\n\n| schedule | cache | vocab | n |", cell)
		for _, th := range pc.Thresholds {
			fmt.Fprintf(w, " > %g |", th)
		}
		fmt.Fprintf(w, " max DRE |\n|---|---|---|---|%s---|\n", strings.Repeat("---|", len(pc.Thresholds)))
		for _, sched := range sw.Schedules {
			for _, c := range cachesBySize(sw.Caches) {
				for _, v := range distinct(rs, func(r *Row) int { return r.Vocab }) {
					sel := filter(rs, func(r *Row) bool { return r.Schedule == sched && r.Cache == c.Name && r.Vocab == v })
					if len(sel) == 0 {
						continue
					}
					fmt.Fprintf(w, "| %s | %s | %d | %d |", sched, c.Name, v, len(sel))
					for _, s := range share(sel, pc.Thresholds) {
						fmt.Fprintf(w, " %.1f%% |", s)
					}
					fmt.Fprintf(w, " %.1f |\n", slices.Max(distinct(sel, func(r *Row) float64 { return r.DRE })))
				}
			}
		}
		fmt.Fprintf(w, "\n## %s by input length, Schedule A (Figure 4)\n\n| cache | vocab | T | n |", cell)
		for _, th := range pc.Thresholds {
			fmt.Fprintf(w, " > %g |", th)
		}
		fmt.Fprintf(w, "\n|---|---|---|---|%s\n", strings.Repeat("---|", len(pc.Thresholds)))
		for _, c := range cachesBySize(sw.Caches) {
			for _, v := range distinct(rs, func(r *Row) int { return r.Vocab }) {
				for _, T := range distinct(rs, func(r *Row) int { return r.T }) {
					sel := filter(rs, func(r *Row) bool { return r.Schedule == "A" && r.Cache == c.Name && r.Vocab == v && r.T == T })
					if len(sel) == 0 {
						continue
					}
					fmt.Fprintf(w, "| %s | %d | %d | %d |", c.Name, v, T, len(sel))
					for _, s := range share(sel, pc.Thresholds) {
						fmt.Fprintf(w, " %.1f%% |", s)
					}
					fmt.Fprintln(w)
				}
			}
		}
	}
}

// factor is one of the grid's dimensions.
type factor struct {
	name string
	get  func(*Row) int
}

var factors = []factor{
	{"layers", func(r *Row) int { return r.Layers }},
	{"hidden", func(r *Row) int { return r.Hidden }},
	{"vocab", func(r *Row) int { return r.Vocab }},
	{"input length", func(r *Row) int { return r.T }},
}

// reportObservations checks "DRE grows with the number of layers, the
// hidden size, the vocabulary and the input length" (Section III-C): for
// each factor, it pairs every Schedule A row with the row that differs
// only in that factor's next larger value, and counts the pairs whose DRE
// grows, stays (within 1%) or falls; and it gives the median DRE at each
// value.
func reportObservations(w io.Writer, sw *Sweep, grid []Row) {
	fmt.Fprintf(w, "\n## Section III-C: does DRE grow with each factor? (Schedule A, both cells)\n\n")
	fmt.Fprintf(w, "A pair is two rows that differ only in the factor, at adjacent values. \"Spilling\" pairs have DRE >= 1 at either end (the cache does not hold the working set between inferences); in the others the DRE is the cold misses shared by %d runs.\n\n", sw.Runs)
	fmt.Fprintf(w, "| factor | cache | pairs | grows | same (±1%%) | falls | spilling pairs: grows / same / falls | median DRE by value |\n|---|---|---|---|---|---|---|---|\n")
	a := filter(grid, func(r *Row) bool { return r.Schedule == "A" })
	for _, f := range factors {
		for _, c := range cachesBySize(sw.Caches) {
			rs := filter(a, func(r *Row) bool { return r.Cache == c.Name })
			values := distinct(rs, f.get)
			if len(values) < 2 {
				continue
			}
			// key: every column but the factor's.
			key := func(r *Row) string {
				cp := *r
				switch f.name {
				case "layers":
					cp.Layers = 0
				case "hidden":
					cp.Hidden = 0
				case "vocab":
					cp.Vocab, cp.HeadOut = 0, 0
				case "input length":
					cp.T = 0
				}
				return fmt.Sprint(cp.Cell, cp.Hidden, cp.Layers, cp.Vocab, cp.T)
			}
			at := map[string]map[int]float64{}
			for i := range rs {
				k := key(&rs[i])
				if at[k] == nil {
					at[k] = map[int]float64{}
				}
				at[k][f.get(&rs[i])] = rs[i].DRE
			}
			var all, spill [3]int // grows, same, falls
			for _, m := range at {
				for i := 0; i+1 < len(values); i++ {
					lo, ok1 := m[values[i]]
					hi, ok2 := m[values[i+1]]
					if !ok1 || !ok2 {
						continue
					}
					k := 2
					switch {
					case math.Abs(hi-lo) <= 0.01*math.Max(lo, hi):
						k = 1
					case hi > lo:
						k = 0
					}
					all[k]++
					if max(lo, hi) >= 1 {
						spill[k]++
					}
				}
			}
			n, ns := all[0]+all[1]+all[2], spill[0]+spill[1]+spill[2]
			var med []string
			for _, v := range values {
				sel := filter(rs, func(r *Row) bool { return f.get(r) == v })
				med = append(med, fmt.Sprintf("%d: %.2f", v, median(sel)))
			}
			fmt.Fprintf(w, "| %s | %s | %d | %.0f%% | %.0f%% | %.0f%% | %d: %.0f%% / %.0f%% / %.0f%% | %s |\n", f.name, c.Name, n,
				pct(all[0], n), pct(all[1], n), pct(all[2], n), ns, pct(spill[0], ns), pct(spill[1], ns), pct(spill[2], ns), strings.Join(med, ", "))
		}
	}
}

func pct(a, n int) float64 {
	if n == 0 {
		return 0
	}
	return 100 * float64(a) / float64(n)
}

func median(rows []Row) float64 {
	if len(rows) == 0 {
		return 0
	}
	d := make([]float64, len(rows))
	for i, r := range rows {
		d[i] = r.DRE
	}
	slices.Sort(d)
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

// reportSmall gives the working-set shares the paper quotes for its small
// vocabulary LSTM benchmarks (41% above 25 MB, 16% more from 22 MB), and
// the rows of a grid without vocabulary (the Section IV example).
func reportSmall(w io.Writer, grid []Row) {
	lstm := filter(grid, func(r *Row) bool { return r.Cell == "lstm" && r.Schedule == "A" })
	if len(lstm) > 0 {
		v := slices.Min(distinct(lstm, func(r *Row) int { return r.Vocab }))
		cache := lstm[0].Cache
		sel := filter(lstm, func(r *Row) bool { return r.Vocab == v && r.Cache == cache })
		var over25, over22 int
		for _, r := range sel {
			if r.WorkingSetBytes > 25*mib {
				over25++
			}
			if r.WorkingSetBytes >= 22*mib {
				over22++
			}
		}
		fmt.Fprintf(w, "\n## Working sets of the LSTM benchmarks with vocabulary %d\n\n", v)
		fmt.Fprintf(w, "%d benchmarks: %.0f%% above 25 MiB, %.0f%% at or above 22 MiB.\n", len(sel), pct(over25, len(sel)), pct(over22, len(sel)))
	}
	plain := filter(grid, func(r *Row) bool { return r.Vocab == 0 })
	if len(plain) > 0 {
		fmt.Fprintf(w, "\n## Grid rows without vocabulary\n\n| cell | hidden | layers | T | schedule | cache | read | written | MIN read bound | DRE |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range plain {
			bound := "-"
			if r.OPTReadBytes != nil {
				bound = mibs(float64(*r.OPTReadBytes))
			}
			fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %s | %s | %s | %s | %.1f |\n", r.Cell, r.Hidden, r.Layers, r.T, r.Schedule, r.Cache,
				mibs(r.AvgReadBytes), mibs(r.AvgWriteBytes), bound, r.DRE)
		}
	}
}

// gridPoint is a grid row's model and input length: every column that
// pairs rows across vocabularies.
type gridPoint struct {
	cell          string
	hidden, layer int
	T             int
}

func gridPointOf(r *Row) gridPoint { return gridPoint{r.Cell, r.Hidden, r.Layers, r.T} }

// vocabBytes is what a grid row's vocabulary puts in its model: the
// embedding table and the head's weights and biases, in bytes.
func vocabBytes(g *Grid, r *Row) (emb, head int64, err error) {
	spec := TableISpec(r.Cell, r.Hidden, r.Layers, r.Vocab, g.HeadActivation)
	net, err := models.Shape(&spec)
	if err != nil {
		return 0, 0, err
	}
	return 4 * int64(net.Vocab) * int64(net.Input), 4 * int64(net.HeadOut) * int64(net.OutputWidth()+1), nil
}

// spread formats the median and range of vs.
func spread(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	s := slices.Sorted(slices.Values(vs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("%.2f (%.2f to %.2f)", med, s[0], s[len(s)-1])
}

// maxVocabNetworks bounds the grids whose DRE reportVocab lists network
// by network.
const maxVocabNetworks = 24

// reportVocab checks what a larger vocabulary does to DRE. It pairs every
// Schedule A grid row with the row that differs only in the next larger
// vocabulary, counts the pairs by which side of 1 their DREs fall, and
// sets what the larger vocabulary adds to the traffic and to the working
// set against what it adds to the model: the embedding table, of which an
// inference reads T rows, and the head, which it reads whole. For a small
// grid it lists every network's DRE at each vocabulary.
func reportVocab(w io.Writer, sw *Sweep, grid []Row) {
	a := filter(grid, func(r *Row) bool { return r.Schedule == "A" })
	vocabs := distinct(a, func(r *Row) int { return r.Vocab })
	if len(vocabs) < 2 || sw.Grid == nil {
		return
	}
	fmt.Fprintf(w, "\n## Vocabulary: what a larger one adds (Schedule A, all cells)\n\n")
	fmt.Fprintf(w, "Pairs of rows that differ only in the vocabulary, at adjacent values. Added traffic and working set are the larger vocabulary's row minus the smaller's, per inference; the model gains an embedding table of vocab x input floats, of which an inference reads T rows, and a head of vocab x (output + 1) floats, read whole.\n\n")
	fmt.Fprintf(w, "| cache | T | vocab | pairs | DRE >= 1 at both | falls below 1 | rises to 1 or more | below 1 at both | added traffic / added head | added working set / added embedding and head | added traffic / added working set |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	caches := cachesBySize(sw.Caches)
	at := map[string]map[gridPoint]map[int]vocabRow{} // cache, network, vocab
	var nets []gridPoint
	for i := range a {
		r := &a[i]
		emb, head, err := vocabBytes(sw.Grid, r)
		if err != nil {
			fmt.Fprintf(w, "(row %d: %v)\n", r.Index, err)
			return
		}
		n := gridPointOf(r)
		if at[r.Cache] == nil {
			at[r.Cache] = map[gridPoint]map[int]vocabRow{}
		}
		if at[r.Cache][n] == nil {
			at[r.Cache][n] = map[int]vocabRow{}
			if !slices.Contains(nets, n) {
				nets = append(nets, n)
			}
		}
		at[r.Cache][n][r.Vocab] = vocabRow{*r, emb, head}
	}
	lengths := distinct(a, func(r *Row) int { return r.T })
	for _, c := range caches {
		for _, T := range lengths {
			for i := 0; i+1 < len(vocabs); i++ {
				reportVocabPairs(w, c.Name, T, vocabs[i], vocabs[i+1], nets, at[c.Name])
			}
		}
	}
	if len(nets) > maxVocabNetworks {
		return
	}
	fmt.Fprintf(w, "\n### DRE by vocabulary (Schedule A)\n\n| cache | cell | hidden | layers | T |")
	for _, v := range vocabs {
		fmt.Fprintf(w, " %d |", v)
	}
	fmt.Fprintf(w, "\n|---|---|---|---|---|%s\n", strings.Repeat("---|", len(vocabs)))
	for _, c := range caches {
		for _, n := range nets {
			if at[c.Name][n] == nil {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d |", c.Name, n.cell, n.hidden, n.layer, n.T)
			for _, v := range vocabs {
				if s, ok := at[c.Name][n][v]; ok {
					fmt.Fprintf(w, " %.2f |", s.row.DRE)
				} else {
					fmt.Fprint(w, " - |")
				}
			}
			fmt.Fprintln(w)
		}
	}
}

// vocabRow is a grid row with the bytes its vocabulary puts in the model.
type vocabRow struct {
	row       Row
	emb, head int64
}

// reportVocabPairs prints the line of reportVocab's table for the
// networks of input length T through one cache, vocabulary lo -> hi.
func reportVocabPairs(w io.Writer, cache string, T, lo, hi int, nets []gridPoint, at map[gridPoint]map[int]vocabRow) {
	var counts [4]int // DRE >= 1 at both, falls below 1, rises to 1 or more, below 1 at both
	var perHead, perModel, perWS []float64
	for _, n := range nets {
		a, ok1 := at[n][lo]
		b, ok2 := at[n][hi]
		if n.T != T || !ok1 || !ok2 {
			continue
		}
		switch da, db := a.row.DRE, b.row.DRE; {
		case da >= 1 && db >= 1:
			counts[0]++
		case da >= 1:
			counts[1]++
		case db >= 1:
			counts[2]++
		default:
			counts[3]++
		}
		dR := b.row.AvgRW - a.row.AvgRW
		dW := float64(b.row.WorkingSetBytes - a.row.WorkingSetBytes)
		perHead = append(perHead, dR/float64(b.head-a.head))
		perModel = append(perModel, dW/float64(b.emb+b.head-a.emb-a.head))
		perWS = append(perWS, dR/dW)
	}
	pairs := counts[0] + counts[1] + counts[2] + counts[3]
	if pairs == 0 {
		return
	}
	fmt.Fprintf(w, "| %s | %d | %d -> %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", cache, T, lo, hi, pairs,
		counts[0], counts[1], counts[2], counts[3], spread(perHead), spread(perModel), spread(perWS))
}
