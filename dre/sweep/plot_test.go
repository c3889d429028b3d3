package sweep

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rnnserve/models"
)

// TestCachesBySize checks that caches sort by bytes, not by name, and that
// caches of one size keep the sweep's order unless line size or ways
// differ.
func TestCachesBySize(t *testing.T) {
	in := []CacheSpec{
		{Name: "12MB", Size: 12 << 20, LineSize: 64, Ways: -1},
		{Name: "25MB", Size: 25 << 20, LineSize: 64, Ways: -1},
		{Name: "2MB-16way", Size: 2 << 20, LineSize: 64, Ways: 16},
		{Name: "2MB", Size: 2 << 20, LineSize: 64, Ways: -1},
		{Name: "100KiB", Size: 100 << 10, LineSize: 64, Ways: -1},
		{Name: "2MB-128B", Size: 2 << 20, LineSize: 128, Ways: -1},
		{Name: "a-12MB-twin", Size: 12 << 20, LineSize: 64, Ways: -1},
	}
	var got []string
	for _, c := range cachesBySize(in) {
		got = append(got, c.Name)
	}
	want := []string{"100KiB", "2MB", "2MB-16way", "2MB-128B", "12MB", "a-12MB-twin", "25MB"}
	if !slices.Equal(got, want) {
		t.Errorf("cachesBySize = %v, want %v", got, want)
	}
	if in[0].Name != "12MB" {
		t.Error("cachesBySize changed its argument")
	}
}

// plotSweep is a sweep whose caches are listed so that their names'
// text order (12MB, 25MB, 2MB) is not their size order.
func plotSweep(t *testing.T) *Sweep {
	t.Helper()
	sw, err := ParseSweep("plot.yaml", []byte(`
name: plot
schedules: [A, A+]
caches:
  - {name: 12MB, size: 12MiB}
  - {name: 25MB, size: 25MiB}
  - {name: 2MB, size: 2MiB}
grid: {cells: [lstm], hidden: [64, 1024], layers: [1], input_lengths: [10, 100], vocab: [60, 1000]}
apps: {names: [lm-dre, bytener], input_lengths: [10, 100], no_head: [lm-dre]}
plots: {dre_cache: 25MB, traffic_cache: 12MB}
`))
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// plotRows makes rows for plotSweep without simulating: every DRE and
// traffic is a function of the row's place, with A+ below A.
func plotRows(sw *Sweep) []Row {
	var rows []Row
	for _, u := range sw.units() {
		for c, cs := range sw.Caches {
			r := Row{Index: u.Index*len(sw.Caches) + c, Kind: u.Kind, Model: u.Model, Cell: "lstm", T: u.T,
				Schedule: u.Schedule.String(), Cache: cs.Name, CacheBytes: int64(cs.Size), WorkingSetBytes: 1 << 20}
			if u.Spec.Embedding != nil {
				r.Vocab = u.Spec.Embedding.VocabSize
			}
			if u.Spec.Head != nil {
				r.HeadOut = u.Spec.Head.OutFeatures
			}
			r.Hidden, r.Layers = u.Spec.HiddenSize, u.Spec.NumLayers
			r.AvgRW = float64(u.T*(1+c)) * (1 << 20) / 4
			if r.Schedule == "A+" {
				r.AvgRW *= 0.8
			}
			r.DRE = r.AvgRW / float64(r.WorkingSetBytes)
			rows = append(rows, r)
		}
	}
	return rows
}

// TestPlotFiles draws the figures and checks every file: each figure in
// PNG (decodes), SVG (well-formed XML) and PDF (header and trailer);
// Figure 3's panels in cache size order; Figure 6 with the paper's marks
// and the no-head variant.
func TestPlotFiles(t *testing.T) {
	sw := plotSweep(t)
	dir := t.TempDir()
	files, err := Plot(sw, plotRows(sw), dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range []string{fig3, fig4, fig5, fig6} {
		for _, ext := range FigureFormats() {
			want = append(want, filepath.Join(dir, f+"."+ext))
		}
	}
	if !slices.Equal(files, want) {
		t.Fatalf("Plot wrote %v, want %v", files, want)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 300 || b.Dx() < b.Dy() {
				t.Errorf("%s: %dx%d pixels", f, b.Dx(), b.Dy())
			}
		case ".svg":
			if err := wellFormed(data); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		case ".pdf":
			if !bytes.HasPrefix(data, []byte("%PDF-1.")) || !bytes.Contains(data[max(0, len(data)-64):], []byte("%%EOF")) {
				t.Errorf("%s: not a whole PDF (%d bytes)", f, len(data))
			}
		}
	}
	svg := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// Figure 3: one panel per cache, smallest first.
	s3 := svg(fig3)
	at := []int{strings.Index(s3, "2MB cache"), strings.Index(s3, "12MB cache"), strings.Index(s3, "25MB cache")}
	if slices.Contains(at, -1) || !slices.IsSorted(at) {
		t.Errorf("Figure 3's panels at %v, want 2MB, 12MB, 25MB in that order", at)
	}
	if !strings.Contains(s3, "Schedule A+") {
		t.Error("Figure 3 has no Schedule A+ bars")
	}
	s6 := svg(fig6)
	for _, w := range []string{"lm-dre", "(no head)", "bytener", "Section V-B"} {
		if !strings.Contains(s6, w) {
			t.Errorf("Figure 6 lacks %q", w)
		}
	}
}

// wellFormed reports whether data is one well-formed XML document with an
// svg root.
func wellFormed(data []byte) error {
	d := xml.NewDecoder(bytes.NewReader(data))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		return errors.New("root element " + root + ", want svg")
	}
	return nil
}

