package schedule

import (
	"errors"
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
	"rnnserve/rnn/tree"
)

// TestWeightsOnHugePages: a network's weight matrices of 2 MiB or more
// (the embedding too) are mapped on huge pages where the host maps them,
// once, by the network; under every schedule and the stepper the buffers
// over them are the network's slices themselves, holding the network's
// arena, and building the float32 programs and steppers that read them
// maps nothing more. With mapping off (a host without huge pages)
// everything is on the heap; the results are the same bits either way.
func TestWeightsOnHugePages(t *testing.T) {
	// W_hh 3072×768 (9 MiB), W_ih 3072×16 (192 KiB), head 1024×768
	// (3 MiB), embedding 1024×16 (64 KiB): two matrices over the bound.
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 768, Layers: 1, Vocab: 1024, HeadOut: 1024, Activation: rnn.ActLogSoftmax}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	thp := runtime.GOOS == "linux" && err == nil && !strings.Contains(string(mode), "[never]")
	results := map[bool]map[string][]float32{}
	for _, on := range []bool{true, false} {
		was := hugepage.Enable(on)
		settle()
		before := hugepage.Mapped()
		net := randomNet(t, cfg, 3)
		in := randomInput(net, 3, 1, false, rand.New(rand.NewPCG(3, 3)))
		l := net.Layers[0][0]
		var want int64
		for name, m := range map[string][]float32{"W_hh": l.Whh, "head": net.HeadW, "W_ih": l.Wih, "embedding": net.Embedding} {
			big := 4*len(m) >= hugepage.MinBytes && on && thp
			if big {
				want += int64(4*len(m)+4095) &^ 4095
			}
			if got := net.Memory().Holds(m); got != big {
				t.Errorf("mapping %v: %s (%d bytes) mapped %v, want %v", on, name, 4*len(m), got, big)
			}
			if addr := uintptr(unsafe.Pointer(unsafe.SliceData(m))); big && addr%hugepage.Size != 0 {
				t.Errorf("mapping %v: %s at %#x, not a huge-page mapping", on, name, addr)
			}
		}
		if got := hugepage.Mapped() - before; got != want || net.Memory().Mapped() != want {
			t.Errorf("mapping %v: the network mapped %d bytes (its arena says %d), want %d", on, got, net.Memory().Mapped(), want)
		}
		var keep []any // every program and stepper, live to the phase's end
		results[on] = map[string][]float32{}
		for _, c := range []struct {
			name   string
			copies bool // maps copies of its own (P's workers' rows, the int8 packing)
			make   func() ([]*Buffer, []float32, any)
		}{
			{"A", true, func() ([]*Buffer, []float32, any) { return runWeights(t, net, A, in) }},
			{"A+", false, func() ([]*Buffer, []float32, any) { return runWeights(t, net, APlus, in) }},
			{"P", true, func() ([]*Buffer, []float32, any) { return runWeights(t, net, Partitioned, in) }},
			{"stepper", false, func() ([]*Buffer, []float32, any) { return stepWeights(t, net, F32, in) }},
			{"stepper int8", true, func() ([]*Buffer, []float32, any) { return stepWeights(t, net, Int8, in) }},
		} {
			before := hugepage.Mapped()
			bufs, out, k := c.make()
			keep = append(keep, k)
			wantOwners(t, c.name, net.Memory(), bufs)
			for _, b := range bufs {
				own := netSlice(net, b) // the network's slice this buffer was made from, if any
				if own != nil && b.ElemSize == 4 && !b.Packed && unsafe.SliceData(own) != unsafe.SliceData(b.F32) {
					t.Errorf("%s, mapping %v: %s (%d bytes) is a copy, want the network's slice", c.name, on, b.Name, 4*len(b.F32))
				}
			}
			if got := hugepage.Mapped() - before; !c.copies && got != 0 {
				t.Errorf("%s, mapping %v: mapped %d bytes of copies, want none", c.name, on, got)
			}
			results[on][c.name] = out
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

// TestWeightsLiveWithReaders: a network's mapped matrices stay mapped
// while a plan or a stepper that reads them lives, with the network and
// its program unreachable, and are unmapped once the last reader goes.
func TestWeightsLiveWithReaders(t *testing.T) {
	was := hugepage.Enable(true)
	defer hugepage.Enable(was)
	cfg := rnn.Config{Cell: rnn.GRU, Input: 8, Hidden: 1024, Layers: 1, HeadOut: 4}
	for _, reader := range []string{"plan", "stepper"} {
		settle()
		base := hugepage.Mapped()
		run, mapped := func() (func() []float32, int64) {
			net := randomNet(t, cfg, 5)
			in := randomInput(net, 4, 1, false, rand.New(rand.NewPCG(5, 5)))
			if reader == "plan" {
				prog, err := NewProgram(net, APlus)
				if err != nil {
					t.Fatal(err)
				}
				p, err := prog.Plan(in, PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				return func() []float32 {
					res, err := p.Run()
					if err != nil {
						t.Fatal(err)
					}
					return append([]float32(nil), res.Head...)
				}, net.Memory().Mapped()
			}
			st, err := NewStepper(net, 1)
			if err != nil {
				t.Fatal(err)
			}
			return func() []float32 {
				q := &Sequence{Features: in.Features, Head: HeadAll}
				if err := st.Add(q); err != nil {
					t.Fatal(err)
				}
				for done := false; !done; {
					for _, d := range st.Step() {
						done = done || d == q
					}
				}
				st.Remove(q)
				return q.HeadOut
			}, net.Memory().Mapped()
		}()
		if mapped == 0 {
			t.Skip("no huge pages here")
		}
		first := run()
		settle()
		if got := hugepage.Mapped() - base; got != mapped {
			t.Fatalf("%s: %d bytes mapped with only the %s left, want the network's %d", reader, got, reader, mapped)
		}
		again := run()
		for i := range first {
			if math.Float32bits(first[i]) != math.Float32bits(again[i]) {
				t.Fatalf("%s: head %d is %v after the collections, %v before", reader, i, again[i], first[i])
			}
		}
		run = nil
		settle()
		if got := hugepage.Mapped() - base; got != 0 {
			t.Errorf("%s: %d bytes still mapped with no reader left", reader, got)
		}
	}
}

// settle collects garbage until the mapped bytes stop changing, so that
// earlier garbage (other tests', a previous phase's) is unmapped first.
func settle() {
	for last := int64(-1); hugepage.Mapped() != last; {
		last = hugepage.Mapped()
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

// wantOwners fails t if a buffer over memory the arena owns does not
// hold the arena.
func wantOwners(t *testing.T, name string, arena *hugepage.Arena, bufs []*Buffer) {
	t.Helper()
	for _, b := range bufs {
		if arena.Holds(b.F32) && b.owner != arena {
			t.Errorf("%s: %s reads the network's mapped memory without holding its arena", name, b.Name)
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

// TestModelArenasHeld: a tree model's and a decoder's mapped matrices are
// read through buffers that hold their arena, as a network's are.
func TestModelArenasHeld(t *testing.T) {
	was := hugepage.Enable(true)
	defer hugepage.Enable(was)
	// U 5H×2H = 5 MiB, the embedding 2 MiB.
	m, err := tree.NewModel(tree.Config{Cell: tree.BinaryLSTM, Vocab: 1024, Embed: 512, Hidden: 512, Classes: 5}, false)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	// The stack's W_ih 4H×(E+H) = 3 MiB, W_c H×(M+H) = 2 MiB.
	d, err := rnn.NewDecoder(rnn.DecoderConfig{Cell: rnn.LSTM, Vocab: 64, Embed: 256, Hidden: 512, Layers: 1, Memory: 512}, false)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := NewDecoderProgram(d)
	if err != nil {
		t.Fatal(err)
	}
	if m.Memory().Mapped() == 0 || d.Memory().Mapped() == 0 {
		t.Skip("no huge pages here")
	}
	if !m.Memory().Holds(m.U) || !d.Memory().Holds(d.Attn.Wc) {
		t.Error("the tree model's U or the decoder's W_c is not mapped")
	}
	wantOwners(t, "tree", m.Memory(), tp.Weights())
	wantOwners(t, "decoder", d.Memory(), dp.Weights())
}

// TestUnownedRefused: a weight buffer over a network's mapped memory that
// does not hold its arena is an error, not a mapping that may go while
// it is read.
func TestUnownedRefused(t *testing.T) {
	was := hugepage.Enable(true)
	defer hugepage.Enable(was)
	net := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 8, Hidden: 1024, Layers: 1}, 7)
	if net.Memory().Mapped() == 0 {
		t.Skip("no huge pages here")
	}
	l := net.Layers[0][0]
	held := &Buffer{Name: "held", F32: l.Whh, owner: net.Memory()}
	heap := &Buffer{Name: "heap", F32: l.Wih}
	if err := checkOwners(net.Memory(), []*Buffer{held, heap, nil}); err != nil {
		t.Errorf("owned and heap buffers: %v", err)
	}
	bad := &Buffer{Name: "l0.weight_hh", F32: l.Whh[4:]}
	if err := checkOwners(net.Memory(), []*Buffer{held, bad}); !errors.Is(err, errUnowned) || !strings.Contains(err.Error(), "l0.weight_hh") {
		t.Errorf("unowned buffer: %v, want errUnowned naming it", err)
	}
}
