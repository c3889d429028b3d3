package schedule

import (
	"errors"
	"fmt"
	"rnnserve/internal/hugepage"
	"rnnserve/internal/invariants"
	"sync"
	"time"
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
// float32 (F32), bf16 weights (U16, ElemSize 2), bytes (U8, ElemSize 1:
// int8 weights in f32.PackI8's layout, or rows quantized by
// f32.QuantizeI8) or, for token ids, int64 (I64). In a dry plan the data
// is nil and only the size is known (token ids excepted: they decide
// which embedding rows are read).
type Buffer struct {
	Name     string
	Kind     BufferKind
	Elems    int // number of elements
	ElemSize int // bytes per element: 4 (float32), 2 (bf16), 1 (int8) or 8 (int64)
	F32      []float32
	U16      []uint16
	U8       []uint8
	I64      []int64
	// Role says which of a recurrent layer's weight matrices the buffer
	// holds, whole or a worker's rows of it, in any layout or precision
	// (RoleNone for every other buffer).
	Role Role
	// Packed says F32 holds a matrix in f32.PackNT's panel order: the
	// same bytes as the row-major matrix (a Dense Mat over the whole
	// buffer names them), read by the products as one stream.
	Packed bool

	// owner is the arena that owns F32 when it is a model's own slice
	// (weightList.weight, Stepper.weight): mapped memory, which lives as
	// long as the arena does, so as long as the buffer does.
	owner *hugepage.Arena
	// model says the buffer is one of a model's slices, read in place
	// (weightList.weight, Stepper.weight), not a copy (Program.CopyBytes).
	model bool
}

// Role is which of a recurrent layer's weight matrices a weight buffer
// holds, for an analysis that tells them apart (cmd/roofline's W_hh, the
// one a recurrent step reads again and again).
type Role uint8

const (
	RoleNone Role = iota // not one of these (Schedule A's G holds W_ih and W_hh together)
	RoleWIH              // W_ih, the input projections' weights
	RoleWHH              // W_hh, the recurrent weights
	RoleWHR              // W_hr, an LSTM's projection
)

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
	KCopy     Kernel = iota + 1 // copy, zero or gather rows
	KEmbed                      // gather embedding rows
	KMatMul                     // C = A·Wᵀ (+ C), or A·W: a product
	KLSTM                       // LSTM gate nonlinearities and state update
	KGRU                        // GRU gate nonlinearities and state update
	KHead                       // bias add and softmax / log-softmax of a head or classifier
	KLSTMStep                   // a whole LSTM step of one row: W_hh·h and the gates in one call
	KElman                      // Elman (nn.RNN) nonlinearity, tanh or relu, and state update
	KTreeCell                   // a tree cell's pointwise gates and state update
	KBilinear                   // the RNTN's tensor term vᵀ V v
	KArgmax                     // a top-down generator's decision read from logits
	numKernels
)

var kernelNames = [numKernels]string{KCopy: "copy", KEmbed: "embed", KMatMul: "matmul", KLSTM: "lstm_gates", KGRU: "gru_gates",
	KHead: "head", KLSTMStep: "lstm_step", KElman: "elman_gates", KTreeCell: "tree_cell", KBilinear: "bilinear", KArgmax: "argmax"}

func (k Kernel) String() string {
	if k < numKernels && kernelNames[k] != "" {
		return kernelNames[k]
	}
	return fmt.Sprintf("Kernel(%d)", uint8(k))
}

// Step is one kernel call over typed operands (see Mat). Its regions are
// derived from the operands the kernel runs on: Regions visits what it
// reads, then what it writes, in the order the traffic analysis replays
// them.
type Step struct {
	Kernel Kernel
	Layer  int // -1 outside the recurrent stack (embedding, head)
	Dir    int // 0 forward, 1 reverse
	T      int // time step, -1 for a step that covers every time step
	// Worker is the worker of the plan's Pool that runs the step (0 is
	// the goroutine that calls Run). Every step of a plan that runs on one
	// core, as A and A+ do, has Worker 0.
	Worker int
	// Phase orders a parallel plan: every worker runs its steps of one
	// phase, in plan order, then all meet at the pool's barrier before the
	// next phase. Steps are listed phase by phase. A plan on one core has
	// every step in phase 0.
	Phase int
	op    op
}

// Regions calls fn for every region the step reads, then every region it writes.
func (s *Step) Regions(fn func(r Region, write bool)) { s.op.regions(fn) }

// Reads lists the regions the step reads.
func (s *Step) Reads() []Region { return s.list(false) }