// TestPaperMarks checks where the paper's savings go on Figure 6: over
// the bars of T = 10 and 100 of the apps the text gives them for, at A+ / A.
func TestPaperMarks(t *testing.T) {
	tab := appTable{
		apps:    []appKey{{"lm", false}, {"lm-dre", false}, {"lm-dre", true}, {"deepspeech1", false}},
		lengths: []int{10, 20, 50, 100},
	}
	m := tab.paperMarks(10)
	if m == nil || len(m.xys) != 4 {
		t.Fatalf("marks %+v, want 4 (lm-dre with and without head, T = 10 and 100)", m)
	}
	for i, want := range []struct{ x, y, off float64 }{{1, 1 / 1.25, -15}, {1, 1 / 1.29, 15}, {2, 1 / 1.25, -15}, {2, 1 / 1.29, 15}} {
		if m.xys[i].X != want.x || math.Abs(m.xys[i].Y-want.y) > 1e-12 || float64(m.offs[i]) != want.off {
			t.Errorf("mark %d at x %v (offset %v), y %v; want %v (%v), %v", i, m.xys[i].X, m.offs[i], m.xys[i].Y, want.x, want.off, want.y)
		}
	}
	tab.apps = []appKey{{"lm", false}, {"deepspeech1", false}}
	if m := tab.paperMarks(10); m != nil {
		t.Errorf("marks for apps the paper gives no number for: %+v", m)
	}
}

// TestReportCacheOrder checks that every table of the report lists the
// caches smallest first, whatever their order in the sweep and their
// names' order as text.
func TestReportCacheOrder(t *testing.T) {
	sw := plotSweep(t)
	var b bytes.Buffer
	Report(&b, sw, plotRows(sw))
	out := b.String()
	at := []int{strings.Index(out, "(2MB cache)"), strings.Index(out, "(12MB cache)"), strings.Index(out, "(25MB cache)")}
	if slices.Contains(at, -1) || !slices.IsSorted(at) {
		t.Errorf("A+ savings tables at %v, want 2MB, 12MB, 25MB in that order:\n%s", at, out)
	}
	for _, section := range []string{"## Share of lstm", "## lstm by input length", "## Section III-C", "## Vocabulary"} {
		i := strings.Index(out, section)
		if i < 0 {
			t.Fatalf("report lacks %q:\n%s", section, out)
		}
		body := out[i:]
		if j := strings.Index(body[1:], "\n## "); j >= 0 {
			body = body[:j+1]
		}
		at := []int{strings.Index(body, "| 2MB |"), strings.Index(body, "| 12MB |"), strings.Index(body, "| 25MB |")}
		if slices.Contains(at, -1) || !slices.IsSorted(at) {
			t.Errorf("%s: caches at %v, want 2MB, 12MB, 25MB in that order:\n%s", section, at, body)
		}
	}
	if !strings.Contains(out, "| lm-dre (no head) |") || !strings.Contains(out, "1.25x at T=10, 1.29x at T=100") {
		t.Errorf("report lacks the no-head row or the paper's LM savings:\n%s", out)
	}
}

