package models_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"rnnserve/models"
	"rnnserve/models/safetensors"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// TestUserGoldens opens the weights file of every folder of
// testdata/golden (written by scripts/torch_golden.py: one weights file as
// a PyTorch user has it, no spec), checks the inferred spec against the one PyTorch's side knows
// (expect.yaml), and runs the model under every schedule (userSchedules:
// A, A+, P on one and two workers, P with bf16 weights), comparing every
// output with PyTorch's within 1e-5 relative to max(1, |want|), as
// schedule's goldens do (bf16 weights within 5e-2). F16, BF16 and F64 weights are compared with a
// reference computed in float32 from the same rounded values, so the
// tolerance does not widen.
func TestUserGoldens(t *testing.T) {
	dirs, err := filepath.Glob("testdata/golden/*/expect.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d user golden cases, want 10: regenerate with /usr/bin/python3 scripts/torch_golden.py", len(dirs))
	}
	var pool *schedule.Pool
	if runtime.GOMAXPROCS(0) >= 2 {
		if pool, err = schedule.NewPool(schedule.PoolOptions{Workers: 2}); err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
	} else {
		t.Log("GOMAXPROCS < 2: P on two workers not run")
	}
	for _, expect := range dirs {
		dir := filepath.Dir(expect)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m := openGolden(t, weightsFile(t, dir), expect)
			if !m.Source.Inferred {
				t.Error("Source.Inferred is false for a folder without a spec")
			}
			checkSpec(t, m, expect)
			io, err := safetensors.ReadFile(filepath.Join(dir, "io.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			in, want := goldenIO(t, io)
			for _, s := range userSchedules(pool) {
				prog, err := s.prog(m.Net)
				if err != nil {
					t.Fatal(err)
				}
				plan, err := prog.Plan(in, schedule.PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				res, err := plan.Run()
				if err != nil {
					t.Fatal(err)
				}
				for name, got := range map[string][]float32{"output": res.Output, "h_n": res.HN, "c_n": res.CN, "head": res.Head} {
					w, ok := want[name]
					if !ok {
						continue
					}
					if err := closeTo(got, w, s.tol); err != nil {
						t.Errorf("%s %s vs PyTorch: %v", s.name, name, err)
					}
				}
			}
		})
	}
}

