package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"rnnserve/rnn"
)

// lyingOp runs a real op but declares its regions wrongly: without the
// region numbered drop (reads and writes counted together), or with the
// last row of that region cut off (shrink).
type lyingOp struct {
	op
	drop   int
	shrink bool
}

func (o *lyingOp) regions(fn func(Region, bool)) {
	i := 0
	o.op.regions(func(r Region, w bool) {
		defer func() { i++ }()
		if i != o.drop {
			fn(r, w)
			return
		}
		if !o.shrink {
			return
		}
		switch {
		case r.Count > 1:
			r.Count--
		case r.Len > int64(r.Buf.ElemSize):
			r.Len -= int64(r.Buf.ElemSize)
		default:
			return
		}
		fn(r, w)
	})
}

// TestRegionCheckerCatchesPlantedRegions plants a wrong declaration in
// real plans of every schedule, one region of one step at a time, and
// requires the checker to fail on each, naming the step; the same plans
// unplanted pass.
func TestRegionCheckerCatchesPlantedRegions(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, cfg := range []rnn.Config{
		{Cell: rnn.LSTM, Input: 3, Hidden: 5, Proj: 2, Layers: 2, Vocab: 6, HeadOut: 6, Activation: rnn.ActLogSoftmax},
		{Cell: rnn.GRU, Input: 4, Hidden: 6, Layers: 1, Bidirectional: true, HeadOut: 3},
		// tanh, not relu: a relu unit's exact zeros make the weights
		// they multiply unread in value, which no checker can see.
		{Cell: rnn.RNNTanh, Input: 4, Hidden: 6, Layers: 1, Bidirectional: true, HeadOut: 3, HeadInput: rnn.HeadFinalState},
	} {
		net := randomNet(t, cfg, 1)
		in := randomInput(net, 3, 2, true, r)
		for _, s := range sequenceSchedules(nil) {
			if s.prog == nil {
				continue
			}
			prog, err := s.prog(net)
			if err != nil {
				t.Fatal(err)
			}
			build := func() *Plan {
				p, err := prog.Plan(in, PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			if err := build().RunChecked(); err != nil {
				t.Fatalf("%s %v: unplanted plan: %v", s.name, cfg.Cell, err)
			}
			planted := 0
			p := build()
			for i := range p.Steps {
				n := 0
				p.Steps[i].Regions(func(Region, bool) { n++ })
				for drop := range n {
					for _, shrink := range []bool{false, true} {
						q := build()
						honest := declared(&q.Steps[i])
						q.Steps[i].op = &lyingOp{op: q.Steps[i].op, drop: drop, shrink: shrink}
						if declared(&q.Steps[i]) == honest {
							continue // another region of the step declares the same bytes
						}
						err := q.RunChecked()
						var re *RegionError
						if !errors.As(err, &re) || !errors.Is(err, ErrRegion) {
							t.Fatalf("%s: step %d (%v) with region %d %s: checker returned %v",
								s.name, i, p.Steps[i].Kernel, drop, map[bool]string{false: "dropped", true: "shrunk"}[shrink], err)
						}
						if re.Step != i {
							t.Fatalf("%s: planted in step %d, reported step %d: %v", s.name, i, re.Step, err)
						}
						planted++
					}
				}
			}
			if planted < 50 {
				t.Errorf("%s: only %d plants", s.name, planted)
			}
		}
	}
}

// TestRegionCheckerKinds checks each kind of violation on a hand-built
// step: an undeclared write, a read of undeclared memory, and a declared
// write never made.
func TestRegionCheckerKinds(t *testing.T) {
	buf := func(name string, v ...float32) *Buffer {
		return &Buffer{Name: name, Kind: KindActivation, Elems: len(v), ElemSize: 4, F32: v}
	}
	a, b := buf("a", 1, 2, 3, 4), buf("b", 0, 0, 0, 0)
	for _, tc := range []struct {
		name string
		o    op
		how  string
	}{
		{"undeclared write", &lyingOp{op: newCopy(Dense(b, 0, 1, 4), Dense(a, 0, 1, 4)), drop: 1, shrink: true}, "written but not declared"},
		{"undeclared read", &lyingOp{op: newCopy(Dense(b, 0, 1, 4), Dense(a, 0, 1, 4)), drop: 0, shrink: true}, "depends on memory"},
		{"write never made", &overclaim{newCopy(Dense(b, 0, 1, 2), Dense(a, 0, 1, 2))}, "never written"},
	} {
		err := checkSteps([]Step{{Kernel: tc.o.kernel(), op: tc.o}}, 7, nil)
		var re *RegionError
		if !errors.As(err, &re) || re.Step != 7 || !contains(re.How, tc.how) {
			t.Errorf("%s: got %v, want a RegionError at step 7 saying %q", tc.name, err, tc.how)
		}
	}
	// A violation leaves the buffers as they were before the step.
	if a.F32[0] != 1 || a.F32[3] != 4 {
		t.Errorf("a = %v after the checks, want it unchanged", a.F32)
	}
	// A correct step passes and its writes are kept.
	if err := checkSteps([]Step{{Kernel: KCopy, op: newCopy(Dense(b, 0, 1, 4), Dense(a, 0, 1, 4))}}, 0, nil); err != nil {
		t.Fatal(err)
	}
	if b.F32[0] != 1 || b.F32[3] != 4 {
		t.Errorf("b = %v after a checked copy, want a's values", b.F32)
	}
}

// declared is the set of (buffer, byte, write) a step declares, as a string.
func declared(s *Step) string {
	set := map[[3]any]bool{}
	s.Regions(func(r Region, w bool) {
		for k := range r.Count {
			for b := range r.Len {
				set[[3]any{r.Buf, r.Off + int64(k)*r.Stride + b, w}] = true
			}
		}
	})
	return fmt.Sprint(len(set), set)
}

// overclaim declares its copy's destination twice as wide as it writes.
type overclaim struct{ *copyOp }

func (o *overclaim) regions(fn func(Region, bool)) {
	emit(fn, o.src, false)
	d := o.dst
	d.Cols *= 2
	emit(fn, d, true)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
