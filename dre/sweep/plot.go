package sweep

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Figure file names (without extension): each is written as PNG and SVG.
const (
	fig3 = "fig3_dre_share"           // share of benchmarks above each DRE value, per cache
	fig4 = "fig4_dre_share_by_length" // the same by input length
	fig5 = "fig5_dre_share_by_vocab"  // the same by vocabulary
	fig6 = "fig6_aplus_over_a"        // traffic of A+ normalised to A, per application and input length
)

// series is one bar of every group.
type series struct {
	name   string
	values []float64
}

// share is the percentage of rows whose DRE exceeds each threshold.
func share(rows []Row, thresholds []float64) []float64 {
	out := make([]float64, len(thresholds))
	if len(rows) == 0 {
		return out
	}
	for i, th := range thresholds {
		n := 0
		for _, r := range rows {
			if r.DRE > th {
				n++
			}
		}
		out[i] = 100 * float64(n) / float64(len(rows))
	}
	return out
}

func filter(rows []Row, keep func(*Row) bool) []Row {
	var out []Row
	for i := range rows {
		if keep(&rows[i]) {
			out = append(out, rows[i])
		}
	}
	return out
}

// distinct lists the distinct values of key over rows, sorted.
func distinct[T cmp.Ordered](rows []Row, key func(*Row) T) []T {
	var vs []T
	for i := range rows {
		vs = append(vs, key(&rows[i]))
	}
	slices.Sort(vs)
	return slices.Compact(vs)
}

// Plot writes the figures that rows allow to dir, as PNG and SVG, and
// returns the files written. Figures 3-5 use the grid's Schedule A rows
// (of plots.cell, if set), as the paper measured TensorFlow's schedule;
// Figure 6 the applications' rows through plots.traffic_cache.
func Plot(sw *Sweep, rows []Row, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pc := sw.Plots
	var files []string
	save := func(p *plot.Plot, name string) error {
		for _, ext := range []string{".png", ".svg"} {
			f := filepath.Join(dir, name+ext)
			if err := p.Save(8*vg.Inch, 4.5*vg.Inch, f); err != nil {
				return err
			}
			files = append(files, f)
		}
		return nil
	}
	labels := make([]string, len(pc.Thresholds))
	for i, t := range pc.Thresholds {
		labels[i] = fmt.Sprintf("DRE > %g", t)
	}
	cellNote := "all cells"
	if pc.Cell != "" {
		cellNote = pc.Cell
	}
	grid := filter(rows, func(r *Row) bool {
		return r.Kind == "grid" && (pc.Cell == "" || r.Cell == pc.Cell)
	})
	gridA := filter(grid, func(r *Row) bool { return r.Schedule == "A" })
	if len(gridA) > 0 {
		small := slices.Min(distinct(gridA, func(r *Row) int { return r.Vocab }))
		smallA := filter(gridA, func(r *Row) bool { return r.Vocab == small })

		var ss []series
		for _, c := range sw.Caches {
			rs := filter(smallA, func(r *Row) bool { return r.Cache == c.Name })
			if len(rs) > 0 {
				ss = append(ss, series{fmt.Sprintf("A, %s (%d)", c.Name, len(rs)), share(rs, pc.Thresholds)})
			}
		}
		if rs := filter(grid, func(r *Row) bool {
			return r.Schedule == "A+" && r.Vocab == small && r.Cache == pc.DRECache
		}); len(rs) > 0 {
			ss = append(ss, series{fmt.Sprintf("A+, %s (%d)", pc.DRECache, len(rs)), share(rs, pc.Thresholds)})
		}
		p, err := bars(fmt.Sprintf("Share of benchmarks above each DRE (vocabulary %d, %s)", small, cellNote),
			"% of benchmarks", labels, ss, 100, "")
		if err != nil {
			return files, err
		}
		if err := save(p, fig3); err != nil {
			return files, err
		}

		ref := filter(smallA, func(r *Row) bool { return r.Cache == pc.DRECache })
		ss = nil
		for _, t := range distinct(ref, func(r *Row) int { return r.T }) {
			rs := filter(ref, func(r *Row) bool { return r.T == t })
			ss = append(ss, series{fmt.Sprintf("input length %d (%d)", t, len(rs)), share(rs, pc.Thresholds)})
		}
		if len(ss) > 0 {
			p, err := bars(fmt.Sprintf("By input length (Schedule A, %s cache, vocabulary %d, %s)", pc.DRECache, small, cellNote),
				"% of benchmarks", labels, ss, 100, "")
			if err != nil {
				return files, err
			}
			if err := save(p, fig4); err != nil {
				return files, err
			}
		}

		ref = filter(gridA, func(r *Row) bool { return r.Cache == pc.DRECache })
		ss = nil
		for _, v := range distinct(ref, func(r *Row) int { return r.Vocab }) {
			rs := filter(ref, func(r *Row) bool { return r.Vocab == v })
			ss = append(ss, series{fmt.Sprintf("vocabulary %d (%d)", v, len(rs)), share(rs, pc.Thresholds)})
		}
		if len(ss) > 0 {
			p, err := bars(fmt.Sprintf("By vocabulary (Schedule A, %s cache, %s)", pc.DRECache, cellNote),
				"% of benchmarks", labels, ss, 100, "")
			if err != nil {
				return files, err
			}
			if err := save(p, fig5); err != nil {
				return files, err
			}
		}
	}

	ratios := appRatios(rows, pc.TrafficCache)
	if len(ratios.apps) > 0 {
		var ss []series
		for j, t := range ratios.lengths {
			vs := make([]float64, len(ratios.apps))
			for i := range ratios.apps {
				vs[i] = ratios.ratio[i][j]
			}
			ss = append(ss, series{fmt.Sprintf("input length %d", t), vs})
		}
		p, err := bars(fmt.Sprintf("Traffic of A+ normalised to A (%s cache)", pc.TrafficCache),
			"DRAM traffic, A+ / A", ratios.apps, ss, 1.5, "%.2f")
		if err != nil {
			return files, err
		}
		if err := save(p, fig6); err != nil {
			return files, err
		}
	}
	return files, nil
}

