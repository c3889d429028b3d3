package sweep

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"strings"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/dre/counters"
	"rnnserve/models"
	"rnnserve/schedule"
)

// table1Item is a Table I model (embedding and softmax head of width
// hidden over vocab 60) through one cache.
func table1Item(hidden int, s schedule.Schedule, T int, cache CacheSpec) MeasureItem {
	spec := TableISpec("lstm", hidden, 1, 60, "softmax")
	return MeasureItem{Target: Target{Spec: spec, T: T, B: 1, Schedule: schedule.Variant{Schedule: s}, Seed: 1}, Model: "table1", Cache: cache, Runs: 100}
}

func TestMeasureChild(t *testing.T) {
	it := table1Item(32, schedule.APlus, 3, CacheSpec{})
	var sums []string
	for _, runs := range []int{1, 2} {
		args, err := it.ChildArgs(runs)
		if err != nil {
			t.Fatal(err)
		}
		if args[0] != ChildCommand {
			t.Fatalf("child arguments %q do not start with %s", args, ChildCommand)
		}
		var out, errOut bytes.Buffer
		if err := RunChild(args[1:], &out, &errOut); err != nil {
			t.Fatalf("%q: %v: %s", args, err, errOut.String())
		}
		_, sum, ok := strings.Cut(strings.TrimSpace(out.String()), " checksum ")
		if !ok || !strings.HasPrefix(out.String(), "runs "+string(rune('0'+runs))) {
			t.Fatalf("child printed %q", out.String())
		}
		sums = append(sums, sum)
	}
	// The plan recomputes from the same input: every run gives the same output.
	if sums[0] != sums[1] {
		t.Errorf("checksums %q differ between 1 and 2 runs", sums)
	}
	if err := RunChild([]string{"-runs", "1"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("child without a spec: %v, want ErrInvalidOption", err)
	}
}

// TestMeasureNone: with no source the rows carry the model and no
// measurement, shown as missing, never as zero.
func TestMeasureNone(t *testing.T) {
	cache := CacheSpec{Name: "256KiB", Size: 256 << 10, LineSize: 64, Ways: cachesim.FullyAssociative}
	it := table1Item(64, schedule.A, 4, cache)
	rows, info, err := Measure(context.Background(), []MeasureItem{it}, MeasureOptions{Counters: counters.None})
	if err != nil {
		t.Fatal(err)
	}
	if info.Source != counters.None || len(rows) != 1 {
		t.Fatalf("source %s, %d rows", info.Source, len(rows))
	}
	r := rows[0]
	shape, _ := models.Shape(&it.Spec)
	prog, plan, _ := dre.DryPlan(shape, schedule.A, 4, 1, 1)
	rep, err := dre.Analyze(plan, dre.WorkingSetOfProgram(prog, plan.T, plan.B), dre.Options{Cache: cache.config(), Runs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.ModelAvgRW != rep.AvgRW || r.ModelDRE != rep.DRE || r.WorkingSetBytes != rep.WorkingSet.Total {
		t.Errorf("row %+v, model %v %v", r, rep.AvgRW, rep.DRE)
	}
	if r.MeasuredRW != nil || r.MeasuredDRE != nil || r.DiffPercent != nil {
		t.Errorf("measured values without a source: %+v", r)
	}
	var b bytes.Buffer
	if err := WriteMeasureRows(&b, rows, "csv"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(recs) != 2 {
		t.Fatalf("csv %v: %q", err, b.String())
	}
	for i, h := range recs[0] {
		if h == "measured_rw_bytes" && recs[1][i] != "" {
			t.Errorf("measured_rw_bytes = %q, want empty", recs[1][i])
		}
	}
}

// TestMeasureSourceChoice: asking for hardware counters this machine
// lacks is an error that says why; auto falls back and says why too.
func TestMeasureSourceChoice(t *testing.T) {
	it := table1Item(32, schedule.A, 2, CacheSpec{Name: "1MiB", Size: 1 << 20, LineSize: 64, Ways: cachesim.FullyAssociative})
	d, err := counters.Detect(counters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hw := len(d.Available()) > 0
	for _, src := range []counters.Source{counters.Perf, counters.Uncore} {
		rows, _, err := Measure(context.Background(), []MeasureItem{it}, MeasureOptions{Counters: src, Runs: 5})
		has := false
		for _, e := range d.Available() {
			has = has || (src == counters.Uncore) == (e == counters.DRAMReadBytes || e == counters.DRAMWriteBytes)
		}
		switch {
		case !has && !errors.Is(err, counters.ErrUnavailable):
			t.Errorf("%s without its counters: %v, want ErrUnavailable", src, err)
		case !has && !strings.Contains(err.Error(), "unavailable: "):
			t.Errorf("%s: %v does not say why", src, err)
		case has && (err != nil || rows[0].MeasuredRW == nil):
			t.Errorf("%s with counters: %v, %+v", src, err, rows)
		}
	}
	// No hardware counters and no valgrind: the model alone, and why.
	rows, info, err := Measure(context.Background(), []MeasureItem{it},
		MeasureOptions{Valgrind: counters.ValgrindOptions{Path: "/nonexistent/valgrind"}, Runs: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !hw {
		why := strings.Join(info.Why, "\n")
		if info.Source != counters.None || rows[0].MeasuredRW != nil || !strings.Contains(why, "valgrind is not on PATH") ||
			!strings.Contains(why, "perf") || !strings.Contains(why, "uncore") {
			t.Errorf("source %s, why:\n%s", info.Source, why)
		}
	}
	if _, _, err := Measure(context.Background(), []MeasureItem{it},
		MeasureOptions{Counters: counters.Cachegrind, Valgrind: counters.ValgrindOptions{Path: "/nonexistent/valgrind"}}); !errors.Is(err, counters.ErrNoValgrind) {
		t.Errorf("cachegrind without valgrind: %v", err)
	}
}
