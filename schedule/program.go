package schedule

import (
	"errors"
	"fmt"

	"rnnserve/internal/hugepage"
	"rnnserve/rnn"
)

// Schedule selects how a recurrent layer's products are ordered.
type Schedule uint8

const (
	// A is the DRE paper's Algorithm 1: concatenated G, read every step.
	A Schedule = iota + 1
	// APlus is Algorithm 2: input projections for all steps first, then
	// only the recurrent half of G per step.
	APlus
	// Cellular names what a Stepper runs (step by step, every layer per
	// step, layer 0's input projections on arrival). It is not a Program
	// schedule: only TraceStepper's plans carry it.
	Cellular
	// Partitioned is A+ with every layer's hidden units split across the
	// cores, each core keeping its rows of W_hh in its private cache
	// (DeepCPU; see NewPartitioned).
	Partitioned
)

// ErrUnknownSchedule is returned for a schedule name other than "A", "A+" or "P".
var ErrUnknownSchedule = errors.New("schedule: unknown schedule")

// Parse returns the schedule named s: "A", "A+" or "P" (Partitioned).
func Parse(s string) (Schedule, error) {
	switch s {
	case "A", "a":
		return A, nil
	case "A+", "a+":
		return APlus, nil
	case "P", "p":
		return Partitioned, nil
	}
	return 0, fmt.Errorf("%w %q (want A, A+ or P)", ErrUnknownSchedule, s)
}

func (s Schedule) String() string {
	switch s {
	case A:
		return "A"
	case APlus:
		return "A+"
	case Cellular:
		return "cellular"
	case Partitioned:
		return "P"
	}
	return fmt.Sprintf("Schedule(%d)", uint8(s))
}

// Program is a network prepared for one schedule: its weight buffers laid
// out as that schedule reads them (G concatenated for A, W_ih and W_hh
// apart for A+). It is immutable and safe for concurrent use; each request
// gets its own Plan from it.
type Program struct {
	Net      *rnn.Network
	Schedule Schedule

	weightList
	layers [][]layerWeights
	emb    *Buffer
	headW  *Buffer
	headB  *Buffer
	dry    bool
	part   *partProgram // Partitioned only
	cache  planCache    // released plans by shape (Acquire)
}

type layerWeights struct {
	l        *rnn.Layer
	g        *Buffer // A: [In+Out][Rows], input-major
	wih, whh *Buffer // A+
	bias     *Buffer // LSTM and Elman: b_ih + b_hh
	bih, bhh *Buffer // GRU
	whr      *Buffer // LSTM projection
}

// NewProgram prepares net for schedule s. For Schedule A it builds the
// concatenated G matrices (a copy of the recurrent weights); A+ uses the
// network's own slices. A dry network gives a dry Program, whose plans can
// be walked but not run.
//
// Partitioned uses NewPartitioned's defaults: one worker (no pool),
// float32 weights; use NewPartitioned to split over a Pool.
func NewProgram(net *rnn.Network, s Schedule) (*Program, error) {
	if s == Partitioned {
		return NewPartitioned(net, PartitionOptions{})
	}
	if s != A && s != APlus {
		return nil, fmt.Errorf("%w %v", ErrUnknownSchedule, s)
	}
	p := &Program{Net: net, Schedule: s, dry: net.Dry()}
	if net.Vocab > 0 {
		p.emb = p.weight("embedding", net.Vocab*net.Input, net.Embedding, net.Memory())
	}
	for k, dirs := range net.Layers {
		var lws []layerWeights
		for d, l := range dirs {
			name := fmt.Sprintf("l%d", k)
			if d == 1 {
				name += "_reverse"
			}
			lw := layerWeights{l: l}
			rows, in, out := l.Rows(), l.Input, l.Out()
			if s == A {
				lw.g = p.derived(name+".G", rows*(in+out), concatG(l))
			} else {
				lw.wih = p.weight(name+".weight_ih", rows*in, l.Wih, l.Memory())
				lw.whh = p.weight(name+".weight_hh", rows*out, l.Whh, l.Memory())
				lw.wih.Role, lw.whh.Role = RoleWIH, RoleWHH
			}
			if l.Cell.SumsBias() {
				lw.bias = p.derived(name+".bias", rows, sumBias(l))
			} else {
				lw.bih = p.weight(name+".bias_ih", rows, l.Bih, l.Memory())
				lw.bhh = p.weight(name+".bias_hh", rows, l.Bhh, l.Memory())
			}
			if l.Proj > 0 {
				lw.whr = p.weight(name+".weight_hr", l.Proj*l.Hidden, l.Whr, l.Memory())
				lw.whr.Role = RoleWHR
			}
			lws = append(lws, lw)
		}
		p.layers = append(p.layers, lws)
	}
	if net.HeadOut > 0 {
		p.headW = p.weight("head.weight", net.HeadOut*net.OutputWidth(), net.HeadW, net.Memory())
		p.headB = p.weight("head.bias", net.HeadOut, net.HeadB, net.Memory())
	}
	if err := checkOwners(net.Memory(), p.weights); err != nil {
		return nil, err
	}
	return p, nil
}