// Writes lists the regions the step writes.
func (s *Step) Writes() []Region { return s.list(true) }

func (s *Step) list(write bool) []Region {
	var rs []Region
	s.op.regions(func(r Region, w bool) {
		if w == write {
			rs = append(rs, r)
		}
	})
	return rs
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

	// A parallel plan runs on pool, phase by phase: span[ph*workers+w]
	// is worker w's steps of phase ph, [lo, hi) in Steps.
	pool    *Pool
	workers int
	span    [][2]int32
	phase   func(ph, w int) // runPhase, bound once (a method value allocates)
	// rate is set for a plan whose parts are long and uneven (a tree
	// plan's): its parts are cut into chunks (chunks) and run by
	// Pool.chunkedPhases, each chunk's run timed into rate with its
	// flops; work[ph*workers+w] is a part's flops (flops, all of them,
	// when the plan runs on its caller).
	rate   *workRate
	work   []int64
	flops  int64
	chunks planChunks

	reuse *sync.Pool // where Release puts the plan back (Program.Acquire)
	in    planInputs // the input buffers Acquire binds a new input's slices to

	output, hn, cn, head *Buffer
}

// planChunks are a timed plan's chunks: runs of consecutive steps of a
// part that may run on any worker (a part's worker runs them from the
// first, another takes them from the last; see Pool), each of them in
// order on one. A part's first step begins a chunk; so does every step
// its builder lists in cuts (a tree plan: the first step of a subtree or
// a tree's top, none of whose steps reads another chunk's of its phase).
type planChunks struct {
	cuts  []int32    // the builder's: steps that begin a chunk, ascending
	span  [][2]int32 // per part, as Plan.span: its chunks [lo, hi) in start
	start []int32    // each chunk's first step
	work  []int64    // each chunk's flops
	grain []int64    // per phase, its largest chunk's flops
	run   func(ph, w, c int)
	count func(ph, w int) int
}

// reset empties c for a new plan, keeping its memory.
func (c *planChunks) reset() planChunks {
	return planChunks{cuts: c.cuts[:0], span: c.span[:0], start: c.start[:0], work: c.work[:0], grain: c.grain[:0], run: c.run, count: c.count}
}

// planInputs are a sequence plan's input buffers, those it has.
type planInputs struct{ features, tokens, h0, c0 *Buffer }

// ErrDryPlan is returned by Run for a plan that has shapes but no data.
var ErrDryPlan = errors.New("schedule: plan has no weights or inputs (dry run only)")

// Result holds the outputs of a run, all time-major like PyTorch's
// (batch_first=False): Output [T][B][Dirs*Out], HN [Layers*Dirs][B][Out],
// CN [Layers*Dirs][B][Hidden] (LSTM only), and when the plan computes
// the head, Head [T][B][HeadOut] for a head that reads every step, else
// [B][HeadOut] (rnn.Network.HeadInput). The slices belong to the plan.
type Result struct {
	Output []float32
	HN     []float32
	CN     []float32
	Head   []float32
}

// Run executes every step and returns the outputs: in order on the
// calling goroutine, or phase by phase on the plan's pool for a parallel
// plan. With the invariants build tag every step is checked against its
// regions instead (RunChecked), serially.
func (p *Plan) Run() (Result, error) {
	if p.dry {
		return Result{}, ErrDryPlan
	}
	if err := p.exec(); err != nil {
		return Result{}, err
	}
	return p.result(), nil
}

// exec runs the steps of a plan with data: checked, with the invariants
// build tag; phase by phase on the plan's pool, for a parallel plan; else
// in order on the calling goroutine. Every kind of plan (sequences, trees)
// runs through it.
func (p *Plan) exec() error {
	switch {
	case invariants.Enabled:
		return p.RunChecked()
	case p.pool != nil && p.workers > 1 && p.rate != nil:
		if p.chunks.run == nil { // bound once (a method value allocates)
			p.chunks.run, p.chunks.count = p.runChunk, p.chunkCount
		}
		p.pool.chunkedPhases(len(p.span)/p.workers, p.chunks.count, p.chunks.run)
	case p.pool != nil && p.workers > 1:
		if p.phase == nil {
			p.phase = p.runPhase
		}
		p.pool.Phases(len(p.span)/p.workers, p.phase)
	case p.rate != nil:
		start := time.Now()
		runSteps(p.Steps)
		p.rate.observe(time.Since(start), p.flops)
	default:
		runSteps(p.Steps)
	}
	return nil
}

// runPhase runs worker w's steps of phase ph.
func (p *Plan) runPhase(ph, w int) {
	s := p.span[ph*p.workers+w]
	for i := s[0]; i < s[1]; i++ {
		p.Steps[i].op.run()
	}
}

