package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"rnnserve/rnn"
)

// stepAll runs sequences of tokens through st, all joined at once, and
// returns every head row in order.
func stepAll(t *testing.T, st *Stepper, seqs [][]int64) [][]float32 {
	t.Helper()
	qs := make([]*Sequence, len(seqs))
	for i, tok := range seqs {
		qs[i] = &Sequence{Tokens: tok, Head: HeadAll}
		if err := st.Add(qs[i]); err != nil {
			t.Error(err)
			return nil
		}
	}
	for left := len(qs); left > 0; {
		for _, q := range st.Step() {
			if !q.Pending() {
				st.Remove(q)
				left--
			}
		}
	}
	out := make([][]float32, len(qs))
	for i, q := range qs {
		out[i] = q.HeadOut
	}
	return out
}

// TestStepperSibling: a Sibling reads its source's weight buffers (the
// token table with float32 weights, the int8 packings, the summed
// biases), steps on its own goroutine beside the source (run with -race),
// gives what a Stepper of its own gives bit for bit, and still does after
// the source is dropped.
func TestStepperSibling(t *testing.T) {
	for _, prec := range []Precision{F32, Int8} {
		t.Run(fmt.Sprint(prec), func(t *testing.T) {
			net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 8, Hidden: 24, Layers: 2, Vocab: 30, HeadOut: 30, Activation: rnn.ActLogSoftmax}, 4)
			r := rand.New(rand.NewPCG(4, 4))
			seqs := make([][]int64, 3)
			for i := range seqs {
				for range 2 + r.IntN(6) {
					seqs[i] = append(seqs[i], int64(r.IntN(30)))
				}
			}
			own, err := NewStepperPrecision(net, 4, prec)
			if err != nil {
				t.Fatal(err)
			}
			want := stepAll(t, own, seqs)
			lead, err := NewStepperPrecision(net, 4, prec)
			if err != nil {
				t.Fatal(err)
			}
			sib, err := lead.Sibling(3)
			if err != nil {
				t.Fatal(err)
			}
			if (prec == F32) != (lead.xtab != nil) || sib.xtab != lead.xtab {
				t.Errorf("token table %p, the source's %p", sib.xtab, lead.xtab)
			}
			if len(sib.weights) != len(lead.weights) {
				t.Errorf("%d weight buffers, the source %d", len(sib.weights), len(lead.weights))
			}
			for k, b := range lead.weights {
				if sib.weights[k] != b {
					t.Errorf("%s is not the source's buffer", b.Name)
				}
			}
			for k := range lead.bias {
				if sib.bias[k] != lead.bias[k] {
					t.Errorf("layer %d's bias is not the source's buffer", k)
				}
			}
			if sib.Capacity() != 3 || sib.Precision() != prec {
				t.Errorf("sibling of %d rows at %v, want 3 at %v", sib.Capacity(), sib.Precision(), prec)
			}
			got := make([][][]float32, 2)
			var wg sync.WaitGroup
			for i, st := range []*Stepper{lead, sib} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i] = stepAll(t, st, seqs)
				}()
			}
			wg.Wait()
			lead = nil
			runtime.GC()
			runtime.GC()
			got = append(got, stepAll(t, sib, seqs))
			for i, g := range got {
				for j := range g {
					if len(g[j]) != len(want[j]) {
						t.Fatalf("run %d, sequence %d: %d head values, want %d", i, j, len(g[j]), len(want[j]))
					}
					for k := range g[j] {
						if math.Float32bits(g[j][k]) != math.Float32bits(want[j][k]) {
							t.Fatalf("run %d, sequence %d: head %d is %v, want %v", i, j, k, g[j][k], want[j][k])
						}
					}
				}
			}
		})
	}
}

// TestStepperTrace: Trace runs over its stepper's weight buffers (a
// Sibling's) and traces the steps TraceStepper's fresh stepper does.
func TestStepperTrace(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Layers: 2, Vocab: 9, HeadOut: 9}, 1)
	for _, prec := range []Precision{F32, Int8} {
		lead, err := NewStepperPrecision(net, 4, prec)
		if err != nil {
			t.Fatal(err)
		}
		own := map[*Buffer]bool{}
		for _, b := range lead.Weights() {
			own[b] = true
		}
		got, err := lead.Trace(&Sequence{Tokens: make([]int64, 5), Head: HeadAll})
		if err != nil {
			t.Fatal(err)
		}
		want, err := TraceStepper(net, &Sequence{Tokens: make([]int64, 5), Head: HeadAll}, prec)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Steps) != len(want.Steps) || len(got.Buffers) != len(want.Buffers) {
			t.Errorf("%v: %d steps over %d buffers, a fresh stepper's trace %d over %d", prec, len(got.Steps), len(got.Buffers), len(want.Steps), len(want.Buffers))
		}
		made := 0
		for _, b := range got.Buffers {
			if b.Name == "l0.xtab" || b.U8 != nil {
				made++
			}
			if b.Kind == KindWeight && (b.Name == "l0.xtab" || b.U8 != nil) && !own[b] {
				t.Errorf("%v: %s is a buffer of the trace's own", prec, b.Name)
			}
		}
		if made == 0 {
			t.Errorf("%v: the trace reads no token table or int8 packing", prec)
		}
	}
}
