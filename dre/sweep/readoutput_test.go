package sweep

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// sampleManifest is the manifest dresim writes for validSweep, unsharded.
func sampleManifest(t testing.TB) *Manifest {
	t.Helper()
	sw, err := ParseSweep("m.yaml", []byte(validSweep))
	if err != nil {
		t.Fatal(err)
	}
	return &Manifest{Sweep: sw, File: "m.yaml", Fingerprint: sw.Fingerprint(),
		TotalRows: sw.Rows(), ShardRows: sw.Rows(), Started: "2026-11-29T12:00:00Z"}
}

func manifestJSON(t testing.TB, m *Manifest) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadManifestChecks: a manifest as dresim writes it is read back;
// one whose sweep, fingerprint, row counts or shard disagree, or that
// has an unknown key, trailing data or too many bytes, is refused with
// an error naming what is wrong.
func TestReadManifestChecks(t *testing.T) {
	good := sampleManifest(t)
	if _, err := decodeManifest(manifestJSON(t, good)); err != nil {
		t.Fatalf("the written manifest: %v", err)
	}
	edit := func(f func(m *Manifest)) []byte {
		c := *good
		sw := *good.Sweep
		c.Sweep = &sw
		f(&c)
		return manifestJSON(t, &c)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"fingerprint", edit(func(m *Manifest) { m.Fingerprint = "0123" }), "fingerprint"},
		{"total rows", edit(func(m *Manifest) { m.TotalRows++ }), "total_rows"},
		{"shard rows", edit(func(m *Manifest) { m.ShardRows = m.TotalRows + 1 }), "shard_rows"},
		{"shard k", edit(func(m *Manifest) { m.Shard = &Shard{K: 2, N: 2} }), "shard 2/2"},
		{"shard n", edit(func(m *Manifest) { m.Shard = &Shard{K: 0, N: 0} }), "shard 0/0"},
		{"invalid sweep", edit(func(m *Manifest) { m.Sweep.Runs = 0 }), "runs"},
		{"no sweep", []byte(`{"file": "x"}`), "no sweep"},
		{"unknown key", bytes.Replace(manifestJSON(t, good), []byte(`"file"`), []byte(`"extra":1,"file"`), 1), "extra"},
		{"trailing data", append(manifestJSON(t, good), []byte(" {}")...), "after the manifest"},
		{"too long", append(manifestJSON(t, good), bytes.Repeat([]byte(" "), MaxManifestBytes)...), "MaxManifestBytes"},
	} {
		_, err := decodeManifest(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}

// TestReadRowsBounds: rows beyond the manifest's count, a line longer
// than MaxRowBytes and two rows on one line are refused; blank lines are
// skipped.
func TestReadRowsBounds(t *testing.T) {
	var buf bytes.Buffer
	for _, r := range sampleRows() {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	if rows, err := ReadJSONL(bytes.NewReader(buf.Bytes()), 2); err != nil || len(rows) != 2 {
		t.Fatalf("two rows, max 2: %d rows, %v", len(rows), err)
	}
	for _, tc := range []struct {
		name string
		data string
		max  int64
		want string
	}{
		{"more rows", buf.String(), 1, "more than the 1 rows"},
		{"long line", `{"note": "` + strings.Repeat("x", MaxRowBytes) + `"}` + "\n", 5, "MaxRowBytes"},
		{"two on a line", `{"index": 1} {"index": 2}` + "\n", 5, "more than one row"},
	} {
		_, err := ReadJSONL(strings.NewReader(tc.data), tc.max)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("JSON lines, %s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	var csvBuf bytes.Buffer
	csvBuf.WriteString(strings.Join(csvHeader, ",") + "\n")
	for _, r := range sampleRows() {
		csvBuf.WriteString(strings.Join(quoteAll(r.record()), ",") + "\n")
	}
	if rows, err := ReadCSV(bytes.NewReader(csvBuf.Bytes()), 2); err != nil || len(rows) != 2 {
		t.Fatalf("CSV, two rows, max 2: %d rows, %v", len(rows), err)
	}
	if _, err := ReadCSV(bytes.NewReader(csvBuf.Bytes()), 1); err == nil || !strings.Contains(err.Error(), "more than the 1 rows") {
		t.Errorf("CSV, more rows: error %v", err)
	}
	long := sampleRows()[0].record()
	long[len(long)-1] = strings.Repeat("y", MaxRowBytes)
	if _, err := ReadCSV(strings.NewReader(strings.Join(csvHeader, ",")+"\n"+strings.Join(long, ",")+"\n"), 5); err == nil || !strings.Contains(err.Error(), "MaxRowBytes") {
		t.Errorf("CSV, long line: error %v", err)
	}
}

// quoteAll quotes every field as encoding/csv would need for a note with
// a line break in it.
func quoteAll(rec []string) []string {
	out := make([]string, len(rec))
	for i, f := range rec {
		out[i] = `"` + strings.ReplaceAll(f, `"`, `""`) + `"`
	}
	return out
}

// TestReadOutputIndex: a row whose index lies outside the sweep is
// refused, naming it.
func TestReadOutputIndex(t *testing.T) {
	dir := t.TempDir()
	m := sampleManifest(t)
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), manifestJSON(t, m), 0o644); err != nil {
		t.Fatal(err)
	}
	row := sampleRows()[0]
	for _, idx := range []int{0, int(m.TotalRows), -1} {
		row.Index = idx
		b, _ := json.Marshal(row)
		if err := os.WriteFile(filepath.Join(dir, JSONLFile), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		_, rows, err := ReadOutput(dir)
		if idx == 0 {
			if err != nil || len(rows) != 1 {
				t.Fatalf("index 0: %d rows, %v", len(rows), err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "outside the sweep") {
			t.Errorf("index %d: error %v", idx, err)
		}
	}
}

// FuzzOutput feeds what dresim report and plot read from an output
// directory (sweep.json, a zero byte, then rows.jsonl) through the
// readers and the report. (A plot takes about 0.15 s, too slow to fuzz:
// TestPlotOddRows draws odd rows instead.) Nothing panics; a manifest is accepted only as
// ReadManifest checks it.
func FuzzOutput(f *testing.F) {
	m := sampleManifest(f)
	var rows bytes.Buffer
	for i, r := range sampleRows() {
		r.Index = i % int(m.TotalRows)
		b, _ := json.Marshal(r)
		rows.Write(append(b, '\n'))
	}
	f.Add(append(append(manifestJSON(f, m), 0), rows.Bytes()...))
	f.Add([]byte("{}\x00{}"))
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		mb, rb, _ := bytes.Cut(data, []byte{0})
		m, err := decodeManifest(mb)
		if err != nil {
			return
		}
		if m.Fingerprint != m.Sweep.Fingerprint() || m.TotalRows != m.Sweep.Rows() {
			t.Fatalf("accepted a manifest that disagrees with its sweep")
		}
		rows, err := ReadJSONL(bytes.NewReader(rb), m.ShardRows)
		if err != nil {
			return
		}
		if int64(len(rows)) > m.ShardRows {
			t.Fatalf("%d rows, the manifest names %d", len(rows), m.ShardRows)
		}
		if checkIndices(m, rows) != nil {
			return
		}
		Report(io.Discard, m.Sweep, rows)
	})
}

// TestPlotOddRows draws the figures of rows a hostile rows.jsonl may hold
// once ReadOutput accepts it: zero and huge traffic, names the sweep does
// not list, repeated indices, no rows of a kind. Plot may refuse them
// with an error; it must not panic.
func TestPlotOddRows(t *testing.T) {
	m := sampleManifest(t)
	base := sampleRows()
	odd := func(f func(r *Row)) []Row {
		rows := make([]Row, len(base))
		copy(rows, base)
		for i := range rows {
			rows[i].Index = 0
			f(&rows[i])
		}
		return rows
	}
	for name, rows := range map[string][]Row{
		"none":        nil,
		"zero":        odd(func(r *Row) { r.AvgRW, r.AvgReadBytes, r.DRE, r.WorkingSetBytes = 0, 0, 0, 0 }),
		"huge":        odd(func(r *Row) { r.AvgRW, r.DRE = 1e308, 1e308 }),
		"negative":    odd(func(r *Row) { r.AvgRW, r.DRE, r.Vocab, r.T = -1, -1, -5, -3 }),
		"grid":        odd(func(r *Row) { r.Kind, r.Schedule, r.Cache = "grid", "A", "small" }),
		"app":         odd(func(r *Row) { r.Kind, r.Schedule, r.Cache, r.HeadOut = "app", "A+", "nowhere", 0 }),
		"other names": odd(func(r *Row) { r.Kind, r.Schedule, r.Cache, r.Cell = "x", "Z", "", "none" }),
	} {
		if _, err := Plot(m.Sweep, rows, t.TempDir()); err != nil {
			t.Logf("%s: %v", name, err)
		}
	}
}