// chunkCount is the number of chunks of part w of phase ph.
func (p *Plan) chunkCount(ph, w int) int {
	s := p.chunks.span[ph*p.workers+w]
	return int(s[1] - s[0])
}

// runChunk runs chunk c of part w of phase ph (none, for a part without
// steps), timed into the plan's rate.
func (p *Plan) runChunk(ph, w, c int) {
	k := ph*p.workers + w
	cs := p.chunks.span[k]
	g := cs[0] + int32(c)
	if g >= cs[1] {
		return
	}
	lo, hi := p.chunks.start[g], p.span[k][1]
	if g+1 < cs[1] {
		hi = p.chunks.start[g+1]
	}
	start := time.Now()
	for i := lo; i < hi; i++ {
		p.Steps[i].op.run()
	}
	p.rate.observe(time.Since(start), p.chunks.work[g])
}

func (p *Plan) result() Result {
	r := Result{Output: p.output.F32, HN: p.hn.F32}
	if p.cn != nil {
		r.CN = p.cn.F32
	}
	if p.head != nil {
		r.Head = p.head.F32
	}
	return r
}

// index computes the phase spans of a plan on workers workers, whose steps
// are listed phase by phase. It panics if they are not. A plan whose steps
// are all worker 0's (a depth-batched tree plan of one tree) runs on the
// calling goroutine alone, with no job on the pool. A timed plan (rate
// set) also gets its parts' flops and its chunks (planChunks), at most
// maxChunks a part (later cuts of a part with that many are not kept).
func (p *Plan) index(workers int) {
	if p.Workers() <= 1 {
		workers = 1
	}
	p.workers = workers
	if workers <= 1 || len(p.Steps) == 0 {
		if p.rate != nil {
			p.flops = stepsFlops(p.Steps)
		}
		return
	}
	phases := p.Steps[len(p.Steps)-1].Phase + 1
	p.span = resize(p.span, phases*workers)
	clear(p.span)
	ch := &p.chunks
	if p.rate != nil {
		p.work = resize(p.work, phases*workers)
		clear(p.work)
		ch.span = resize(ch.span, phases*workers)
		clear(ch.span)
		ch.grain = resize(ch.grain, phases)
		clear(ch.grain)
		ch.start, ch.work = ch.start[:0], ch.work[:0]
	}
	cut := 0 // the first of ch.cuts not before step i
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.Phase < 0 || s.Phase >= phases || i > 0 && s.Phase < p.Steps[i-1].Phase {
			panic("schedule: parallel plan's steps are not listed phase by phase")
		}
		k := s.Phase*workers + s.Worker
		first := p.span[k][1] == 0
		if first {
			p.span[k][0] = int32(i)
		} else if p.span[k][1] != int32(i) {
			// A worker's steps of one phase must be consecutive.
			panic("schedule: parallel plan lists a worker's steps of one phase apart")
		}
		p.span[k][1] = int32(i + 1)
		if p.rate == nil {
			continue
		}
		f := stepFlops(s)
		p.work[k] += f
		for cut < len(ch.cuts) && ch.cuts[cut] < int32(i) {
			cut++
		}
		cs := &ch.span[k]
		if first {
			cs[0], cs[1] = int32(len(ch.start)), int32(len(ch.start))
		}
		if first || cut < len(ch.cuts) && ch.cuts[cut] == int32(i) && cs[1]-cs[0] < maxChunks {
			ch.start = append(ch.start, int32(i))
			ch.work = append(ch.work, 0)
			cs[1]++
		}
		ch.work[len(ch.work)-1] += f
		ch.grain[s.Phase] = max(ch.grain[s.Phase], ch.work[len(ch.work)-1])
	}
}

// serialize makes a parallel plan one that runs on its caller: every step
// worker 0's, in phase 0, in the order they are listed (a parallel plan
// lists every step after those it reads, in an earlier phase or before it
// in its part).
func (p *Plan) serialize() {
	for i := range p.Steps {
		p.Steps[i].Worker, p.Steps[i].Phase = 0, 0
	}
	p.index(1)
}

// Dry reports whether the plan can only be walked, not run.
func (p *Plan) Dry() bool { return p.dry }

// Walk calls fn for every region in plan order: each step's reads, then
// its writes. It does no arithmetic; it is the dry run the cache simulator
// eats.
func (p *Plan) Walk(fn func(r Region, write bool)) {
	for i := range p.Steps {
		p.Steps[i].op.regions(fn)
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
