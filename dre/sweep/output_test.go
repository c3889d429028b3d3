package sweep

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sampleRows() []Row {
	opt := int64(123456789012)
	return []Row{
		{Index: 0, Kind: "grid", Model: "table1", Cell: "lstm", Hidden: 512, Layers: 3, Vocab: 60, HeadOut: 60, T: 10, B: 1,
			Schedule: "A", Cache: "12MB", CacheBytes: 12 << 20, LineSize: 64, Ways: -1, Runs: 100,
			AvgReadBytes: 1.0 / 3, AvgWriteBytes: 1e-300, AvgRW: math.MaxFloat64, WorkingSetBytes: 1 << 40, DRE: 0.1 + 0.2,
			FootprintBytes: 4096, OPTReadBytes: &opt, SimSeconds: 0.00123},
		{Index: 7, Kind: "app", Model: "gnmt", Cell: "gru", Hidden: 1024, Proj: 0, Layers: 8, Bidirectional: true,
			Vocab: 0, HeadOut: 80000, T: 100, B: 2, Schedule: "A+", Cache: `odd, "name"`, CacheBytes: 2 << 20,
			LineSize: 128, Ways: 16, Runs: 1, AvgReadBytes: 12345678901234567, OPTSkipped: "the trace would have 5, too many",
			Note: "A+ on the encoder only;\nsecond line"},
	}
}

// TestCSVAndJSONRoundTrip writes rows as CSV, JSON lines and results.json
// and reads them back unchanged, float bits included.
func TestCSVAndJSONRoundTrip(t *testing.T) {
	rows := sampleRows()
	dir := t.TempDir()
	w, err := newRowWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows[:1]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows[1:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRows(dir, int64(len(rows)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("JSON lines:\n got %+v\nwant %+v", got, rows)
	}
	f := readFile(t, dir, CSVFile)
	got, err = ReadCSV(strings.NewReader(f), int64(len(rows)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("CSV:\n got %+v\nwant %+v", got, rows)
	}
	var res Results
	b, err := json.Marshal(&Results{Rows: rows, Complete: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Rows, rows) {
		t.Errorf("results.json: rows differ")
	}
}

func TestReadCSVErrors(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString(strings.Join(csvHeader, ",") + "\n")
	good := sampleRows()[0].record()
	for name, mutate := range map[string]func([]string){
		"bad int":   func(r []string) { r[4] = "x" },
		"bad float": func(r []string) { r[20] = "1.2.3" },
		"bad bool":  func(r []string) { r[7] = "maybe" },
		"bad opt":   func(r []string) { r[24] = "none" },
	} {
		rec := append([]string(nil), good...)
		mutate(rec)
		if _, err := ReadCSV(strings.NewReader(buf.String()+strings.Join(rec, ",")+"\n"), 10); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ReadCSV(strings.NewReader("a,b\n"), 10); err == nil {
		t.Error("foreign header accepted")
	}
	if _, err := ReadJSONL(strings.NewReader(`{"index": 1, "extra": 2}`+"\n"), 10); err == nil {
		t.Error("unknown JSON field accepted")
	}
}
