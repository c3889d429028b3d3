package schedule

import (
	"errors"
	"fmt"
)

// BufferKind says what a buffer holds; the traffic analysis reports bytes by kind.
type BufferKind uint8

const (
	KindWeight     BufferKind = iota + 1 // parameters, shared by every plan of a Program
	KindInput                            // request inputs: features or token ids, initial states
	KindActivation                       // intermediate values private to one plan
	KindOutput                           // values returned to the caller
)

func (k BufferKind) String() string {
	switch k {
	case KindWeight:
		return "weight"
	case KindInput:
		return "input"
	case KindActivation:
		return "activation"
	case KindOutput:
		return "output"
	}
	return fmt.Sprintf("BufferKind(%d)", uint8(k))
}

// Buffer is a named, contiguous piece of the model's memory. Its data is
// float32 (F32) or, for token ids, int64 (I64). In a dry plan both are nil
// and only the size is known.
type Buffer struct {
	Name     string
	Kind     BufferKind
	Elems    int // number of elements
	ElemSize int // bytes per element: 4 (float32) or 8 (int64)
	F32      []float32
	I64      []int64
}

// Bytes is the buffer's size in bytes.
func (b *Buffer) Bytes() int64 { return int64(b.ElemSize) * int64(b.Elems) }

// Region is a set of byte ranges of one buffer: Count blocks of Len bytes,
// the first at Off and each next one Stride bytes further. A contiguous
// range has Count == 1. Rows of a row-major sub-matrix are one Region.
type Region struct {
	Buf    *Buffer
	Off    int64
	Len    int64
	Count  int
	Stride int64
}

// Bytes is the number of bytes the region covers.
func (r Region) Bytes() int64 { return r.Len * int64(r.Count) }

// Kernel names the computation a Step performs.
type Kernel uint8

const (
	KCopy   Kernel = iota + 1 // copy or zero rows
	KEmbed                    // gather embedding rows
	KMatMul                   // C = A·Wᵀ (+ C): Sgemv at one row, else Sgemm
	KLSTM                     // LSTM gate nonlinearities and state update
	KGRU                      // GRU gate nonlinearities and state update
	KHead                     // bias add and softmax / log-softmax of the head
)

var kernelNames = [...]string{KCopy: "copy", KEmbed: "embed", KMatMul: "matmul", KLSTM: "lstm_gates", KGRU: "gru_gates", KHead: "head"}

func (k Kernel) String() string {
	if int(k) < len(kernelNames) && kernelNames[k] != "" {
		return kernelNames[k]
	}
	return fmt.Sprintf("Kernel(%d)", uint8(k))
}

// Step is one kernel call: what it reads and writes, in the order the
// traffic analysis should replay them (all reads, then all writes), and the
// code that does it.
type Step struct {
	Kernel Kernel
	Layer  int // -1 outside the recurrent stack (embedding, head)
	Dir    int // 0 forward, 1 reverse
	T      int // time step, -1 for a step that covers every time step
	// Worker is the worker of a Partitioned plan's Pool that runs the
	// step (0 is the goroutine that calls Run). Every step of a plan that
	// runs on one core, as A and A+ do, has Worker 0.
	Worker int
	Reads  []Region
	Writes []Region
	run    func()
}

// Plan is a model run as an ordered list of steps over buffers: the same
// value is run by the engine (Run) and walked by the traffic analysis
// (Steps, without arithmetic). A Plan is built for one input (batch B,
// length T); running it again recomputes from the same input slices.
type Plan struct {
	Schedule Schedule
	B, T     int
	Buffers  []*Buffer // weights first, in Program order, then inputs, activations, outputs
	Steps    []Step
	dry      bool

	output, hn, cn, head *Buffer
}

// ErrDryPlan is returned by Run for a plan that has shapes but no data.
var ErrDryPlan = errors.New("schedule: plan has no weights or inputs (dry run only)")

// Result holds the outputs of a run, all time-major like PyTorch's
// (batch_first=False): Output [T][B][Dirs*Out], HN [Layers*Dirs][B][Out],
// CN [Layers*Dirs][B][Hidden] (LSTM only), Head [T][B][HeadOut] when the
// plan computes the head. The slices belong to the plan.
type Result struct {
	Output []float32
	HN     []float32
	CN     []float32
	Head   []float32
}

// Run executes every step in order and returns the outputs.
func (p *Plan) Run() (Result, error) {
	if p.dry {
		return Result{}, ErrDryPlan
	}
	for i := range p.Steps {
		p.Steps[i].run()
	}
	r := Result{Output: p.output.F32, HN: p.hn.F32}
	if p.cn != nil {
		r.CN = p.cn.F32
	}
	if p.head != nil {
		r.Head = p.head.F32
	}
	return r, nil
}

// Dry reports whether the plan can only be walked, not run.
func (p *Plan) Dry() bool { return p.dry }

// Walk calls fn for every region in plan order: each step's reads, then its
// writes. It does no arithmetic; it is the dry run the cache simulator eats.
func (p *Plan) Walk(fn func(r Region, write bool)) {
	for i := range p.Steps {
		s := &p.Steps[i]
		for _, r := range s.Reads {
			fn(r, false)
		}
		for _, r := range s.Writes {
			fn(r, true)
		}
	}
}

// Workers is the number of workers the plan's steps run on: one more than
// the largest Step.Worker, so 1 for a plan that runs on one core.
func (p *Plan) Workers() int {
	n := 0
	for i := range p.Steps {
		n = max(n, p.Steps[i].Worker)
	}
	return n + 1
}

// BufferBytes sums the sizes of the plan's buffers of the given kind.
func (p *Plan) BufferBytes(kind BufferKind) int64 {
	var n int64
	for _, b := range p.Buffers {
		if b.Kind == kind {
			n += b.Bytes()
		}
	}
	return n
}
