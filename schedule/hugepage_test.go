package schedule

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"rnnserve/internal/hugepage"
	"rnnserve/rnn"
)

// TestWeightsOnHugePages: under every schedule and the stepper, a weight
// matrix of 2 MiB or more is held on huge pages where the host maps them
// (a copy: not the network's slice), a smaller one and the embedding
// stay the network's own, and with mapping off (a host without huge
// pages) everything is on the heap; the results are the same bits either
// way.
func TestWeightsOnHugePages(t *testing.T) {
	// W_hh 3072×768 (9 MiB), W_ih 3072×16 (192 KiB), head 1024×768
	// (3 MiB): two matrices over the bound, one under.
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 768, Layers: 1, Vocab: 1024, HeadOut: 1024, Activation: rnn.ActLogSoftmax}, 3)
	in := randomInput(net, 3, 1, false, rand.New(rand.NewPCG(3, 3)))
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	thp := runtime.GOOS == "linux" && err == nil && !strings.Contains(string(mode), "[never]")
	results := map[bool]map[string][]float32{}
	for _, on := range []bool{true, false} {
		was := hugepage.Enable(on)
		// Earlier garbage (other tests', the last phase's) goes first,
		// so that only this phase's mappings come and go below.
		for last := int64(-1); hugepage.Mapped() != last; {
			last = hugepage.Mapped()
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
		var keep []any             // every program and stepper, live to the phase's end
		seen := map[uintptr]bool{} // mappings made in this phase
		whh := map[string]uintptr{}
		results[on] = map[string][]float32{}
		for _, c := range []struct {
			name string
			make func() ([]*Buffer, []float32, any)
		}{
			{"A", func() ([]*Buffer, []float32, any) { return runWeights(t, net, A, in) }},
			{"A+", func() ([]*Buffer, []float32, any) { return runWeights(t, net, APlus, in) }},
			{"P", func() ([]*Buffer, []float32, any) { return runWeights(t, net, Partitioned, in) }},
			{"stepper", func() ([]*Buffer, []float32, any) { return stepWeights(t, net, F32, in) }},
			{"another stepper", func() ([]*Buffer, []float32, any) { return stepWeights(t, net, F32, in) }},
			{"stepper int8", func() ([]*Buffer, []float32, any) { return stepWeights(t, net, Int8, in) }},
		} {
			before := hugepage.Mapped()
			bufs, out, k := c.make()
			keep = append(keep, k)
			var want int64
			for _, b := range bufs {
				data := bufferBytes(b)
				addr := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
				own := netSlice(net, b) // the network's slice this buffer was made from, if any
				if b.Name == "l0.weight_hh" && b.ElemSize == 4 {
					whh[c.name] = addr
				}
				switch {
				case len(data) >= hugepage.MinBytes && b.Name != "embedding" && on && thp:
					if !seen[addr] {
						want += int64(len(data)+4095) &^ 4095
					}
					seen[addr] = true
					if addr%hugepage.Size != 0 {
						t.Errorf("%s, mapping on: %s (%d bytes) at %#x, not a huge-page mapping", c.name, b.Name, len(data), addr)
					}
				case own != nil && b.ElemSize == 4 && !b.Packed && unsafe.SliceData(own) != unsafe.SliceData(b.F32):
					t.Errorf("%s, mapping %v: %s (%d bytes) is a copy, want the network's slice", c.name, on, b.Name, len(data))
				}
			}
			if got := hugepage.Mapped() - before; got != want {
				t.Errorf("%s, mapping %v: %d bytes mapped, want %d", c.name, on, got, want)
			}
			if on && thp && len(seen) == 0 {
				t.Errorf("%s: nothing on huge pages", c.name)
			}
			results[on][c.name] = out
		}
		// A+ and every float32 stepper read one copy of W_hh.
		if whh["A+"] == 0 || whh["stepper"] != whh["A+"] || whh["another stepper"] != whh["A+"] {
			t.Errorf("mapping %v: W_hh at %#x (A+), %#x and %#x (steppers): want one copy", on, whh["A+"], whh["stepper"], whh["another stepper"])
		}
		runtime.KeepAlive(keep)
		hugepage.Enable(was)
	}
	for name, got := range results[true] {
		want := results[false][name]
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %d results with mapping, %d without", name, len(got), len(want))
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: result %d is %v with mapping, %v without", name, i, got[i], want[i])
			}
		}
	}
}

