package schedule

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"rnnserve/models"
	"rnnserve/models/safetensors"
	"rnnserve/rnn"
)

// golden is one case of testdata/golden: a network, its input and
// PyTorch's outputs.
type golden struct {
	name string
	net  *rnn.Network
	in   Input
	want Result
}

// goldens loads every case of testdata/golden (written by
// scripts/torch_golden.py with PyTorch).
func goldens(t *testing.T) []golden {
	t.Helper()
	specs, err := filepath.Glob("testdata/golden/*/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) < 10 {
		t.Fatalf("found %d golden cases, want at least 10: regenerate with /usr/bin/python3 scripts/torch_golden.py", len(specs))
	}
	if _, err := os.Stat("testdata/golden/README.md"); err != nil {
		t.Errorf("golden README: %v", err)
	}
	var gs []golden
	for _, spec := range specs {
		dir := filepath.Dir(spec)
		m, err := models.Load(spec)
		if err != nil {
			t.Fatal(err)
		}
		io, err := safetensors.ReadFile(filepath.Join(dir, "io.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		f32 := func(name string) []float32 {
			tn, ok := io.Tensor(name)
			if !ok {
				return nil
			}
			v, err := tn.Float32s()
			if err != nil {
				t.Fatalf("%s: %s: %v", dir, name, err)
			}
			return v
		}
		g := golden{name: filepath.Base(dir), net: m.Net}
		if tn, ok := io.Tensor("tokens"); ok {
			g.in.T, g.in.B = tn.Shape[0], tn.Shape[1]
			if g.in.Tokens, err = tn.Int64s(); err != nil {
				t.Fatal(err)
			}
		} else if tn, ok := io.Tensor("features"); ok {
			g.in.T, g.in.B = tn.Shape[0], tn.Shape[1]
			g.in.Features = f32("features")
		} else {
			t.Fatalf("%s: io.safetensors has neither tokens nor features", dir)
		}
		g.in.H0, g.in.C0 = f32("h0"), f32("c0")
		if tn, ok := io.Tensor("lengths"); ok {
			ls, err := tn.Int64s()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				g.in.Lengths = append(g.in.Lengths, int(l))
			}
		}
		g.want = Result{Output: f32("output"), HN: f32("h_n"), CN: f32("c_n"), Head: f32("head")}
		gs = append(gs, g)
	}
	return gs
}

// TestGolden runs every golden case under every float32 schedule (A, A+,
// P on one worker and on two) and compares every output with PyTorch's
// within 1e-5 relative to max(1, |want|). The _packed cases give rows of
// different lengths, as pack_padded_sequence does.
func TestGolden(t *testing.T) {
	var pool *Pool
	if runtime.GOMAXPROCS(0) >= 2 {
		pool = testPool(t, 2)
	}
	for _, g := range goldens(t) {
		for _, s := range sequenceSchedules(pool) {
			if s.prog == nil || s.tol > 1e-5 {
				continue // dry only, or bf16 weights (TestPartitionedGolden)
			}
			t.Run(g.name+"/"+s.name, func(t *testing.T) {
				prog, err := s.prog(g.net)
				if err != nil {
					t.Fatal(err)
				}
				compareResults(t, runProgram(t, prog, g.in), g.want, 1e-5)
			})
		}
	}
}