// weightList is a program's weight buffers in layout order, the first
// buffers of each of its plans.
type weightList struct{ weights []*Buffer }

// weight adds a float32 weight buffer over data itself, one of a model's
// slices, which owner (the model's Memory) owns: the buffer holds owner,
// so that the plans, programs and steppers that read data keep its
// mapping alive (a Go slice into a mapping does not). A nil owner says
// data is on the heap.
func (w *weightList) weight(name string, elems int, data []float32, owner *hugepage.Arena) *Buffer {
	b := &Buffer{Name: name, Kind: KindWeight, Elems: elems, ElemSize: 4, F32: data, owner: owner, model: true}
	w.weights = append(w.weights, b)
	return b
}

// errUnowned is returned by a constructor whose weight buffer reads a
// model's mapped memory without holding the arena that owns it: a bug,
// which would otherwise let the mapping go while the buffer is read.
var errUnowned = errors.New("schedule: a weight buffer reads a model's mapped memory without holding its arena")

// checkOwners returns errUnowned, naming the buffer, if a buffer of bufs
// reads memory arena owns but does not hold arena.
func checkOwners(arena *hugepage.Arena, bufs []*Buffer) error {
	if arena.Mapped() == 0 {
		return nil
	}
	for _, b := range bufs {
		if b != nil && b.owner != arena && arena.Holds(b.F32) {
			return fmt.Errorf("%w: %s", errUnowned, b.Name)
		}
	}
	return nil
}

// derived adds a float32 weight buffer over data, a matrix the program
// made from a model's (Schedule A's G, summed biases): moved onto huge
// pages, owned by the buffer, where it is large (hugepage.Place).
func (w *weightList) derived(name string, elems int, data []float32) *Buffer {
	b := &Buffer{Name: name, Kind: KindWeight, Elems: elems, ElemSize: 4}
	b.F32 = hugepage.Place(b, data)
	w.weights = append(w.weights, b)
	return b
}

// Weights lists the program's weight buffers in layout order.
func (w *weightList) Weights() []*Buffer { return w.weights }

// CopyBytes is the bytes of the program's weight buffers that it made
// itself (Schedule A's G and summed biases, P's slices in its precision),
// not the model's slices it reads in place: the memory building it adds
// to the model's. A dry program counts the same bytes, without holding
// them. A Serial program counts those of the program it was made from,
// whose buffers it reads.
func (w *weightList) CopyBytes() int64 {
	var n int64
	for _, b := range w.weights {
		if !b.model {
			n += b.Bytes()
		}
	}
	return n
}

// concatG builds the paper's G = [W; U] with shape [In+Out][Rows]: row j
// holds the weights every gate gives input element j, W_ih's columns first,
// then W_hh's (the layout of TensorFlow's LSTM kernel). Y = [x; h]ᵀ·G.
func concatG(l *rnn.Layer) []float32 {
	if l.Wih == nil {
		return nil
	}
	rows, in, out := l.Rows(), l.Input, l.Out()
	g := make([]float32, (in+out)*rows)
	for r := 0; r < rows; r++ {
		for j := 0; j < in; j++ {
			g[j*rows+r] = l.Wih[r*in+j]
		}
		for j := 0; j < out; j++ {
			g[(in+j)*rows+r] = l.Whh[r*out+j]
		}
	}
	return g
}

func sumBias(l *rnn.Layer) []float32 {
	if l.Bih == nil {
		return nil
	}
	b := make([]float32, len(l.Bih))
	for i := range b {
		b[i] = l.Bih[i] + l.Bhh[i]
	}
	return b
}
