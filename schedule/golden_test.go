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

// TestStepperGolden serves the rows of every unidirectional golden case
// together through a Stepper (cellular batching), each row a sequence of
// its own length with its own initial state, and compares each row's
// per-step output and head and its final states with PyTorch's within
// 1e-5.
func TestStepperGolden(t *testing.T) {
	for _, g := range goldens(t) {
		n := g.net
		if !n.Unidirectional() {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			T, B := g.in.T, g.in.B
			st, err := NewStepper(n, B)
			if err != nil {
				t.Fatal(err)
			}
			st.checked = true
			seqs := make([]*Sequence, B)
			for b := range B {
				L := T
				if g.in.Lengths != nil {
					L = g.in.Lengths[b]
				}
				q := &Sequence{Head: HeadAll, Outputs: true}
				for tt := range L {
					if n.Vocab > 0 {
						q.Tokens = append(q.Tokens, g.in.Tokens[tt*B+b])
					} else {
						q.Features = append(q.Features, g.in.Features[(tt*B+b)*n.Input:(tt*B+b+1)*n.Input]...)
					}
				}
				// Row b of each layer's [B][Out] block of h0 and c0.
				for k := range n.Layers {
					if g.in.H0 != nil {
						O := n.Layers[k][0].Out()
						off := n.StateOffset(k, 0, B) + b*O
						q.H0 = append(q.H0, g.in.H0[off:off+O]...)
					}
					if g.in.C0 != nil && n.Layers[k][0].Cell == rnn.LSTM {
						H := n.Layers[k][0].Hidden
						off := n.CellOffset(k, 0, B) + b*H
						q.C0 = append(q.C0, g.in.C0[off:off+H]...)
					}
				}
				if err := st.Add(q); err != nil {
					t.Fatal(err)
				}
				seqs[b] = q
			}
			for st.Active() > 0 {
				for _, q := range st.Step() {
					st.Remove(q)
				}
			}
			W, V := n.OutputWidth(), n.HeadOut
			for b, q := range seqs {
				var out, head, hn, cn []float32
				for tt := range q.Steps() {
					out = append(out, g.want.Output[(tt*B+b)*W:(tt*B+b+1)*W]...)
					if V > 0 {
						head = append(head, g.want.Head[(tt*B+b)*V:(tt*B+b+1)*V]...)
					}
				}
				for k, dirs := range n.Layers {
					O, H := dirs[0].Out(), dirs[0].Hidden
					off := n.StateOffset(k, 0, B) + b*O
					hn = append(hn, g.want.HN[off:off+O]...)
					if dirs[0].Cell == rnn.LSTM {
						off := n.CellOffset(k, 0, B) + b*H
						cn = append(cn, g.want.CN[off:off+H]...)
					}
				}
				compareResults(t, Result{Output: q.Output, HN: q.HN, CN: q.CN, Head: q.HeadOut}, Result{Output: out, HN: hn, CN: cn, Head: head}, 1e-5)
			}
		})
	}
}
