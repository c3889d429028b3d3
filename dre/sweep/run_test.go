package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/dre"
)

func readFile(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readResults(t testing.TB, dir string) Results {
	t.Helper()
	var r Results
	if err := json.Unmarshal([]byte(readFile(t, dir, ResultsFile)), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// sameRows compares rows but not their simulation times, which differ
// from run to run.
func sameRows(a, b []Row) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	for i := range a {
		a[i].SimSeconds = 0
	}
	for i := range b {
		b[i].SimSeconds = 0
	}
	return reflect.DeepEqual(a, b)
}

func runSweep(t testing.TB, sw *Sweep, opt RunOptions) []Row {
	t.Helper()
	if _, err := Run(context.Background(), sw, opt); err != nil {
		t.Fatal(err)
	}
	_, rows, err := ReadOutput(opt.Out)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRunEndToEnd runs the tiny sweep and checks every output: the
// progress bar, rows in order, CSV equal to JSON, results.json complete,
// the figures, the report, and numbers that must hold in any correct
// model.
func TestRunEndToEnd(t *testing.T) {
	out := t.TempDir()
	sw := loadTestSweep(t, "tiny.yaml")
	var bar bytes.Buffer
	sum, err := Run(context.Background(), sw, RunOptions{Out: out, Jobs: 2, Figures: true, Progress: &bar})
	if err != nil {
		t.Fatal(err)
	}
	if msg := bar.String(); !strings.Contains(msg, "72/72 rows 100%") || sum.Rows != 72 || sum.Want != 72 || sum.Interrupted {
		t.Errorf("progress %q, summary %+v", msg, sum)
	}
	var report bytes.Buffer
	Report(&report, sw, readResults(t, out).Rows)
	for _, want := range []string{"A+ savings, A / A+ traffic (1MiB cache)", "| gnmt | 1.", "Section III-C", "| input length | 16KiB |"} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, report.String())
		}
	}
	_, rows, err := ReadOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(rows)) != sw.Rows() {
		t.Fatalf("%d rows, want %d", len(rows), sw.Rows())
	}
	for i, r := range rows {
		if r.Index != i {
			t.Fatalf("row %d has index %d", i, r.Index)
		}
	}
	csvRows, err := ReadCSV(strings.NewReader(readFile(t, out, CSVFile)), maxRows)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(csvRows, rows, func(a, b Row) bool { return a.Index == b.Index && a.AvgRW == b.AvgRW && a.DRE == b.DRE }) {
		t.Error("rows.csv and rows.jsonl differ")
	}
	res := readResults(t, out)
	if !res.Complete || res.Interrupted || len(res.Rows) != len(rows) || res.Fingerprint != sw.Fingerprint() {
		t.Errorf("results.json: complete %v interrupted %v rows %d", res.Complete, res.Interrupted, len(res.Rows))
	}
	for _, f := range []string{fig3, fig4, fig5, fig6} {
		for _, ext := range FigureFormats() {
			if st, err := os.Stat(filepath.Join(out, FiguresDir, f+"."+ext)); err != nil || st.Size() < 1000 {
				t.Errorf("figure %s.%s: %v", f, ext, err)
			}
		}
	}

	byKey := map[string]Row{}
	for _, r := range rows {
		byKey[r.Model+r.Cell+strconv.Itoa(r.Hidden)+strconv.Itoa(r.Layers)+strconv.Itoa(r.T)+r.Schedule+r.Cache] = r
		if r.AvgRW != r.AvgReadBytes+r.AvgWriteBytes || r.WorkingSetBytes <= 0 || r.DRE != r.AvgRW/float64(r.WorkingSetBytes) {
			t.Errorf("row %d: inconsistent traffic %+v", r.Index, r)
		}
		if r.OPTReadBytes != nil && float64(*r.OPTReadBytes) > r.AvgReadBytes {
			t.Errorf("row %d: MIN bound %d above LRU's %v read bytes", r.Index, *r.OPTReadBytes, r.AvgReadBytes)
		}
		if r.OPTReadBytes == nil && r.OPTSkipped == "" {
			t.Errorf("row %d: no MIN bound and no reason", r.Index)
		}
	}
	// A cache holding the whole plan only sees the cold misses, which 10
	// runs share; GNMT's 1.5 GB does not fit, and its encoder reads less
	// under A+ than under A.
	small := byKey["table1lstm1616A1MiB"]
	if small.DRE >= 1 {
		t.Errorf("tiny LSTM in 1 MiB: DRE %v, want below 1", small.DRE)
	}
	ga, gp := byKey["gnmtlstm102482A1MiB"], byKey["gnmtlstm102482A+1MiB"]
	if ga.AvgRW == 0 || gp.AvgRW >= ga.AvgRW || ga.DRE < 1 || !strings.Contains(gp.Note, "encoder only") {
		t.Errorf("GNMT: A %v, A+ %v, DRE %v, note %q", ga.AvgRW, gp.AvgRW, ga.DRE, gp.Note)
	}
}

