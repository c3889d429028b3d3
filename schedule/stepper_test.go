package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"rnnserve/rnn"
)

// TestStepperMatchesPlan joins sequences of different lengths at different
// times, extends some mid-way (as generation does), and checks every
// sequence's outputs against a Plan run of that sequence alone.
func TestStepperMatchesPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for i, cfg := range []rnn.Config{
		{Cell: rnn.LSTM, Input: 5, Hidden: 7, Layers: 3, HeadOut: 4, Activation: rnn.ActLogSoftmax},
		{Cell: rnn.GRU, Input: 6, Hidden: 5, Layers: 2, Vocab: 11, HeadOut: 11, Activation: rnn.ActSoftmax},
		{Cell: rnn.LSTM, Input: 4, Hidden: 9, Proj: 3, Layers: 2, Vocab: 13, HeadOut: 13},
		{Cell: rnn.GRU, Input: 3, Hidden: 4, Layers: 1},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			net := randomNet(t, cfg, uint64(i))
			st, err := NewStepper(net, 4)
			if err != nil {
				t.Fatal(err)
			}
			type job struct {
				q      *Sequence
				in     Input // the whole input, B = 1
				join   int   // step at which it joins
				extend int   // steps appended when its first part runs out
				added  bool
				done   bool
			}
			var jobs []*job
			for j := 0; j < 7; j++ {
				T := 1 + r.IntN(8)
				in := randomInput(net, T, 1, j%2 == 0, r)
				jb := &job{in: in, join: r.IntN(6), q: &Sequence{Head: HeadAll, Outputs: true, H0: in.H0, C0: in.C0}}
				if j%3 == 1 && T > 1 {
					jb.extend = 1 + r.IntN(T-1)
				}
				first := T - jb.extend
				if net.Vocab > 0 {
					jb.q.Tokens = in.Tokens[:first]
				} else {
					jb.q.Features = in.Features[:first*net.Input]
				}
				jobs = append(jobs, jb)
			}
			for tick := 0; tick < 100; tick++ {
				for _, jb := range jobs {
					if jb.join <= tick && !jb.added && st.Active() < st.Capacity() {
						if err := st.Add(jb.q); err != nil {
							t.Fatal(err)
						}
						jb.added = true
					}
				}
				for _, q := range st.Step() {
					for _, jb := range jobs {
						if jb.q != q {
							continue
						}
						if jb.extend > 0 {
							T := jb.in.T
							var err error
							if net.Vocab > 0 {
								err = st.Extend(q, jb.in.Tokens[T-jb.extend:], nil)
							} else {
								err = st.Extend(q, nil, jb.in.Features[(T-jb.extend)*net.Input:])
							}
							if err != nil {
								t.Fatal(err)
							}
							jb.extend = 0
						} else {
							st.Remove(q)
							jb.done = true
						}
					}
				}
			}
			for j, jb := range jobs {
				if !jb.done {
					t.Fatalf("job %d never finished", j)
				}
				want := run(t, net, APlus, jb.in)
				for _, c := range []struct {
					name      string
					got, want []float32
				}{{"output", jb.q.Output, want.Output}, {"h_n", jb.q.HN, want.HN}, {"c_n", jb.q.CN, want.CN}, {"head", jb.q.HeadOut, want.Head}} {
					if cfg.HeadOut == 0 && c.name == "head" {
						continue
					}
					if err := closeTo(c.got, c.want, 1e-5); err != nil {
						t.Errorf("job %d %s: %v", j, c.name, err)
					}
				}
			}
		})
	}
}

func TestStepperErrors(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 2, Hidden: 3, Layers: 1, Vocab: 5}, 1)
	st, _ := NewStepper(net, 1)
	for _, q := range []*Sequence{
		{Tokens: []int64{7}},
		{Tokens: []int64{}},
		{Features: []float32{1, 2}},
		{Tokens: []int64{1}, H0: []float32{1}},
	} {
		if err := st.Add(q); !errors.Is(err, ErrInput) {
			t.Errorf("Add(%+v) = %v, want ErrInput", q, err)
		}
	}
	if st.Active() != 0 {
		t.Fatalf("failed Adds left %d rows", st.Active())
	}
	if err := st.Add(&Sequence{Tokens: []int64{1}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Add(&Sequence{Tokens: []int64{1}}); !errors.Is(err, ErrStepper) {
		t.Errorf("Add to a full stepper: %v", err)
	}
	bi := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 2, Hidden: 3, Layers: 1, Bidirectional: true}, 1)
	if _, err := NewStepper(bi, 2); !errors.Is(err, ErrStepper) {
		t.Errorf("bidirectional: %v", err)
	}
}

