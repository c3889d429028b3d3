package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

const validSweep = `
runs: 3
caches:
  - {name: small, size: 4KiB}
grid:
  cells: [lstm]
  hidden: [8]
  layers: [1]
  input_lengths: [2]
  vocab: [5]
`

// TestParseSweepErrors checks that every invalid sweep file is refused
// with an error that names the key and the value at fault.
func TestParseSweepErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the message
	}{
		{"unknown top-level key", validSweep + "runz: 4\n", []string{"runz", "unknown key", "known here: name, runs"}},
		{"unknown cache key", strings.Replace(validSweep, "size: 4KiB", "size: 4KiB, assoc: 4", 1), []string{"caches[0].assoc", "unknown key", "ways"}},
		{"unknown grid key", validSweep + "  hiden: [3]\n", []string{"grid.hiden", "unknown key"}},
		{"unknown plots key", validSweep + "plots: {cache: small}\n", []string{"plots.cache", "unknown key"}},
		{"cache smaller than a line", strings.Replace(validSweep, "4KiB", "32", 1), []string{"caches[0].size = 32B", "smaller than one line"}},
		{"cache not whole lines", strings.Replace(validSweep, "4KiB", "100", 1), []string{"caches[0].size = 100B", "whole number"}},
		{"line not a power of two", strings.Replace(validSweep, "4KiB}", "4KiB, line_size: 48}", 1), []string{"caches[0].line_size = 48", "power of two"}},
		{"ways do not divide", strings.Replace(validSweep, "4KiB}", "4KiB, ways: 3}", 1), []string{"caches[0].ways = 3", "does not divide the 64 lines"}},
		{"more ways than lines", strings.Replace(validSweep, "4KiB}", "4KiB, ways: 128}", 1), []string{"caches[0].ways = 128", "more ways"}},
		{"negative ways", strings.Replace(validSweep, "4KiB}", "4KiB, ways: -2}", 1), []string{"caches[0].ways = -2"}},
		{"bad size unit", strings.Replace(validSweep, "4KiB", "4 parsecs", 1), []string{"unknown unit"}},
		{"zero layers", strings.Replace(validSweep, "layers: [1]", "layers: [0]", 1), []string{"grid.layers[0] = 0", "want 1..1024"}},
		{"empty hidden", strings.Replace(validSweep, "hidden: [8]", "hidden: []", 1), []string{"grid.hidden", "empty"}},
		{"repeated length", strings.Replace(validSweep, "input_lengths: [2]", "input_lengths: [2, 2]", 1), []string{"grid.input_lengths[1] = 2", "twice"}},
		{"bad cell", strings.Replace(validSweep, "[lstm]", "[lstm, rnn]", 1), []string{`grid.cells[1] = "rnn"`, "lstm, gru, rnn_tanh or rnn_relu"}},
		{"bad schedule", validSweep + "schedules: [A, B]\n", []string{`schedules[1] = "B"`, "A, A+, P, P-bf16 or P-int8"}},
		{"zero runs", strings.Replace(validSweep, "runs: 3", "runs: -1", 1), []string{"runs = -1"}},
		{"unknown app", validSweep + "apps: {names: [gnmt, bert], input_lengths: [3]}\n", []string{`apps.names[1] = "bert"`, "gnmt, deepspeech1, lm, lm-dre, bytener"}},
		{"no_head not in names", validSweep + "apps: {names: [lm], input_lengths: [3], no_head: [bytener]}\n", []string{`apps.no_head[0] = "bytener"`, "not in apps.names (lm)"}},
		{"no_head twice", validSweep + "apps: {names: [lm], input_lengths: [3], no_head: [lm, lm]}\n", []string{`apps.no_head[1] = "lm"`, "twice"}},
		{"no_head of a decoder", validSweep + "apps: {names: [gnmt], input_lengths: [3], no_head: [gnmt]}\n", []string{`apps.no_head[0] = "gnmt"`, "decoder"}},
		{"app without lengths", validSweep + "apps: {names: [lm]}\n", []string{"apps.input_lengths", "empty"}},
		{"nothing to do", "runs: 3\n", []string{"nothing to do"}},
		{"duplicate cache names", strings.Replace(validSweep, "  - {name: small, size: 4KiB}", "  - {name: small, size: 4KiB}\n  - {name: small, size: 8KiB}", 1), []string{`caches[1].name = "small"`}},
		{"plots name no cache", validSweep + "plots: {dre_cache: big}\n", []string{`plots.dre_cache = "big"`, "no cache"}},
		{"thresholds not increasing", validSweep + "plots: {thresholds: [2, 1]}\n", []string{"plots.thresholds[1] = 1"}},
		{"too many rows", hugeGrid(), []string{"rows, more than 10000000"}},
		{"type error", strings.Replace(validSweep, "runs: 3", "runs: many", 1), []string{"many"}},
		{"two documents", validSweep + "---\nruns: 2\n", []string{"more than one YAML document"}},
		{"empty", "", []string{"empty file"}},
		{"too large", validSweep + "#" + strings.Repeat("x", MaxSweepBytes-len(validSweep)) + "\n", []string{"more than 1048576 bytes (MaxSweepBytes)"}},
		{"not a mapping", "- 1\n- 2\n", []string{"cannot unmarshal"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSweep("x.yaml", []byte(tc.yaml))
			if !errors.Is(err, ErrSweep) {
				t.Fatalf("err = %v, want ErrSweep", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "dresim: x.yaml") {
				t.Errorf("%q does not name the file", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
		})
	}
}

// hugeGrid is a valid grid of 100 x 100 x 100 x 10 x 2 schedules = 20
// million rows.
func hugeGrid() string {
	list := func(n int) string {
		var v []string
		for i := 1; i <= n; i++ {
			v = append(v, strconv.Itoa(i))
		}
		return "[" + strings.Join(v, ", ") + "]"
	}
	return "grid: {cells: [lstm], hidden: " + list(100) + ", layers: " + list(100) +
		", input_lengths: " + list(100) + ", vocab: " + list(10) + "}\n"
}

func TestParseSweepDefaults(t *testing.T) {
	s, err := ParseSweep("dir/mine.yml", []byte(validSweep))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "mine" || s.Runs != 3 || s.Batch != 1 || s.Seed != 1 || len(s.Schedules) != 2 ||
		s.Caches[0].LineSize != 64 || s.Caches[0].Ways != -1 || s.Grid.Name != "table1" ||
		s.Grid.HeadActivation != "softmax" || s.Plots.DRECache != "small" || s.OPTMaxAccesses != defaultOPTMaxAccesses {
		t.Errorf("defaults not applied: %+v %+v %+v", s, s.Caches, s.Grid)
	}
	if s.Rows() != 2 || s.Units() != 2 {
		t.Errorf("Rows = %d, Units = %d, want 2, 2", s.Rows(), s.Units())
	}
	for in, want := range map[string]int64{"4096": 4096, "12MiB": 12 << 20, "25 MB": 25 << 20, "512kib": 512 << 10, "1GiB": 1 << 30, "64B": 64} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-5", "1.5MiB", "99999999999999999999", "9000000000000GiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	if got := Size(12 << 20).String(); got != "12MiB" {
		t.Errorf("Size.String = %q", got)
	}
}

// TestCheckedInSweeps parses every sweep of configs/sweeps and checks the
// sizes the docs quote.
func TestCheckedInSweeps(t *testing.T) {
	want := map[string]int64{"table1": 3840, "apps": 144, "paper": 3984, "vocab": 144, "lm": 24}
	files, err := filepath.Glob("../../configs/sweeps/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sweeps: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSweep(f, data)
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := want[s.Name]; ok && s.Rows() != w {
			t.Errorf("%s: %d rows, want %d", f, s.Rows(), w)
		}
		delete(want, s.Name)
	}
	if len(want) > 0 {
		t.Errorf("sweeps not found: %v", want)
	}
}

// TestShardPartition checks that for every N the shards hold every unit of
// the sweep exactly once, and that ParseShard refuses shards out of range.
func TestShardPartition(t *testing.T) {
	s := loadTestSweep(t, "tiny.yaml")
	units := s.units()
	if int64(len(units)) != s.Units() {
		t.Fatalf("units() = %d, Units() = %d", len(units), s.Units())
	}
	for i, u := range units {
		if u.Index != i {
			t.Fatalf("unit %d has index %d", i, u.Index)
		}
	}
	for n := 1; n <= 7; n++ {
		count := make([]int, len(units))
		for k := range n {
			sh, err := ParseShard(Shard{K: k, N: n}.String())
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range units {
				if sh.has(u.Index) {
					count[u.Index]++
				}
			}
		}
		for i, c := range count {
			if c != 1 {
				t.Fatalf("N = %d: unit %d is in %d shards", n, i, c)
			}
		}
	}
	for _, bad := range []string{"3/3", "-1/2", "1/0", "1", "a/b", "1/2/3", ""} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("ParseShard(%q) accepted", bad)
		}
	}
}

func loadTestSweep(t testing.TB, name string) *Sweep {
	t.Helper()
	path := filepath.Join("testdata", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSweep(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzParseSweep checks that no input makes the parser panic, and that an
// accepted sweep can be expanded into units and fingerprinted.
//
//	go test ./dre/sweep/ -run '^$' -fuzz FuzzParseSweep -fuzztime 30s
func FuzzParseSweep(f *testing.F) {
	f.Add([]byte(validSweep))
	for _, glob := range []string{"testdata/*.yaml", "../../configs/sweeps/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("caches: [{size: 1}]\n"))
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		s, err := ParseSweep("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrSweep) {
				t.Fatalf("error %v does not match ErrSweep", err)
			}
			return
		}
		if s.Units() <= 50_000 && int64(len(s.units())) != s.Units() {
			t.Fatalf("units() = %d, Units() = %d", len(s.units()), s.Units())
		}
		_ = s.Fingerprint()
	})
}
