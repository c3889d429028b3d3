package main

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rnnserve/dre/counters"
	"rnnserve/dre/sweep"
	"rnnserve/schedule"
)

// table1Item is a Table I model (embedding and softmax head of width
// hidden over vocab 60) through one cache.
func table1Item(hidden int, s schedule.Schedule, T int, cache sweep.CacheSpec) sweep.MeasureItem {
	spec := sweep.TableISpec("lstm", hidden, 1, 60, "softmax")
	return sweep.MeasureItem{Target: sweep.Target{Spec: spec, T: T, B: 1, Schedule: schedule.Variant{Schedule: s}, Seed: 1}, Model: "table1", Cache: cache, Runs: 100}
}

func TestMeasureCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"measure", "-detect"}, noEnv, &out, &errOut); code != 0 && code != 1 {
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
	code := run([]string{"measure", "--counters", "none", "-hidden", "32", "-t", "2", "-cache", "64KiB", "-schedules", "A+", "-format", "markdown"}, noEnv, &out, &errOut)
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
		if code := run(bad, noEnv, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
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
	scheds := map[schedule.Variant]bool{}
	for _, it := range items {
		scheds[it.Schedule] = true
	}
	if len(items) < 8 || !scheds[schedule.Variant{Schedule: schedule.A}] || !scheds[schedule.Variant{Schedule: schedule.APlus}] {
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
	exe := buildDresim(t)
	items := []sweep.MeasureItem{
		// G (1 MiB) streams through a 1 MiB LL at every step.
		table1Item(256, schedule.A, 10, sweep.CacheSpec{Name: "1MiB-16way", Size: 1 << 20, LineSize: 64, Ways: 16}),
		// W_ih once, then W_hh (4 MiB) at every step through 2 MiB.
		table1Item(512, schedule.APlus, 10, sweep.CacheSpec{Name: "2MiB-16way", Size: 2 << 20, LineSize: 64, Ways: 16}),
	}
	start := time.Now()
	rows, info, err := sweep.Measure(context.Background(), items, sweep.MeasureOptions{Counters: counters.Cachegrind, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	if info.Source != counters.Cachegrind || len(info.Caches) != 0 {
		t.Fatalf("source %s, cache notes %v", info.Source, info.Caches)
	}
	for _, r := range rows {
		t.Logf("%s: %.1fs", r.String(), r.Seconds)
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