// TestTraceStepper checks that a traced cellular run reads W_hh of every
// layer at every step and, for layer 0's input, one row of the token table
// per token with float32 weights, or W_ih once (on arrival) and one
// embedding row per token where there is no table (int8 weights); and
// that the trace cannot be run.
func TestTraceStepper(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Layers: 2, Vocab: 9, HeadOut: 9}, 1)
	const T = 6
	for _, tc := range []struct {
		prec Precision
		want map[string]int
	}{
		{F32, map[string]int{"l0.weight_hh": T, "l1.weight_hh": T, "l1.weight_ih": T, "head.weight": T, "l0.xtab": T, "l0.weight_ih": 0, "embedding": 0}},
		{Int8, map[string]int{"l0.weight_hh": T, "l1.weight_hh": T, "l1.weight_ih": T, "head.weight": T, "l0.xtab": 0, "l0.weight_ih": 1, "embedding": 1}},
	} {
		p, err := TraceStepper(net, &Sequence{Tokens: make([]int64, T), Head: HeadAll}, tc.prec)
		if err != nil {
			t.Fatal(err)
		}
		// Steps that read each weight, not regions: how many regions a
		// product declares for one read of its W depends on the kernel
		// (AVX2's int8 product reads a packed W in more pieces than
		// VNNI's).
		reads, embRows := map[string]int{}, 0
		for i := range p.Steps {
			seen := map[string]bool{}
			p.Steps[i].op.regions(func(r Region, w bool) {
				if !w && r.Buf.Name == "embedding" {
					embRows++
				}
				if !w && r.Buf.Kind == KindWeight && !seen[r.Buf.Name] {
					seen[r.Buf.Name] = true
					reads[r.Buf.Name]++
				}
			})
		}
		for name, want := range tc.want {
			if reads[name] != want {
				t.Errorf("%v: %s read by %d steps, want %d (all: %v)", tc.prec, name, reads[name], want, reads)
			}
		}
		// Without the table the arrival step gathers one embedding row per
		// token.
		if want := T * tc.want["embedding"]; embRows != want {
			t.Errorf("%v: %d embedding rows read, want %d", tc.prec, embRows, want)
		}
		if p.Buffers[0].Kind != KindWeight || p.Schedule != Cellular || p.T != T {
			t.Errorf("plan: first buffer %v, schedule %v, T %d", p.Buffers[0].Kind, p.Schedule, p.T)
		}
		if _, err := p.Run(); !errors.Is(err, ErrDryPlan) {
			t.Errorf("Run of a trace: %v", err)
		}
	}
}