// TestReportVocabPairs checks the vocabulary table's line on rows made by
// hand: the larger vocabulary adds exactly its head to the traffic and
// its embedding and head to the working set.
func TestReportVocabPairs(t *testing.T) {
	const M = 1 << 20
	mk := func(dre float64, rw, ws, emb, head int64) vocabRow {
		return vocabRow{row: Row{DRE: dre, AvgRW: float64(rw), WorkingSetBytes: ws}, emb: emb, head: head}
	}
	nets := []gridPoint{{"lstm", 1, 1, 10}, {"lstm", 2, 1, 10}, {"lstm", 3, 1, 10}, {"lstm", 4, 1, 10}, {"lstm", 4, 1, 99}}
	at := map[gridPoint]map[int]vocabRow{
		// DRE 2 -> 1: traffic +10, working set +20 (embedding +10, head +10).
		nets[0]: {5: mk(2, 20*M, 10*M, M, M), 50: mk(1, 30*M, 30*M, 11*M, 11*M)},
		// Falls below 1.
		nets[1]: {5: mk(1.5, 15*M, 10*M, M, M), 50: mk(0.8, 25*M, 30*M, 11*M, 11*M)},
		// Rises to 1 or more.
		nets[2]: {5: mk(0.01, M, 10*M, M, M), 50: mk(1.1, 11*M, 30*M, 11*M, 11*M)},
		// Below 1 at both.
		nets[3]: {5: mk(0.01, M, 10*M, M, M), 50: mk(0.5, 11*M, 30*M, 11*M, 11*M)},
		// Another input length: not in the line.
		nets[4]: {5: mk(9, M, M, M, M), 50: mk(9, M, M, M, M)},
	}
	var b bytes.Buffer
	reportVocabPairs(&b, "c", 10, 5, 50, nets, at)
	want := "| c | 10 | 5 -> 50 | 4 | 1 | 1 | 1 | 1 | 1.00 (1.00 to 1.00) | 1.00 (1.00 to 1.00) | 0.50 (0.50 to 0.50) |\n"
	if b.String() != want {
		t.Errorf("line\n%s want\n%s", b.String(), want)
	}
}

// TestPaperLMRow reproduces Figure 6's LM row from the sweep and checks
// it against a count by hand of the bytes of G each schedule reads: A
// reads every layer's W_ih and W_hh at every step, A+ W_hh at every step
// and W_ih once; with the head, both read it once more per inference.
// The simulated traffic also holds the small per-step buffers, so the
// ratio is allowed 0.5%.
func TestPaperLMRow(t *testing.T) {
	sw, err := ParseSweep("lm.yaml", []byte(`
schedules: [A, A+]
caches: [{name: 12MB, size: 12MiB}]
apps: {names: [lm-dre], input_lengths: [10, 100], no_head: [lm-dre]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if sw.Units() != 8 {
		t.Fatalf("%d units, want 8", sw.Units())
	}
	rows := runSweep(t, sw, RunOptions{Out: t.TempDir(), Jobs: 2})
	app, err := models.LookupApp("lm-dre")
	if err != nil {
		t.Fatal(err)
	}
	net, _, err := app.Shape()
	if err != nil {
		t.Fatal(err)
	}
	var w, u float64 // bytes of every layer's W_ih and W_hh
	for _, dirs := range net.Layers {
		l := dirs[0]
		w += 4 * float64(l.Rows()*l.Input)
		u += 4 * float64(l.Rows()*l.Out())
	}
	head := 4 * float64(net.HeadOut*(net.OutputWidth()+1))
	for _, noHead := range []bool{false, true} {
		k := appKey{"lm-dre", noHead}
		h := head
		if noHead {
			h = 0
		}
		for _, T := range []int{10, 100} {
			a, p := findApp(rows, k, T, "A", "12MB"), findApp(rows, k, T, "A+", "12MB")
			if a == nil || p == nil {
				t.Fatalf("%s T=%d: rows missing", k.label(" "), T)
			}
			if noHead != (a.HeadOut == 0) || noHead != strings.Contains(a.Note, "head left out") || !strings.Contains(a.Note, "layers lstm 2048, lstm 8192") {
				t.Errorf("%s T=%d: head_out %d, note %q", k.label(" "), T, a.HeadOut, a.Note)
			}
			wantA := float64(T)*(w+u) + h
			wantP := float64(T)*u + w + h
			got, want := a.AvgRW/p.AvgRW, wantA/wantP
			if math.Abs(got/want-1) > 0.005 || math.Abs(a.AvgRW/wantA-1) > 0.005 {
				t.Errorf("%s T=%d: A %.0f MiB, A+ %.0f MiB, saving %.4f; by hand %.0f, %.0f MiB, %.4f",
					k.label(" "), T, a.AvgRW/mib, p.AvgRW/mib, got, wantA/mib, wantP/mib, want)
			}
			t.Logf("%s T=%d: saving %.3fx (by hand %.3fx; the paper %.2fx)", k.label(" "), T, got, want, paperSavingOf("lm-dre", T))
		}
	}
}
