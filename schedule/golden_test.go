package schedule

import (
	"os"
	"path/filepath"
	"testing"

	"rnnserve/models"
	"rnnserve/models/safetensors"
)

// TestGolden runs every model in testdata/golden (written by
// scripts/torch_golden.py with PyTorch) under both schedules and compares
// every output with PyTorch's within 1e-5 relative.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/golden/*/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d golden cases, want at least 10: regenerate with /usr/bin/python3 scripts/torch_golden.py", len(dirs))
	}
	for _, spec := range dirs {
		dir := filepath.Dir(spec)
		t.Run(filepath.Base(dir), func(t *testing.T) {
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
					t.Fatalf("%s: %v", name, err)
				}
				return v
			}
			var in Input
			if tn, ok := io.Tensor("tokens"); ok {
				in.T, in.B = tn.Shape[0], tn.Shape[1]
				if in.Tokens, err = tn.Int64s(); err != nil {
					t.Fatal(err)
				}
			} else if tn, ok := io.Tensor("features"); ok {
				in.T, in.B = tn.Shape[0], tn.Shape[1]
				in.Features = f32("features")
			} else {
				t.Fatal("io.safetensors has neither tokens nor features")
			}
			in.H0, in.C0 = f32("h0"), f32("c0")
			for _, s := range []Schedule{A, APlus} {
				res := run(t, m.Net, s, in)
				for _, c := range []struct {
					name string
					got  []float32
				}{{"output", res.Output}, {"h_n", res.HN}, {"c_n", res.CN}, {"head", res.Head}} {
					want := f32(c.name)
					if want == nil && c.got == nil {
						continue
					}
					if err := closeTo(c.got, want, 1e-5); err != nil {
						t.Errorf("%v %s vs PyTorch: %v", s, c.name, err)
					}
				}
			}
		})
	}
	if _, err := os.Stat("testdata/golden/README.md"); err != nil {
		t.Errorf("golden README: %v", err)
	}
}