// appTable is AvgRW(A+)/AvgRW(A) for each application (in row order) and
// input length; 0 where a schedule's row is missing.
type appTable struct {
	apps    []string
	lengths []int
	ratio   [][]float64 // [app][length]
}

func appRatios(rows []Row, cache string) appTable {
	apps := filter(rows, func(r *Row) bool { return r.Kind == "app" && r.Cache == cache })
	var t appTable
	for _, r := range apps {
		if !slices.Contains(t.apps, r.Model) {
			t.apps = append(t.apps, r.Model)
		}
	}
	t.lengths = distinct(apps, func(r *Row) int { return r.T })
	for _, name := range t.apps {
		row := make([]float64, len(t.lengths))
		for j, T := range t.lengths {
			var a, ap float64
			for _, r := range apps {
				if r.Model == name && r.T == T {
					switch r.Schedule {
					case "A":
						a = r.AvgRW
					case "A+":
						ap = r.AvgRW
					}
				}
			}
			if a > 0 && ap > 0 {
				row[j] = ap / a
			}
		}
		t.ratio = append(t.ratio, row)
	}
	for _, r := range t.ratio {
		if slices.ContainsFunc(r, func(v float64) bool { return v > 0 }) {
			return t
		}
	}
	return appTable{} // no application has rows of both schedules

}

// bars draws grouped bars: one group per label, one bar per series. With
// a label format, every bar carries its value.
func bars(title, ylabel string, groups []string, ss []series, ymax float64, valueFormat string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min, p.Y.Max = 0, ymax
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	n := len(ss)
	w := vg.Points(min(16, 420/float64(max(1, n*len(groups)))))
	for i, s := range ss {
		b, err := plotter.NewBarChart(plotter.Values(s.values), w)
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(n-1)/2) * w
		p.Add(b)
		p.Legend.Add(s.name, b)
		if valueFormat != "" {
			xys := make(plotter.XYs, len(s.values))
			strs := make([]string, len(s.values))
			for j, v := range s.values {
				xys[j] = plotter.XY{X: float64(j), Y: v}
				strs[j] = fmt.Sprintf(valueFormat, v)
			}
			l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: strs})
			if err != nil {
				return nil, err
			}
			for k := range l.TextStyle {
				l.TextStyle[k].Font.Size = vg.Points(7)
				l.TextStyle[k].XAlign = -0.5
			}
			l.Offset = vg.Point{X: b.Offset, Y: vg.Points(2)}
			p.Add(l)
		}
	}
	p.NominalX(groups...)
	p.X.Min, p.X.Max = -0.6, float64(len(groups))-0.4
	return p, nil
}