// TestStepperFreshRows checks the recurrent products' skip of fresh rows
// (Stepper.liveRows): rows that join a batch at their first step with no
// initial state are left out of h·W_hhᵀ while they are the batch's last
// rows, and every sequence's results equal, bit for bit, those of a
// traced stepper fed the same way, which runs every product over every row.
func TestStepperFreshRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 17))
	for i, cfg := range []rnn.Config{
		{Cell: rnn.LSTM, Input: 8, Hidden: 16, Layers: 2, Vocab: 11, HeadOut: 11},
		{Cell: rnn.LSTM, Input: 5, Hidden: 9, Proj: 3, Layers: 2},
		{Cell: rnn.RNNTanh, Input: 6, Hidden: 8, Layers: 2},
		{Cell: rnn.GRU, Input: 6, Hidden: 8, Layers: 2},
	} {
		for _, prec := range []Precision{F32, Int8} {
			t.Run(fmt.Sprintf("%d/%v", i, prec), func(t *testing.T) {
				net := randomNet(t, cfg, uint64(i)+40)
				// Joins, in order: three fresh rows, one with an initial
				// state (not fresh), two fresh rows behind it, one fresh
				// row once the others have run a step.
				var ins []Input
				for j := range 7 {
					ins = append(ins, randomInput(net, 3+j%3, 1, j == 3, r))
				}
				joins := [][]int{{0, 1, 2, 3, 4, 5}, {6}}
				var live []int // rows of the recurrent products, each step
				serve := func(traced bool) []*Sequence {
					st, err := NewStepperPrecision(net, len(ins), prec)
					if err != nil {
						t.Fatal(err)
					}
					st.tracing = traced
					seqs := make([]*Sequence, len(ins))
					for tick := 0; st.Active() > 0 || tick < len(joins); tick++ {
						if tick < len(joins) {
							for _, j := range joins[tick] {
								in := ins[j]
								seqs[j] = &Sequence{Tokens: in.Tokens, Features: in.Features, H0: in.H0, C0: in.C0, Head: HeadLast, Outputs: true}
								if err := st.Add(seqs[j]); err != nil {
									t.Fatal(err)
								}
							}
						}
						done := st.Step()
						if !traced {
							live = append(live, st.liveProductRows())
						}
						for _, q := range done {
							st.Remove(q)
						}
					}
					return seqs
				}
				got, want := serve(false), serve(true)
				for j := range ins {
					g, w := got[j], want[j]
					if !slices.Equal(g.Output, w.Output) || !slices.Equal(g.HN, w.HN) || !slices.Equal(g.CN, w.CN) || !slices.Equal(g.HeadOut, w.HeadOut) {
						t.Errorf("sequence %d: results differ from every product over every row", j)
					}
				}
				// The first step's batch is rows 0-5, row 3 with a state:
				// the products run over rows 0-3. The second adds row 6,
				// fresh, behind rows that have run: they run over 0-5.
				// A GRU's product overwrites and runs over every row.
				wantLive := []int{4, 6}
				if cfg.Cell == rnn.GRU {
					wantLive = []int{6, 7}
				}
				if !slices.Equal(live[:2], wantLive) {
					t.Errorf("rows of the recurrent products at the first two steps: %v, want %v", live[:2], wantLive)
				}
			})
		}
	}
}

// liveProductRows is the rows of the last step's product over layer 0's h
// (its recurrent product), or 0 when it had none.
func (s *Stepper) liveProductRows() int {
	for _, st := range s.steps {
		switch o := st.op.(type) {
		case *gemmOp:
			if o.a.Buf == s.h[0] {
				return o.c.Rows
			}
		case *gemmI8Op:
			if o.a.Buf == s.h[0] {
				return o.c.Rows
			}
		}
	}
	return 0
}

// TestStepperExtendHoldsAhead: a sequence extended a step at a time, as
// generation feeds its samples back, holds the input projections of the
// steps ahead of it, not of every step so far: after a prompt of 200
// steps and 300 more one at a time, its projections take a few rows,
// and its outputs are the whole input's.
func TestStepperExtendHoldsAhead(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 5, Hidden: 7, Layers: 2, HeadOut: 4}, 3)
	st, err := NewStepper(net, 2)
	if err != nil {
		t.Fatal(err)
	}
	const prompt, T = 200, 500
	in := randomInput(net, T, 1, false, rand.New(rand.NewPCG(3, 3)))
	I, R := net.Input, net.Layers[0][0].Rows()
	q := &Sequence{Head: HeadAll, Outputs: true, Features: in.Features[:prompt*I]}
	if err := st.Add(q); err != nil {
		t.Fatal(err)
	}
	for next := prompt; ; {
		done := st.Step()
		if len(done) == 0 {
			continue
		}
		if next == T {
			st.Remove(q)
			break
		}
		if err := st.Extend(q, nil, in.Features[next*I:(next+1)*I]); err != nil {
			t.Fatal(err)
		}
		next++
		if held := cap(q.xp.F32) / R; next > prompt+1 && held > 4 {
			t.Fatalf("at step %d the sequence holds %d steps' projections", next, held)
		}
	}
	want := run(t, net, APlus, in)
	if err := closeTo(q.Output, want.Output, 1e-5); err != nil {
		t.Errorf("output: %v", err)
	}
	if err := closeTo(q.HeadOut, want.Head, 1e-5); err != nil {
		t.Errorf("head: %v", err)
	}
}
