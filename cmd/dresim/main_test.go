package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"rnnserve/dre/sweep"
)

// tinySweep is package sweep's test sweep: 36 units through 2 caches.
var tinySweep = filepath.Join("..", "..", "dre", "sweep", "testdata", "tiny.yaml")

// sameRows compares rows but not their simulation times, which differ
// from run to run.
func sameRows(a, b []sweep.Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.SimSeconds, y.SimSeconds = 0, 0
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func readRows(t testing.TB, dir string) []sweep.Row {
	t.Helper()
	_, rows, err := sweep.ReadOutput(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRunCommand runs the tiny sweep through the command line and prints
// its report: the progress bar, the summary line, the rows, the report.
// (TestShardsFromEnvironment runs shards, by flag and by environment, and
// merges them.)
func TestRunCommand(t *testing.T) {
	out := t.TempDir()
	var stderr bytes.Buffer
	if code := run([]string{"run", tinySweep, "-o", out, "-j", "2", "-progress", "always"}, noEnv, &stderr, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, "72/72 rows 100%") || !strings.Contains(msg, "tiny: 72 rows in") {
		t.Errorf("progress and summary: %q", msg)
	}
	var report bytes.Buffer
	if code := run([]string{"report", out}, noEnv, &report, &stderr); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"A+ savings, A / A+ traffic (1MiB cache)", "| gnmt | 1.", "Section III-C", "| input length | 16KiB |"} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, report.String())
		}
	}
	if res := readRows(t, out); len(res) != 72 {
		t.Errorf("%d rows, want 72", len(res))
	}
}

// TestCommandLine checks flag handling and that bad input is refused
// before any output is written.
func TestCommandLine(t *testing.T) {
	tiny := tinySweep
	for _, tc := range []struct {
		args []string // OUT stands for a new directory
		code int
		want string
	}{
		{[]string{"run", tiny, "--shard", "3/3", "-o", "OUT"}, 2, "k = 3 is out of range"},
		{[]string{"run", tiny, "--shard", "x", "-o", "OUT"}, 2, "want k/N"},
		{[]string{"run", tiny, "-j", "0", "-o", "OUT"}, 2, "-j 0"},
		{[]string{"run", tiny, "-progress", "sometimes", "-o", "OUT"}, 2, "auto, always or never"},
		{[]string{"run", "-o", "OUT"}, 2, "exactly one sweep"},
		{[]string{"run", "nosuch", "-o", "OUT"}, 2, "no sweep file nosuch"},
		{[]string{"frobnicate", "-o", "OUT"}, 2, "no sweep file frobnicate"},
		{[]string{"run", tiny, "-o", "OUT", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"--bogus"}, 2, "unknown flag"},
		{[]string{"merge", "-o"}, 2, "flag needs an argument"},
		{[]string{"merge", "x"}, 2, "needs -o"},
		{[]string{"merge", "-o", "OUT", "nosuchdir"}, 1, "nosuchdir"},
		{[]string{"plot"}, 2, "plot needs exactly one directory"},
		{[]string{"report", "a", "b"}, 2, "report needs exactly one directory"},
		{[]string{"report", "nosuchdir"}, 1, "nosuchdir"},
		{[]string{"validate", tiny}, 0, "36 units x 2 caches = 72 rows"},
		{[]string{"validate", "BIG"}, 2, "more than 1048576 bytes (MaxSweepBytes)"},
		{[]string{"apps"}, 0, "9.3 MiB"},
		{[]string{"-h"}, 0, "Flags of merge"},
		{[]string{"run", "-h"}, 0, "-shard k/N"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		args := slices.Clone(tc.args)
		for i, a := range args {
			switch a {
			case "OUT":
				args[i] = out
			case "BIG": // a sweep file of 1 TiB, sparse
				args[i] = filepath.Join(t.TempDir(), "big.yaml")
				if err := os.WriteFile(args[i], nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(args[i], 1<<40); err != nil {
					t.Skipf("a sparse file: %v", err)
				}
			}
		}
		var stdout, stderr bytes.Buffer
		code := run(args, noEnv, &stdout, &stderr)
		got := stdout.String() + stderr.String()
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", tc.args, code, got, tc.code, tc.want)
		}
		if tc.code != 0 {
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%v: wrote %s before failing", tc.args, out)
			}
		}
	}
}