// openGolden opens a golden weights file as the operator would: alone,
// or with what expect.yaml states and no state_dict records (what
// -head-input and -nonlinearity pass): where the head reads, and an
// nn.RNN's nonlinearity. Opening it alone must be refused, with the line
// that settles it, over a bidirectional head or any nn.RNN; a head over
// one direction must load reading every step, and its last row must be
// what the stated head input gives (the meanings agree there).
func openGolden(t *testing.T, file, expect string) *models.Model {
	t.Helper()
	data, err := os.ReadFile(expect)
	if err != nil {
		t.Fatal(err)
	}
	want, err := models.ParseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	var opt models.OpenOptions
	var lines []string // what the refusal of the file alone must say to add
	mods := want.Modules()
	for _, m := range mods {
		if nl, ok := strings.CutPrefix(m.Cell, "rnn_"); ok {
			opt.Nonlinearity = nl
			lines = append(lines, `write "cell: rnn_tanh"`)
		}
	}
	if want.Head != nil {
		opt.HeadInput = want.Head.Input
		if opt.HeadInput != "" && mods[len(mods)-1].Bidirectional {
			lines = append(lines, `add "input: h_n"`)
		}
	}
	alone, err := models.Open(file)
	if strings.HasSuffix(file, ".onnx") {
		// The graph shows where the head reads.
		if err != nil {
			t.Fatal(err)
		}
		return alone
	}
	if opt == (models.OpenOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		return alone
	}
	if len(lines) > 0 {
		var amb *models.AmbiguousError
		if !errors.As(err, &amb) || !errors.Is(err, models.ErrAmbiguous) || !amb.Source.Inferred || amb.Spec == nil {
			t.Fatalf("opened alone: %v, want an *AmbiguousError", err)
		}
		for _, l := range lines {
			if !strings.Contains(err.Error(), l) {
				t.Errorf("opened alone: %v, want it to say %q", err, l)
			}
		}
	} else if err != nil {
		t.Fatalf("opened alone: %v", err)
	} else if alone.Net.HeadInput != rnn.HeadEveryStep {
		t.Errorf("opened alone: head input %v, want every_step", alone.Net.HeadInput)
	}
	m, err := models.OpenWith(file, opt)
	if err != nil {
		t.Fatal(err)
	}
	if alone != nil {
		// One direction: every_step's last row is the head on h_n.
		io, err := safetensors.ReadFile(filepath.Join(filepath.Dir(expect), "io.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		in, _ := goldenIO(t, io)
		every, one := runA(t, alone.Net, in), runA(t, m.Net, in)
		last := every[(in.T-1)*in.B*alone.Net.HeadOut:]
		if err := closeTo(last, one, 1e-6); err != nil {
			t.Errorf("every_step's last row against %s: %v", opt.HeadInput, err)
		}
	}
	return m
}

// runA runs net on in under Schedule A+ and returns the head.
func runA(t *testing.T, net *rnn.Network, in schedule.Input) []float32 {
	t.Helper()
	prog, err := schedule.NewProgram(net, schedule.APlus)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := prog.Plan(in, schedule.PlanOptions{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res.Head
}

// userSchedule is a schedule the user goldens run under, with its
// tolerance against PyTorch relative to max(1, |want|).
type userSchedule struct {
	name string
	tol  float64
	prog func(*rnn.Network) (*schedule.Program, error)
}

// userSchedules are every schedule a served model may run: A, A+, P on
// one worker and on two (when the pool is there), and P with bf16
// weights (a relative weight error of 2^-9 compounded through the steps,
// as schedule's TestPartitionedGolden allows).
func userSchedules(pool *schedule.Pool) []userSchedule {
	ss := []userSchedule{
		{"A", 1e-5, func(n *rnn.Network) (*schedule.Program, error) { return schedule.NewProgram(n, schedule.A) }},
		{"A+", 1e-5, func(n *rnn.Network) (*schedule.Program, error) { return schedule.NewProgram(n, schedule.APlus) }},
		{"P1", 1e-5, func(n *rnn.Network) (*schedule.Program, error) {
			return schedule.NewPartitioned(n, schedule.PartitionOptions{Workers: 1})
		}},
		{"P1-bf16", 5e-2, func(n *rnn.Network) (*schedule.Program, error) {
			return schedule.NewPartitioned(n, schedule.PartitionOptions{Workers: 1, Precision: schedule.BF16})
		}},
	}
	if pool != nil {
		ss = append(ss, userSchedule{"P2", 1e-5, func(n *rnn.Network) (*schedule.Program, error) {
			return schedule.NewPartitioned(n, schedule.PartitionOptions{Pool: pool})
		}})
	}
	return ss
}

// weightsFile is the one file of a golden folder that is not expect.yaml
// or io.safetensors (TestOpenFolder opens a folder holding only it).
func weightsFile(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		if n := e.Name(); n != "expect.yaml" && n != "io.safetensors" {
			found = append(found, filepath.Join(dir, n))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: weights files %q, want one", dir, found)
	}
	return found[0]
}

// checkSpec compares the inferred spec with expect.yaml, and checks that
// FormatSpec renders a spec that reads back the same.
func checkSpec(t *testing.T, m *models.Model, expect string) {
	t.Helper()
	data, err := os.ReadFile(expect)
	if err != nil {
		t.Fatal(err)
	}
	want, err := models.ParseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	got := *m.Spec
	got.Weights = ""
	if !reflect.DeepEqual(&got, want) {
		gy, _ := models.FormatSpec(&models.Model{Spec: &got})
		t.Errorf("inferred spec:\n%s\nwant:\n%s", gy, data)
	}
	text, err := models.FormatSpec(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := models.ParseSpec(text)
	if err != nil {
		t.Fatalf("FormatSpec output does not parse: %v\n%s", err, text)
	}
	if !reflect.DeepEqual(back, m.Spec) {
		t.Errorf("FormatSpec round trip:\n%s\ngives %+v, want %+v", text, back, m.Spec)
	}
}

// goldenIO reads the inputs and PyTorch's outputs of a case.
func goldenIO(t *testing.T, io *safetensors.File) (schedule.Input, map[string][]float32) {
	t.Helper()
	var in schedule.Input
	want := map[string][]float32{}
	for _, name := range io.Names() {
		tn, _ := io.Tensor(name)
		switch {
		case strings.HasPrefix(name, "graph."):
			// An ONNX graph's own inputs and outputs, for the server's test.
		case name == "tokens":
			in.T, in.B = tn.Shape[0], tn.Shape[1]
			v, err := tn.Int64s()
			if err != nil {
				t.Fatal(err)
			}
			in.Tokens = v
		default:
			v, err := tn.Float32s()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if name == "features" {
				in.T, in.B, in.Features = tn.Shape[0], tn.Shape[1], v
			} else {
				want[name] = v
			}
		}
	}
	if in.T == 0 {
		t.Fatal("io.safetensors has neither tokens nor features")
	}
	return in, want
}

func closeTo(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return fmt.Errorf("element %d: got %v, want %v (diff %.3g)", i, g, w, math.Abs(g-w))
		}
	}
	return nil
}
