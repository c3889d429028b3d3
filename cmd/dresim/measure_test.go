package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/dre/counters"
	"rnnserve/models"
	"rnnserve/schedule"
)

// table1Item is a Table I model (embedding and softmax head of width
// hidden over vocab 60) through one cache.
func table1Item(hidden int, s schedule.Schedule, T int, cache CacheSpec) measureItem {
	spec := models.Spec{Cell: "lstm", InputSize: hidden, HiddenSize: hidden, NumLayers: 1,
		Embedding: &models.Embedding{VocabSize: 60}, Head: &models.Head{OutFeatures: 60, Activation: "softmax"}}
	return measureItem{target: target{Spec: spec, T: T, B: 1, Schedule: s, Seed: 1}, Model: "table1", Cache: cache, Runs: 100}
}

func TestMeasureChild(t *testing.T) {
	it := table1Item(32, schedule.APlus, 3, CacheSpec{})
	var sums []string
	for _, runs := range []int{1, 2} {
		args, err := it.childArgs(runs)
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut.String())
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
	var errOut bytes.Buffer
	if code := run([]string{childCommand, "-runs", "1"}, &bytes.Buffer{}, &errOut); code != 2 {
		t.Errorf("child without a spec: exit %d, %s", code, errOut.String())
	}
}

// TestMeasureNone: with no source the rows carry the model and no
// measurement, shown as missing, never as zero.
func TestMeasureNone(t *testing.T) {
	cache := CacheSpec{Name: "256KiB", Size: 256 << 10, LineSize: 64, Ways: cachesim.FullyAssociative}
	it := table1Item(64, schedule.A, 4, cache)
	rows, info, err := Measure(context.Background(), []measureItem{it}, MeasureOptions{Counters: counters.None})
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
	if err := writeMeasureRows(&b, rows, "csv"); err != nil {
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
		rows, _, err := Measure(context.Background(), []measureItem{it}, MeasureOptions{Counters: src, Runs: 5})
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
	rows, info, err := Measure(context.Background(), []measureItem{it},
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
	if _, _, err := Measure(context.Background(), []measureItem{it},
		MeasureOptions{Counters: counters.Cachegrind, Valgrind: counters.ValgrindOptions{Path: "/nonexistent/valgrind"}}); !errors.Is(err, counters.ErrNoValgrind) {
		t.Errorf("cachegrind without valgrind: %v", err)
	}
}

func TestMeasureCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"measure", "-detect"}, &out, &errOut); code != 0 && code != 1 {
		t.Fatalf("measure -detect: exit %d: %s", code, errOut.String())
	}
	for _, e := range append(counters.CoreEvents, counters.UncoreEvents...) {
		if !strings.Contains(out.String(), e.String()) {
			t.Errorf("-detect does not mention %s:\n%s", e, out.String())
		}
	}
	if !strings.Contains(out.String(), "valgrind: ") {
		t.Errorf("-detect does not say whether valgrind is there:\n%s", out.String())
	}
	out.Reset()
	errOut.Reset()
	code := run([]string{"measure", "--counters", "none", "-hidden", "32", "-t", "2", "-cache", "64KiB", "-schedules", "A+", "-format", "markdown"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "| table1 | lstm | 32 | 1 | 60 | 2 | A+ | 64KiB |") ||
		!strings.Contains(out.String(), "measured traffic: none") {
		t.Errorf("exit %d:\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, bad := range [][]string{
		{"measure", "--counters", "papi"},
		{"measure", "--scope", "socket"},
		{"measure", "--format", "xml"},
		{"measure", "-cache", "100B"},
		{"measure", "--schedules", "B"},
		{"measure", "a.yaml", "b.yaml"},
		{"measure", "--counters", "none", "--valgrind-runs", "1"},
		{"measure", "--counters", "none", "--tool", "massif"},
	} {
		if code := run(bad, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("%q: exit %d, want 2", bad, code)
		}
	}
}

// TestValidateSweep: configs/sweeps/validate.yaml is a valid sweep whose
// rows measure can run.
func TestValidateSweep(t *testing.T) {
	f := measureFlags{sweeps: filepath.Join("..", "..", "configs", "sweeps")}
	items, err := f.items([]string{"validate"})
	if err != nil {
		t.Fatal(err)
	}
	scheds := map[schedule.Schedule]bool{}
	for _, it := range items {
		scheds[it.Schedule] = true
	}
	if len(items) < 8 || !scheds[schedule.A] || !scheds[schedule.APlus] {
		t.Errorf("%d items, schedules %v", len(items), scheds)
	}
}

// TestMeasureCachegrindAgrees runs Table I configurations for real under
// valgrind (callgrind's cache simulation with write-backs) and checks the
// measured DRAM traffic of a steady-state inference against the model of
// the same LL within 15%. dresim is built and re-runs itself in its child
// mode; the steady state is (3 inferences - 1 inference) / 2.
func TestMeasureCachegrindAgrees(t *testing.T) {
	if testing.Short() {
		t.Skip("runs valgrind: skipped in -short mode")
	}
	if _, err := counters.LookValgrind(""); err != nil {
		t.Skipf("%v: install valgrind to run this test", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build dresim: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "dresim")
	if out, err := exec.Command(goTool, "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	items := []measureItem{
		// G (1 MiB) streams through a 1 MiB LL at every step.
		table1Item(256, schedule.A, 10, CacheSpec{Name: "1MiB-16way", Size: 1 << 20, LineSize: 64, Ways: 16}),
		// W_ih once, then W_hh (4 MiB) at every step through 2 MiB.
		table1Item(512, schedule.APlus, 10, CacheSpec{Name: "2MiB-16way", Size: 2 << 20, LineSize: 64, Ways: 16}),
	}
	start := time.Now()
	rows, info, err := Measure(context.Background(), items, MeasureOptions{Counters: counters.Cachegrind, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	if info.Source != counters.Cachegrind || len(info.Caches) != 0 {
		t.Fatalf("source %s, cache notes %v", info.Source, info.Caches)
	}
	for _, r := range rows {
		t.Logf("%s: %.1fs", r.summary(), r.Seconds)
		if r.MeasuredRW == nil || r.MeasuredWrite == nil || r.DiffPercent == nil {
			t.Fatalf("missing measurement: %+v", r)
		}
		// The traffic is real: more than the working set per inference
		// (G is read at every step), and write-backs were counted.
		if *r.MeasuredDRE < 2 || *r.MeasuredWrite <= 0 {
			t.Errorf("measured DRE %.2f, write bytes %.0f: the inference's traffic is missing", *r.MeasuredDRE, *r.MeasuredWrite)
		}
		if math.Abs(*r.DiffPercent) > 15 {
			t.Errorf("%s %s: cachegrind %.0f bytes, model %.0f: off by %+.1f%%, more than 15%%",
				r.Schedule, r.Cache, *r.MeasuredRW, r.ModelCompared, *r.DiffPercent)
		}
	}
	t.Logf("valgrind runs: %v", time.Since(start).Round(time.Second))
}