// TestMergeEqualsUnsharded runs the tiny sweep whole and in three shards,
// merges the shards, and compares.
func TestMergeEqualsUnsharded(t *testing.T) {
	sw := loadTestSweep(t, "tiny.yaml")
	whole := runSweep(t, sw, RunOptions{Out: t.TempDir(), Jobs: 2})
	var dirs []string
	for k := range 3 {
		dir := t.TempDir()
		rows := runSweep(t, sw, RunOptions{Out: dir, Jobs: 2, Shard: Shard{K: k, N: 3}})
		for _, r := range rows {
			if !(Shard{K: k, N: 3}).has(r.Index / len(sw.Caches)) {
				t.Fatalf("shard %d holds row %d", k, r.Index)
			}
		}
		dirs = append(dirs, dir)
	}
	// Shards in any order.
	out := t.TempDir()
	res, err := Merge([]string{dirs[2], dirs[0], dirs[1]}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(out, res); err != nil {
		t.Fatal(err)
	}
	_, merged, err := ReadOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRows(merged, whole) {
		t.Fatal("merged shards differ from the unsharded run")
	}
	csvRows, err := ReadCSV(strings.NewReader(readFile(t, out, CSVFile)), maxRows)
	if err != nil || !sameRows(csvRows, whole) {
		t.Fatalf("merged CSV differs: %v", err)
	}
	if res := readResults(t, out); !res.Complete || res.Shard != nil {
		t.Errorf("merged results.json: complete %v shard %v", res.Complete, res.Shard)
	}

	// A missing shard, a repeated one, or another sweep's is refused.
	if _, err := Merge(dirs[:2], false); !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing shard: %v", err)
	}
	if res, err := Merge(dirs[:2], true); err != nil || res.Complete {
		t.Errorf("-partial: %v, complete %v", err, res != nil && res.Complete)
	}
	if _, err := Merge([]string{dirs[0], dirs[0]}, false); !errors.Is(err, ErrMerge) {
		t.Errorf("repeated shard: %v", err)
	}
	other := loadTestSweep(t, "setassoc.yaml")
	odir := t.TempDir()
	orows := runSweep(t, other, RunOptions{Out: odir, Jobs: 1})
	if len(orows) != 4 || orows[0].Ways != 4 || orows[1].Ways != 1 || orows[1].LineSize != 128 || orows[1].AvgRW <= orows[0].AvgRW {
		t.Errorf("set-associative rows: %+v", orows)
	}
	if _, err := Merge([]string{dirs[0], odir}, true); !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("another sweep: %v", err)
	}
}

