package sweep

import (
	"testing"

	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/schedule"
)

// TestSweepPrecisions runs a sweep of P with float32, bf16 and int8
// weights: each row is named after its variant, its working set is
// dre's at that precision (int8: 1 byte a weight plus 8 a row), and in a
// cache the float32 model overflows the traffic falls with the bytes.
func TestSweepPrecisions(t *testing.T) {
	sw, err := ParseSweep("precisions.yaml", []byte(`
name: precisions
runs: 4
schedules: [P, P-bf16, P-int8]
caches:
  - {name: 256KiB, size: 256KiB}
grid:
  cells: [lstm]
  hidden: [128]
  layers: [2]
  input_lengths: [10]
  vocab: [60]
`))
	if err != nil {
		t.Fatal(err)
	}
	rows := runSweep(t, sw, RunOptions{Out: t.TempDir(), Jobs: 1})
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	spec := TableISpec("lstm", 128, 2, 60, sw.Grid.HeadActivation)
	net, err := models.Shape(&spec)
	if err != nil {
		t.Fatal(err)
	}
	var prev *Row
	for i, prec := range []schedule.Precision{schedule.F32, schedule.BF16, schedule.Int8} {
		r := &rows[i]
		want := schedule.Variant{Schedule: schedule.Partitioned, Precision: prec}.String()
		if r.Schedule != want {
			t.Errorf("row %d: schedule %q, want %q", i, r.Schedule, want)
		}
		if ws := dre.WorkingSetOfPrecision(net, 10, 1, prec).Total; r.WorkingSetBytes != ws {
			t.Errorf("%s: working set %d bytes, want %d", r.Schedule, r.WorkingSetBytes, ws)
		}
		if prev != nil && (r.WorkingSetBytes >= prev.WorkingSetBytes || r.AvgRW >= prev.AvgRW) {
			t.Errorf("%s: working set %d, traffic %.0f; %s: %d, %.0f: want less of both", r.Schedule, r.WorkingSetBytes, r.AvgRW,
				prev.Schedule, prev.WorkingSetBytes, prev.AvgRW)
		}
		prev = r
	}
	if _, err := ParseSweep("bad.yaml", []byte("schedules: [A-int8]\ngrid: {cells: [lstm], hidden: [8], layers: [1], input_lengths: [1], vocab: [5]}\n")); err == nil {
		t.Error("schedule A-int8: no error")
	}
}
