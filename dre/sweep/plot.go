package sweep

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Figure file names (without extension): each is written in every one
// of FigureFormats.
const (
	fig3 = "fig3_dre_share"           // share of benchmarks above each DRE value, one panel per cache
	fig4 = "fig4_dre_share_by_length" // the same by input length
	fig5 = "fig5_dre_share_by_vocab"  // the same by vocabulary
	fig6 = "fig6_aplus_over_a"        // traffic of A+ normalised to A, per application and input length
)

// FigureFormats lists the file formats Plot writes every figure in, as
// file extensions: PNG for pages, SVG and PDF for papers.
func FigureFormats() []string { return []string{"png", "svg", "pdf"} }

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

// cachesBySize returns the caches smallest first, by size in bytes (not
// by name: "2MB" comes before "12MB"), then line size and associativity;
// caches alike in all three keep the sweep's order.
func cachesBySize(cs []CacheSpec) []CacheSpec {
	out := slices.Clone(cs)
	slices.SortStableFunc(out, func(a, b CacheSpec) int {
		return cmp.Or(cmp.Compare(a.Size, b.Size), cmp.Compare(a.LineSize, b.LineSize), cmp.Compare(a.Ways, b.Ways))
	})
	return out
}

// Plot writes the figures that rows allow to dir, in every format of
// FigureFormats, and returns the files written. Figures 3-5 use the
// grid's Schedule A rows (of plots.cell, if set), as the paper measured
// TensorFlow's schedule; Figure 3 has one panel per cache, smallest
// first, with Schedule A+ beside A. Figure 6 is the applications' rows
// through plots.traffic_cache, with the savings the paper's text gives
// marked over the bars they correspond to.
func Plot(sw *Sweep, rows []Row, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pc := sw.Plots
	var files []string
	save := func(f *figure, name string) error {
		written, err := f.save(dir, name)
		files = append(files, written...)
		return err
	}
	labels := make([]string, len(pc.Thresholds))
	for i, t := range pc.Thresholds {
		labels[i] = fmt.Sprintf("> %g", t)
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
		atSmall := filter(grid, func(r *Row) bool { return r.Vocab == small })
		smallA := filter(atSmall, func(r *Row) bool { return r.Schedule == "A" })

		// Figure 3: a panel per cache; each compares the schedules.
		var panels []panel
		for _, c := range cachesBySize(sw.Caches) {
			var ss []series
			n := 0
			for _, sched := range sw.Schedules {
				rs := filter(atSmall, func(r *Row) bool { return r.Schedule == sched && r.Cache == c.Name })
				if len(rs) > 0 {
					ss = append(ss, series{"Schedule " + sched, share(rs, pc.Thresholds)})
					n = len(rs)
				}
			}
			if len(ss) > 0 {
				panels = append(panels, panel{title: fmt.Sprintf("%s cache (%d benchmarks)", c.Name, n), series: ss})
			}
		}
		f := newFigure(fmt.Sprintf("Share of benchmarks above each DRE (vocabulary %d, %s)", small, cellNote))
		if err := f.barPanels(panels, labels, "DRE", "% of benchmarks", 100, "%.0f"); err != nil {
			return files, fmt.Errorf("%s: %w", fig3, err)
		}
		if err := save(f, fig3); err != nil {
			return files, err
		}

		ref := filter(smallA, func(r *Row) bool { return r.Cache == pc.DRECache })
		var ss []series
		for _, t := range distinct(ref, func(r *Row) int { return r.T }) {
			rs := filter(ref, func(r *Row) bool { return r.T == t })
			ss = append(ss, series{fmt.Sprintf("input length %d (%d)", t, len(rs)), share(rs, pc.Thresholds)})
		}
		if len(ss) > 0 {
			f := newFigure(fmt.Sprintf("By input length (Schedule A, %s cache, vocabulary %d, %s)", pc.DRECache, small, cellNote))
			if err := f.barPanels([]panel{{series: ss}}, labels, "DRE", "% of benchmarks", 100, "%.0f"); err != nil {
				return files, fmt.Errorf("%s: %w", fig4, err)
			}
			if err := save(f, fig4); err != nil {
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
			f := newFigure(fmt.Sprintf("By vocabulary (Schedule A, %s cache, %s)", pc.DRECache, cellNote))
			if err := f.barPanels([]panel{{series: ss}}, labels, "DRE", "% of benchmarks", 100, "%.0f"); err != nil {
				return files, fmt.Errorf("%s: %w", fig5, err)
			}
			if err := save(f, fig5); err != nil {
				return files, err
			}
		}
	}

	ratios := appRatios(rows, pc.TrafficCache)
	if len(ratios.apps) > 0 {
		var ss []series
		top := 1.0
		for j, t := range ratios.lengths {
			vs := make([]float64, len(ratios.apps))
			for i := range ratios.apps {
				vs[i] = ratios.ratio[i][j]
				top = max(top, vs[i])
			}
			ss = append(ss, series{fmt.Sprintf("input length %d", t), vs})
		}
		groups := make([]string, len(ratios.apps))
		for i, a := range ratios.apps {
			groups[i] = a.label("\n")
		}
		f := newFigure(fmt.Sprintf("Traffic of A+ normalised to A (%s cache)", pc.TrafficCache))
		ymax := math.Ceil(10*1.15*top) / 10
		if err := f.barPanels([]panel{{series: ss}}, groups, "", "DRAM traffic, A+ / A", ymax, "%.2f"); err != nil {
			return files, fmt.Errorf("%s: %w", fig6, err)
		}
		if m := ratios.paperMarks(f.barWidth); m != nil {
			f.panels[0].Add(m)
			f.legend.Add("the paper's text (Section V-B)", m)
		}
		if err := save(f, fig6); err != nil {
			return files, err
		}
	}
	return files, nil
}

// appKey is one application's rows: the app, with its head or without
// (apps.no_head).
type appKey struct {
	model  string
	noHead bool
}

func keyOf(r *Row) appKey { return appKey{r.Model, r.HeadOut == 0} }

// label names the application in tables and figures, sep between the
// name and "(no head)".
func (k appKey) label(sep string) string {
	if k.noHead {
		return k.model + sep + "(no head)"
	}
	return k.model
}

// appTable is AvgRW(A+)/AvgRW(A) for each application (in row order) and
// input length; 0 where a schedule's row is missing.
type appTable struct {
	apps    []appKey
	lengths []int
	ratio   [][]float64 // [app][length]
}

func appRatios(rows []Row, cache string) appTable {
	apps := filter(rows, func(r *Row) bool { return r.Kind == "app" && r.Cache == cache })
	var t appTable
	for i := range apps {
		if k := keyOf(&apps[i]); !slices.Contains(t.apps, k) {
			t.apps = append(t.apps, k)
		}
	}
	t.lengths = distinct(apps, func(r *Row) int { return r.T })
	for _, k := range t.apps {
		row := make([]float64, len(t.lengths))
		for j, T := range t.lengths {
			a, ap := findApp(apps, k, T, "A", cache), findApp(apps, k, T, "A+", cache)
			if a != nil && ap != nil && a.AvgRW > 0 && ap.AvgRW > 0 {
				row[j] = ap.AvgRW / a.AvgRW
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

// findApp returns the row of application k at input length T under a
// schedule through a cache, or nil.
func findApp(rows []Row, k appKey, T int, sched, cache string) *Row {
	for i := range rows {
		r := &rows[i]
		if r.Kind == "app" && keyOf(r) == k && r.T == T && r.Schedule == sched && r.Cache == cache {
			return r
		}
	}
	return nil
}

// paperSaving is a saving of Schedule A+ over A (A's traffic / A+'s)
// that the DRE paper's text (Section V-B) gives for an application of its
// Figure 6. The text speaks of "smaller" and "longer" input lengths;
// Figure 6's are 10, 20, 50 and 100, which we read as T = 10 and 100.
type paperSaving struct {
	app    string // catalog name of the model the paper describes
	T      int
	saving float64
}

func paperSavings() []paperSaving {
	return []paperSaving{
		// "an improvement over schedule A by a factor of 1.45 to 1.65"
		{"gnmt", 10, 1.45}, {"gnmt", 100, 1.65},
		// "1.25x for smaller input lengths and 1.29x for longer input
		// lengths"; the paper's LM is lm-dre (lm is LSTM-8192-2048).
		{"lm-dre", 10, 1.25}, {"lm-dre", 100, 1.29},
		// "both schedules perform equally well"
		{"bytener", 10, 1}, {"bytener", 100, 1},
	}
}

// paperSavingOf returns the paper's saving for app at input length T, or 0.
func paperSavingOf(app string, T int) float64 {
	for _, p := range paperSavings() {
		if p.app == app && p.T == T {
			return p.saving
		}
	}
	return 0
}

// paperMarks marks the paper's savings, as A+ / A, over the bars of t
// drawn barWidth wide; nil if t has none of them.
func (t appTable) paperMarks(barWidth vg.Length) *marks {
	m := &marks{width: barWidth, style: draw.LineStyle{Color: color.Black, Width: vg.Points(2.5)}}
	n := len(t.lengths)
	for i, k := range t.apps {
		for j, T := range t.lengths {
			if s := paperSavingOf(k.model, T); s > 0 {
				m.xys = append(m.xys, plotter.XY{X: float64(i), Y: 1 / s})
				m.offs = append(m.offs, barOffset(j, n, barWidth))
			}
		}
	}
	if len(m.xys) == 0 {
		return nil
	}
	return m
}

// marks draws a short line across some bars, each at a value of its own.
type marks struct {
	xys   plotter.XYs
	offs  []vg.Length // each mark's bar offset from its group's centre
	width vg.Length   // the bars' width
	style draw.LineStyle
}

// Plot implements plot.Plotter.
func (m *marks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for i, xy := range m.xys {
		x, y := trX(xy.X)+m.offs[i], trY(xy.Y)
		c.StrokeLine2(m.style, x-m.width/2, y, x+m.width/2, y)
	}
}

// Thumbnail implements plot.Thumbnailer.
func (m *marks) Thumbnail(c *draw.Canvas) {
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(m.style, c.Min.X, y, c.Max.X, y)
}

// Figure geometry: the height, the width of a panel (alone, or one of
// several), and the room around things.
const (
	figHeight   = 4.5 * vg.Inch
	panelWidth  = 7 * vg.Inch
	narrowPanel = 3.2 * vg.Inch
	figPad      = vg.Length(8)
	maxBarWidth = vg.Length(16)
	axisRoom    = vg.Length(60) // a panel's width taken by its axis and labels
)

// panel is one chart of grouped bars.
type panel struct {
	title  string
	series []series
}

// figure is one image: a title, panels of grouped bars side by side with
// one y scale, and the legend to their right, outside every panel's data.
type figure struct {
	title    string
	panels   []*plot.Plot
	legend   plot.Legend
	width    vg.Length // set by barPanels
	barWidth vg.Length
}

func newFigure(title string) *figure {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(11)
	l.Padding = vg.Points(3)
	return &figure{title: title, legend: l}
}

// barPanels adds a bar chart per panel: one group per label, one bar per
// series, series alike in every panel (the legend names the first
// panel's). With a value format, every bar carries its value.
func (f *figure) barPanels(ps []panel, groups []string, xlabel, ylabel string, ymax float64, valueFormat string) error {
	pw := panelWidth
	if len(ps) > 1 {
		pw = narrowPanel
	}
	n := 1
	for _, p := range ps {
		n = max(n, len(p.series))
	}
	f.barWidth = min(maxBarWidth, 0.75*(pw-axisRoom)/vg.Length(n*max(1, len(groups))))
	for pi, ps := range ps {
		p := plot.New()
		p.Title.Text = ps.title
		p.Title.TextStyle.Font.Size = vg.Points(11)
		if pi == 0 {
			p.Y.Label.Text = ylabel
		}
		p.X.Label.Text = xlabel
		p.Y.Min, p.Y.Max = 0, ymax
		p.Add(plotter.NewGrid())
		for i, s := range ps.series {
			b, err := plotter.NewBarChart(plotter.Values(s.values), f.barWidth)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			b.Color = plotutil.Color(i)
			b.LineStyle.Width = 0
			b.Offset = barOffset(i, len(ps.series), f.barWidth)
			p.Add(b)
			if pi == 0 {
				f.legend.Add(s.name, b)
			}
			if valueFormat != "" {
				l, err := valueLabels(s.values, valueFormat, b.Offset)
				if err != nil {
					return err
				}
				p.Add(l)
			}
		}
		p.NominalX(groups...)
		p.X.Min, p.X.Max = -0.6, float64(len(groups))-0.4
		f.panels = append(f.panels, p)
	}
	f.width = vg.Length(len(ps))*pw + f.legendWidth() + 3*figPad
	return nil
}

// barOffset is where bar i of n, each w wide, sits from its group's centre.
func barOffset(i, n int, w vg.Length) vg.Length {
	return vg.Length(float64(i)-float64(n-1)/2) * w
}

// valueLabels writes each value above its bar.
func valueLabels(values []float64, format string, offset vg.Length) (*plotter.Labels, error) {
	xys := make(plotter.XYs, len(values))
	strs := make([]string, len(values))
	for j, v := range values {
		xys[j] = plotter.XY{X: float64(j), Y: v}
		strs[j] = fmt.Sprintf(format, v)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: strs})
	if err != nil {
		return nil, err
	}
	for k := range l.TextStyle {
		l.TextStyle[k].Font.Size = vg.Points(7)
		l.TextStyle[k].XAlign = draw.XCenter
	}
	l.Offset = vg.Point{X: offset, Y: vg.Points(2)}
	return l, nil
}

// legendWidth is the width the legend's longest entry needs.
func (f *figure) legendWidth() vg.Length {
	r := f.legend.Rectangle(draw.Canvas{})
	return r.Max.X - r.Min.X
}

func (f *figure) titleStyle() text.Style {
	return text.Style{Font: font.From(plot.DefaultFont, 13), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YTop}
}

// draw lays the figure out on dc: the title across the top, the legend
// at the right, the panels in the rest, aligned so that their data areas
// have the same height.
func (f *figure) draw(dc draw.Canvas) {
	top := dc.Max.Y - figPad
	if f.title != "" {
		sty := f.titleStyle()
		dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top}, f.title)
		top -= sty.Height(f.title) + figPad
	}
	lw := f.legendWidth()
	legendArea := dc
	legendArea.Min.X, legendArea.Max.X = dc.Max.X-figPad-lw, dc.Max.X-figPad
	legendArea.Max.Y = top - 2*figPad // level with the panels' titles
	f.legend.Draw(legendArea)

	area := dc
	area.Max.X = legendArea.Min.X - 2*figPad
	area.Max.Y = top
	tiles := draw.Tiles{Rows: 1, Cols: len(f.panels), PadX: 2 * figPad, PadLeft: figPad, PadBottom: figPad}
	cs := plot.Align([][]*plot.Plot{f.panels}, tiles, area)
	for i, p := range f.panels {
		p.Draw(cs[0][i])
	}
}

// save writes the figure to dir as name.png, name.svg and name.pdf and
// returns the files written.
func (f *figure) save(dir, name string) ([]string, error) {
	var files []string
	for _, format := range FigureFormats() {
		c, err := draw.NewFormattedCanvas(f.width, figHeight, format)
		if err != nil {
			return files, err
		}
		f.draw(draw.New(c))
		path := filepath.Join(dir, name+"."+format)
		if err := writeFigure(path, c); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func writeFigure(path string, c io.WriterTo) (err error) {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = c.WriteTo(out)
	return err
}