// runWeights runs in under schedule s and returns the program's weight
// buffers, the outputs and head together, and the program.
func runWeights(t *testing.T, net *rnn.Network, s Schedule, in Input) ([]*Buffer, []float32, any) {
	t.Helper()
	var prog *Program
	var err error
	if s == Partitioned {
		prog, err = NewPartitioned(net, PartitionOptions{Workers: 1})
	} else {
		prog, err = NewProgram(net, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := prog.Plan(in, PlanOptions{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run()
	if err != nil {
		t.Fatal(err)
	}
	var bufs []*Buffer
	for _, b := range p.Buffers {
		if b.Kind == KindWeight {
			bufs = append(bufs, b)
		}
	}
	return bufs, append(append(append([]float32(nil), res.Output...), res.HN...), res.Head...), prog
}

// stepWeights runs in's one sequence on a stepper of precision prec and
// returns its weight buffers, the outputs and heads together, and the
// stepper.
func stepWeights(t *testing.T, net *rnn.Network, prec Precision, in Input) ([]*Buffer, []float32, any) {
	t.Helper()
	st, err := NewStepperPrecision(net, 1, prec)
	if err != nil {
		t.Fatal(err)
	}
	q := &Sequence{Tokens: in.Tokens, Head: HeadAll, Outputs: true}
	if err := st.Add(q); err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		for _, d := range st.Step() {
			done = done || d == q
		}
	}
	var bufs []*Buffer
	for _, b := range st.weights {
		bufs = append(bufs, b)
	}
	if st.xtab != nil {
		bufs = append(bufs, st.xtab)
	}
	return bufs, append(append(append([]float32(nil), q.Output...), q.HN...), q.HeadOut...), st
}

// bufferBytes is b's elements as bytes.
func bufferBytes(b *Buffer) []byte {
	switch {
	case b.F32 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.F32))), 4*len(b.F32))
	case b.U16 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.U16))), 2*len(b.U16))
	}
	return b.U8
}

// netSlice is the network's weight slice of the same name and length as
// b (a whole matrix, not a worker's rows), or nil.
func netSlice(net *rnn.Network, b *Buffer) []float32 {
	l := net.Layers[0][0]
	for name, s := range map[string][]float32{
		"embedding": net.Embedding, "l0.weight_ih": l.Wih, "l0.weight_hh": l.Whh, "head.weight": net.HeadW, "head.bias": net.HeadB,
	} {
		if strings.HasSuffix(b.Name, name) && len(s) == b.Elems {
			return s
		}
	}
	return nil
}

// TestWeightDataShares: one copy serves every buffer made from the same
// elements, and a changed slice (even a zero's sign) gets a new one.
func TestWeightDataShares(t *testing.T) {
	data := make([]float32, hugepage.MinBytes/4)
	var b [4]Buffer
	f0, f1 := weightData(&b[0], data), weightData(&b[1], data)
	if unsafe.SliceData(f0) == unsafe.SliceData(data) {
		t.Skip("no huge pages here: the buffers are the slice itself")
	}
	if unsafe.SliceData(f0) != unsafe.SliceData(f1) {
		t.Error("two copies of one slice")
	}
	data[7] = 1
	f2 := weightData(&b[2], data)
	if unsafe.SliceData(f2) == unsafe.SliceData(f0) || f2[7] != 1 || f0[7] != 0 {
		t.Errorf("a changed slice: new copy %v, [7] = %v, old [7] = %v", unsafe.SliceData(f2) != unsafe.SliceData(f0), f2[7], f0[7])
	}
	data[8] = float32(math.Copysign(0, -1))
	if f3 := weightData(&b[3], data); unsafe.SliceData(f3) == unsafe.SliceData(f2) || math.Float32bits(f3[8]) != 1<<31 {
		t.Error("-0 shared a copy holding +0")
	}
	runtime.KeepAlive(&b)
}