// TestInterrupt cancels a sweep after its first unit and checks that the
// output is valid and holds exactly the rows finished, equal to those of
// a full run.
func TestInterrupt(t *testing.T) {
	sw := loadTestSweep(t, "tiny.yaml")
	full := runSweep(t, sw, RunOptions{Out: t.TempDir(), Jobs: 2})
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sum, err := Run(ctx, sw, RunOptions{Out: dir, Jobs: 2, Figures: true, OnRows: func(int) { cancel() }})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run = %v, want ErrInterrupted", err)
	}
	if sum.Rows == 0 || sum.Rows >= len(full) || !sum.Interrupted {
		t.Fatalf("summary %+v: want some rows, not all %d", sum, len(full))
	}
	rows, err := ReadCSV(strings.NewReader(readFile(t, dir, CSVFile)), maxRows)
	if err != nil {
		t.Fatalf("rows.csv after interrupt: %v", err)
	}
	_, jrows, err := ReadOutput(dir)
	if err != nil {
		t.Fatalf("rows.jsonl after interrupt: %v", err)
	}
	if len(rows) != sum.Rows || !sameRows(rows, jrows) {
		t.Fatalf("%d CSV rows, %d JSON rows, summary %d", len(rows), len(jrows), sum.Rows)
	}
	for i, r := range rows {
		if i > 0 && r.Index <= rows[i-1].Index {
			t.Fatalf("rows out of order: %d after %d", r.Index, rows[i-1].Index)
		}
		if !sameRows([]Row{r}, []Row{full[r.Index]}) {
			t.Fatalf("row %d differs from the full run's:\n%+v\n%+v", r.Index, r, full[r.Index])
		}
	}
	res := readResults(t, dir)
	if !res.Interrupted || res.Complete || len(res.Rows) != len(rows) {
		t.Errorf("results.json: interrupted %v complete %v rows %d", res.Interrupted, res.Complete, len(res.Rows))
	}
	if _, err := os.Stat(filepath.Join(dir, FiguresDir, fig3+".svg")); err != nil {
		t.Errorf("no figures after interrupt: %v", err)
	}
}

// TestExtentMatchesLineLRU checks the rows, which dre computes with the
// extent-based LRU and its steady-state shortcut, against a plain
// fully associative line LRU replaying every one of the runs.
func TestExtentMatchesLineLRU(t *testing.T) {
	sw := loadTestSweep(t, "tiny.yaml")
	sw.Runs = 7
	sw.OPT = false
	sw.Caches = []CacheSpec{{Name: "4KiB", Size: 4 << 10}, {Name: "40KiB", Size: 40 << 10}, {Name: "256KiB", Size: 256 << 10}}
	sw.Apps.Names = []string{"bytener"}
	sw.Plots = Plots{}
	if testing.Short() {
		sw.Apps = nil
	}
	sw.EnsureDefaults()
	if err := sw.Validate(); err != nil {
		t.Fatal(err)
	}
	units := sw.units()
	checked := 0
	for i := range units {
		u := &units[i]
		b, err := build(u, sw.Batch, sw.Seed)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := analyze(u, b, sw)
		if err != nil {
			t.Fatal(err)
		}
		l := dre.NewLayout(b.plan.Buffers)
		for c, cs := range sw.Caches {
			lru, err := cachesim.NewLRU(cachesim.Config{Size: int64(cs.Size), LineSize: cs.LineSize, Ways: cachesim.FullyAssociative})
			if err != nil {
				t.Fatal(err)
			}
			for range sw.Runs {
				if err := dre.Replay(b.plan, l, lru); err != nil {
					t.Fatal(err)
				}
			}
			st := lru.Stats()
			read := float64(st.ReadBytes()) / float64(sw.Runs)
			write := float64(st.WriteBytes()) / float64(sw.Runs)
			if r := rows[c]; r.AvgReadBytes != read || r.AvgWriteBytes != write {
				t.Errorf("%s %s h%d l%d T%d %s %s: extent %v + %v bytes, line LRU %v + %v",
					u.Model, r.Cell, r.Hidden, r.Layers, r.T, r.Schedule, cs.Name, r.AvgReadBytes, r.AvgWriteBytes, read, write)
			}
			checked++
		}
	}
	if checked < 3*32 {
		t.Fatalf("checked %d rows", checked)
	}
}
