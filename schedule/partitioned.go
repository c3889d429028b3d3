package schedule

import (
	"fmt"
	"sync"
	"sync/atomic"

	"rnnserve/internal/f32"
	"rnnserve/internal/host"
	"rnnserve/internal/hugepage"
	"rnnserve/rnn"
)

// The partitioned schedule (DeepCPU: Zhang, Rajbhandari, Ren and He,
// "DeepCPU: Serving RNN-based Deep Learning Models 10x Faster", USENIX
// ATC 2018, Section 4): A+'s order of work, with every layer's hidden units
// split across the workers of a Pool, one per core. Worker w owns units
// [u0, u1) of every layer and direction, and with them the rows of W_ih
// and W_hh that feed those units' gates (all 4 of an LSTM's, all 3 of a
// GRU's, the one row of an Elman cell's), copied gate-major into memory the worker itself allocates and
// first touches. Each time step it multiplies the previous h (all units)
// by its rows of W_hh, which stay in its core's private L2 from one step
// to the next when the slice fits, finishes the gates of its own units
// (so c never leaves the worker) and writes h for those units straight
// into the layer's output sequence, which is the next step's input: h
// makes no extra trip. One barrier ends every step.
//
// Per layer and direction the phases are:
//
//	proj   X'_w = X·W_ih,wᵀ for all T·B rows (the worker's gate columns only)
//	t...   Y_w = X'_w[t] + h_{t-1}·W_hh,wᵀ; gates of units [u0,u1) → out[t]
//	       (LSTM with projection: gates → hfull, barrier, then rows
//	       [p0,p1) of h = W_hr·hfull, split like the units)
//
// With a zero initial state the first step skips the recurrent product.
// An LSTM step of one row is one kernel call, the product and the gates
// together (f32.LSTMStep; lstmStepOp declares the regions of both).
// Where a worker's W_hh is past a core's L2 (up to twice it where the
// packed products are not the AVX-512 ones) or about its L1 (alternates),
// a step of one row reads W_hh forwards at even steps and backwards,
// chunk by chunk, at odd ones (f32.LSTMStepReverse, a reversed gemmOp for
// a GRU): a step starts on the rows the step before read last, which are
// still in the cache (dre's TestAlternatingStepsReuseCache). The
// embedding gather, the head product (split by output rows) and its
// softmax (split by time steps) are phases too.
//
// The plan lists every worker's steps, phase by phase and worker by
// worker within a phase, so the traffic analysis replays them as one
// serial trace; each step's Worker says whose it is, so one worker's part
// can also be replayed alone (through one core's private cache), and its
// Phase says when it runs: Run hands the pool each worker's steps of a
// phase, then the barrier, phase by phase.

// PartitionOptions configure NewPartitioned. Zero values mean defaults.
type PartitionOptions struct {
	// Workers is the number of cores the units are split over: 0 means
	// the Pool's size, or 1 without a Pool. One worker runs on the calling
	// goroutine with no pool at all. A dry program may have any number
	// (its plans are only walked).
	Workers int
	// Pool runs the workers; it must have exactly Workers workers. A
	// program with weights and more than one worker needs one; the caller
	// owns it (NewPool, Close).
	Pool *Pool
	// Precision of the stored recurrent weights.
	Precision Precision
	// PackBytes: a worker's float32 W_hh or W_ih slice larger than this
	// many bytes is stored packed (f32.PackNT), which its products read
	// as one stream; 0 means the defaults (PackBounds), -1 never. Packing
	// changes neither a bit of the results nor the bytes a plan reads.
	PackBytes int
	// PrivateCacheBytes is one core's private cache (its L2), which the
	// default packing bounds and the alternation of W_hh's reading order
	// are set from; 0 means the host's (internal/host).
	PrivateCacheBytes int64
	// Weights, when set, is this model's entry in a Resident that counts
	// the models served beside it: the program then judges at every run,
	// by its own weights and those of the models that ran since it last
	// did, whether its input projections find W_ih in the last-level
	// cache (see Resident). Nil: by its own weights alone.
	Weights *Weights
}

// Resident counts the float32 weight bytes (rnn.Network.WeightBytes) of
// the models a process serves side by side, which share the host's
// last-level cache, and the order in which they last ran. A P program
// whose float32 W_ih is packed multiplies an input projection's rows in
// groups straight from the cache when its own weights and those of the
// models that ran since it last did fit half the last-level cache, and
// otherwise has its first row pull each block of W_ih in alone first
// (f32.GemmNTPackedNear and GemmNTPacked): on AMD's Zen 5 the groups
// straight from L3 ran P 1.02-1.05x faster at hidden 256, T = 10, and
// straight from DRAM 0.90-0.94x as fast at hidden 1024
// (docs/data/host-tuning.md). What ran since is what an LRU cache holds
// above the model's own lines (their reuse distance, counted in whole
// models): a model that is loaded but idle pushes nothing out, and one
// that runs in between counts once however often it ran. With three or
// six 6.8 MiB models served in turn, judging by those beside ran P
// 1.03-1.15x faster than judging each alone, and with one of three or
// six requested and the others idle 1.00-1.04x faster than judging it
// beside every model loaded (BenchmarkProjectionsBeside,
// docs/performance.md). The zero value counts nothing; it is safe for
// concurrent use.
type Resident struct {
	mu    sync.Mutex
	all   atomic.Pointer[[]*Weights] // replaced whole under mu
	bytes atomic.Int64
	clock atomic.Int64
}

// Weights is one model's entry in a Resident, from Add to Remove.
type Weights struct {
	r     *Resident
	bytes int64
	ran   atomic.Int64 // the Resident's clock at the model's latest run; 0: never
	gone  bool         // under r.mu
}

// Add counts a model of n weight bytes that has not run yet.
func (r *Resident) Add(n int64) *Weights {
	w := &Weights{r: r, bytes: n}
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []*Weights
	if p := r.all.Load(); p != nil {
		all = append(all, *p...)
	}
	all = append(all, w)
	r.all.Store(&all)
	r.bytes.Add(n)
	return w
}

// Bytes is the weight bytes of every model counted.
func (r *Resident) Bytes() int64 { return r.bytes.Load() }

// Remove stops counting the model; removing it again does nothing.
func (w *Weights) Remove() {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.gone {
		return
	}
	w.gone = true
	var all []*Weights
	for _, e := range *r.all.Load() {
		if e != w {
			all = append(all, e)
		}
	}
	r.all.Store(&all)
	r.bytes.Add(-w.bytes)
}

// Ran records that the model ran (call it once per execution: a plan or
// a batched step); nil records nothing.
func (w *Weights) Ran() {
	if w != nil {
		w.ran.Store(w.r.clock.Add(1))
	}
}

// Beside is the weight bytes of the other models counted that ran since
// this one last did (every other that ran, if this one never has); nil
// counts nothing.
func (w *Weights) Beside() int64 {
	if w == nil {
		return 0
	}
	p := w.r.all.Load()
	if p == nil {
		return 0
	}
	since, n := w.ran.Load(), int64(0)
	for _, e := range *p {
		if e != w && e.ran.Load() > since {
			n += e.bytes
		}
	}
	return n
}

// ProjectionsNear reports whether P's input projections, run now, would
// take their W_ih straight from the last-level cache (see Resident):
// its weights and those beside it fit half of it. False for every other
// schedule.
func (p *Program) ProjectionsNear() bool { return p.part != nil && p.part.near() }

// near says whether the model's weights, with those of the models that
// ran since it last did, fit half the last-level cache, so that an input
// projection finds W_ih there (f32.GemmNTPackedNear).
func (pp *partProgram) near() bool { return pp.own+pp.beside.Beside() <= pp.llc/2 }

// PackBounds are the default PackBytes for a host whose cores each have
// l2 bytes of private cache: W_hh slices larger than l2 are packed (one
// that fits is read as fast row by row, and one that does not streams
// from L3 or DRAM, where eight row streams a panel fall short of one
// sequential one); W_ih slices, read once per layer, from a quarter of
// l2, the size below which W_ih stays in L2 from one inference to the
// next (f32.GemmNTOnce's bound). docs/data/host-tuning.md has the
// measurements on the project's 1 MiB-L2 hosts. Where the packed
// products are the AVX-512 ones and a row-major W's one-row product
// mostly eight-lane (f32.WidePacked: a CPU that runs 512-bit operations
// whole, such as AMD's Zen 5), every W_hh slice is packed (bound 0):
// there packing made P 1.2-1.5x faster at hidden 64 to 256 with T >= 10
// (host-tuning.md). W_ih keeps its bound there too: its product has many
// rows, which the row-major kernels run two to a register, and a W_ih
// that stays in L2 ran P 1.02-1.06x faster row-major at hidden 64 and
// 128 on one core of Zen 5 (0.97x at lstm/128/1/10; docs/performance.md,
// "Hosts that run 512-bit operations whole").
func PackBounds(l2 int64) (whh, wih int) { return packBounds(l2, f32.WidePacked()) }

func packBounds(l2 int64, wide bool) (whh, wih int) {
	whh = int(l2)
	if wide {
		whh = 0
	}
	return whh, int(l2 / 4)
}

// alternates bounds the W_hh slices whose one-row LSTM steps read W_hh
// forwards and backwards in turn (lstmStepOp's reverse), for a host whose
// cores each have l1 bytes of L1 data cache and l2 bytes of private
// cache. Such a slice does not fit the cache, or fills so much of it that
// the step's other lines push some of it out, but what the step before
// read last is still there. Where wide (the packed products are the
// AVX-512 ones, f32.WidePacked) that is every slice from three quarters
// of l2 up, and from three quarters of l1 to twice it; elsewhere from l2
// to twice it and from just over l1 to twice it.
//
// On Zen 5 slices that nearly fill a cache, read in order, ran at one of
// two speeds from run to run, and alternating made P faster at the
// median and steady: a GRU's 768 KiB slice (hidden 256, one core)
// 1.03-1.10x, its 48 KiB one at hidden 64 (L1 exactly) 1.05-1.16x
// (docs/performance.md, "W_hh read forwards and backwards in turn"). A
// far larger slice streams from L3 or DRAM whichever way it is read, and
// reading it backwards saves only the last L2's worth of its bytes: on
// AMD's Zen 4 (AVX2 products, gate-major rows) that lost more to the
// chunks' calls than it saved (0.85-0.93x at hidden 1024), as did the
// 768 KiB slice (0.91-1.02x), and one at L1 exactly (lstm/64 on two
// cores) showed no gain; on Zen 5 (AVX-512 products, LSTM rows chunk by
// chunk) it gained (P on one core 1.06-1.23x at hidden 512 and
// 1.01-1.05x at 1024, on two 0.99-1.04x at hidden 1024, T = 10, and
// 1.05-1.16x at T = 100). A slice that fits with room to spare gains
// nothing and loses the prefetchers' run at each chunk; on Zen 5 two
// thirds of L1 (lstm/64 on two cores) lost 0.94-0.99x.
func alternates(size int, l1, l2 int64, wide bool) bool {
	n := int64(size)
	if wide {
		return n >= 3*l2/4 || n >= 3*l1/4 && n <= 2*l1
	}
	return n >= l2 && n <= 2*l2 || n > l1 && n <= 2*l1
}

type partProgram struct {
	workers int
	pool    *Pool
	prec    Precision
	l1, l2  int64 // one core's L1 data cache and private cache: alternates
	wide    bool  // f32.WidePacked: alternates
	// own, llc and beside say whether an input projection finds W_ih in
	// the last-level cache (near).
	own, llc int64
	beside   *Weights
	layers   [][]partLayer
	// serial: the workers' parts run in turn on the calling goroutine,
	// every step on worker 0 (Program.Serial).
	serial bool
}

// partLayer is one layer and direction split over the workers: worker w
// owns hidden units units[w] and rows prow[w] of W_hr (projection only).
type partLayer struct {
	l     *rnn.Layer
	units []span
	prow  []span
	w     []partSlice
}

// partSlice is one worker's share of one layer and direction: the rows of
// each weight matrix for its units, gate-major (row g*nu+j is the source's
// row g*H+u0+j) unless chunked. With BF16 precision the weight buffers have 2-byte
// elements and their data in U16; with Int8, 1-byte elements in U8, each
// matrix packed by f32.PackI8.
type partSlice struct {
	wih, whh, whr *Buffer
	bias          *Buffer // LSTM and Elman: b_ih + b_hh
	bih, bhh      *Buffer // GRU
	// chunked: an LSTM slice whose packed float32 W_hh alternates
	// (alternates) keeps the rows of W_ih, W_hh and bias in f32's chunked
	// order (f32.ChunkRow: the four gates' rows of f32.StepChunk units
	// side by side), so its projection's X' is in that order too and a
	// step read backwards takes each chunk of W_hh as one run.
	chunked bool
}

// span is the index range [lo, hi).
type span struct{ lo, hi int }

func (s span) n() int { return s.hi - s.lo }

// split divides [0, n) into parts contiguous spans, as even as possible,
// with boundaries on multiples of 8 when every part can still get at least
// 16: the gate kernels do 8 units at a time.
func split(n, parts int) []span {
	align := 1
	if n >= 16*parts {
		align = 8
	}
	s := make([]span, parts)
	lo := 0
	for w := range s {
		hi := n
		if w < parts-1 {
			hi = (n*(w+1)/parts + align/2) / align * align
			hi = min(max(hi, lo), n)
		}
		s[w] = span{lo, hi}
		lo = hi
	}
	return s
}

// NewPartitioned prepares net for the Partitioned schedule. With weights
// and more than one worker it needs a Pool of that many workers, and
// copies every worker's share of the weights on that worker's thread.
func NewPartitioned(net *rnn.Network, opt PartitionOptions) (*Program, error) {
	dry := net.Dry()
	n := opt.Workers
	if n == 0 {
		n = 1
		if opt.Pool != nil {
			n = opt.Pool.Workers()
		}
	}
	switch {
	case n < 1 || n > MaxWorkers:
		return nil, fmt.Errorf("%w: %d workers, want 1..%d", ErrPool, n, MaxWorkers)
	case opt.Pool != nil && opt.Pool.Workers() != n:
		return nil, fmt.Errorf("%w: %d workers but the pool has %d", ErrPool, n, opt.Pool.Workers())
	case opt.Pool == nil && n > 1 && !dry:
		return nil, fmt.Errorf("%w: %d workers need a Pool of %d (PartitionOptions.Pool)", ErrPool, n, n)
	case opt.Precision != F32 && opt.Precision != BF16 && opt.Precision != Int8:
		return nil, fmt.Errorf("%w %v", ErrUnknownPrecision, opt.Precision)
	case opt.Precision == Int8:
		if err := i8Fits(net); err != nil {
			return nil, err
		}
	}
	p := &Program{Net: net, Schedule: Partitioned, dry: dry}
	l2 := opt.PrivateCacheBytes
	if l2 <= 0 {
		l2 = host.Get().L2()
	}
	packHH, packIH := PackBounds(l2)
	pp := &partProgram{workers: n, pool: opt.Pool, prec: opt.Precision, l1: host.Get().L1D(), l2: l2, wide: f32.WidePacked(),
		own: net.WeightBytes(), llc: host.Get().L3(), beside: opt.Weights}
	p.part = pp
	if net.Vocab > 0 {
		p.emb = p.weight("embedding", net.Vocab*net.Input, net.Embedding, net.Memory())
	}
	prec := opt.Precision
	es := prec.elemSize()
	for k, dirs := range net.Layers {
		var pls []partLayer
		for d, l := range dirs {
			pl := partLayer{l: l, units: split(l.Hidden, n), w: make([]partSlice, n)}
			if l.Proj > 0 {
				pl.prow = split(l.Proj, n)
			}
			for w := range pl.w {
				name := fmt.Sprintf("l%d", k)
				if d == 1 {
					name += "_reverse"
				}
				name += fmt.Sprintf(".w%d", w)
				rows := l.Cell.Gates() * pl.units[w].n()
				s := &pl.w[w]
				s.wih = p.addWeight(name+".weight_ih", prec.weightElems(rows, l.Input), es)
				s.wih.Role = RoleWIH
				s.wih.Packed = opt.Precision == F32 && packs(rows, l.Input, opt.PackBytes, packIH)
				s.whh = p.addWeight(name+".weight_hh", prec.weightElems(rows, l.Out()), es)
				s.whh.Role = RoleWHH
				s.whh.Packed = opt.Precision == F32 && packs(rows, l.Out(), opt.PackBytes, packHH)
				s.chunked = l.Cell == rnn.LSTM && s.whh.Packed && pl.units[w].n()%f32.StepChunk == 0 &&
					alternates(4*rows*l.Out(), pp.l1, pp.l2, pp.wide)
				if l.Cell.SumsBias() {
					s.bias = p.addWeight(name+".bias", rows, 4)
				} else {
					s.bih = p.addWeight(name+".bias_ih", rows, 4)
					s.bhh = p.addWeight(name+".bias_hh", rows, 4)
				}
				if l.Proj > 0 {
					s.whr = p.addWeight(name+".weight_hr", prec.weightElems(pl.prow[w].n(), l.Hidden), es)
					s.whr.Role = RoleWHR
				}
			}
			pls = append(pls, pl)
		}
		pp.layers = append(pp.layers, pls)
	}
	if net.HeadOut > 0 {
		p.headW = p.weight("head.weight", net.HeadOut*net.OutputWidth(), net.HeadW, net.Memory())
		p.headB = p.weight("head.bias", net.HeadOut, net.HeadB, net.Memory())
	}
	if !dry {
		if pp.pool != nil {
			pp.pool.Each(pp.fill)
		} else {
			for w := 0; w < n; w++ {
				pp.fill(w)
			}
		}
	}
	if err := checkOwners(net.Memory(), p.weights); err != nil {
		return nil, err
	}
	return p, nil
}

// packs says whether a rows×cols float32 slice is stored packed under
// the PackBytes option limit, def being its default. Rows of a multiple
// of eight columns only: the packed products of several rows have no
// kernel for a column tail.
func packs(rows, cols, limit, def int) bool {
	if limit == 0 {
		limit = def
	}
	return limit >= 0 && cols%8 == 0 && 4*rows*cols > limit
}

// PacksWHH says whether NewPartitioned, with the default bounds for a
// private cache of l2 bytes per core, stores a float32 W_hh slice of
// rows×cols packed.
func PacksWHH(rows, cols int, l2 int64) bool {
	whh, _ := PackBounds(l2)
	return packs(rows, cols, 0, whh)
}

// Workers is the number of workers a Partitioned program splits every
// layer over; 1 for the other schedules and for a Serial program, which
// run on one core.
func (p *Program) Workers() int {
	if p.part == nil || p.part.serial {
		return 1
	}
	return p.part.workers
}

// Serial returns a Partitioned program that runs on one core over p's own
// weight slices, with no copy: its plans list the steps of p's, every
// worker's part of a phase after the one before, all on the calling
// goroutine. Its results are p's bit for bit. It holds the slices as p
// does, so they outlive p if p is dropped first.
//
// A server that keeps P on one core beside P across every core holds each
// weight once this way rather than twice. What the one-core form gives
// up: slices cut and packed for one worker (it makes one call per part of
// each step, so where a layer's slices are small it pays those calls'
// overhead) and pages first touched on its own core (they were touched
// on p's workers' cores; on one socket they are as near).
//
// p itself is returned when it already runs on one core.
func (p *Program) Serial() *Program {
	if p.part == nil || p.Workers() == 1 {
		return p
	}
	pp := *p.part
	pp.pool, pp.serial = nil, true
	return &Program{Net: p.Net, Schedule: p.Schedule, weightList: weightList{weights: p.weights},
		emb: p.emb, headW: p.headW, headB: p.headB, dry: p.dry, part: &pp}
}

// Precision is how the program stores its recurrent weights: F32 except
// for a Partitioned program built with BF16.
func (p *Program) Precision() Precision {
	if p.part == nil {
		return F32
	}
	return p.part.prec
}

func (p *Program) addWeight(name string, elems, elemSize int) *Buffer {
	b := &Buffer{Name: name, Kind: KindWeight, Elems: elems, ElemSize: elemSize}
	p.weights = append(p.weights, b)
	return b
}

// fill allocates and copies worker w's share of every layer's weights. It
// runs on worker w's thread, so the pages are first touched there.
func (pp *partProgram) fill(w int) {
	for _, dirs := range pp.layers {
		for _, pl := range dirs {
			l, s, u := pl.l, &pl.w[w], pl.units[w]
			G := l.Cell.Gates()
			gather := func(src []float32, cols int) []float32 {
				dst := make([]float32, G*u.n()*cols)
				for g := 0; g < G; g++ {
					from := (g*l.Hidden + u.lo) * cols
					if !s.chunked {
						copy(dst[g*u.n()*cols:(g+1)*u.n()*cols], src[from:from+u.n()*cols])
						continue
					}
					for j := range u.n() {
						r := f32.ChunkRow(u.n(), g*u.n()+j)
						copy(dst[r*cols:(r+1)*cols], src[from+j*cols:])
					}
				}
				return dst
			}
			// set stores a slice of rows of cols floats as b keeps it:
			// bf16, int8 (f32.PackI8), packed (f32.PackNT) or as it is,
			// in memory tied to b, on huge pages where it is large
			// (internal/hugepage: the products stream it).
			set := func(b *Buffer, v []float32, cols int) {
				rows := len(v) / cols
				switch {
				case pp.prec == Int8:
					b.U8 = hugepage.Bytes(b, f32.PackedI8Bytes(rows, cols))
					f32.PackI8(b.U8, rows, cols, v, cols)
				case pp.prec == BF16:
					b.U16 = hugepage.Uint16s(b, len(v))
					f32.ToBF16(b.U16, v)
				case b.Packed:
					b.F32 = hugepage.Floats(b, len(v))
					f32.PackNT(b.F32, rows, cols, v, cols)
				default:
					b.F32 = hugepage.Floats(b, len(v))
					copy(b.F32, v)
				}
			}
			set(s.wih, gather(l.Wih, l.Input), l.Input)
			set(s.whh, gather(l.Whh, l.Out()), l.Out())
			if l.Proj > 0 {
				r := pl.prow[w]
				set(s.whr, append([]float32(nil), l.Whr[r.lo*l.Hidden:r.hi*l.Hidden]...), l.Hidden)
			}
			if l.Cell.SumsBias() {
				s.bias.F32 = gather(sumBias(l), 1)
			} else {
				s.bih.F32, s.bhh.F32 = gather(l.Bih, 1), gather(l.Bhh, 1)
			}
		}
	}
}

// pbuilder builds one Partitioned plan: every worker's steps, phase by
// phase and worker by worker within a phase.
type pbuilder struct {
	recorder
	pp   *partProgram
	prog *Program
	net  *rnn.Network
	B, T int
	in   *Input // for the rows each step runs (Input.Lengths)

	h0, c0, hn, cn *Buffer
	xp, c, yh      []*Buffer // per worker, sized for the widest layer
	q, qs          []*Buffer // per worker, int8 only: quantized rows and their scales
	hfull, zero    *Buffer
}

// product is c = a·wᵀ + beta·c on worker wk: gemmOp over float32 or bf16
// W (readOnce with once), gemmI8Op over int8 W; with reverse (one row) W
// is read backwards.
func (b *pbuilder) product(wk int, c, a, w Mat, beta float32, once, reverse bool) op {
	if w.Buf.ElemSize == 1 {
		o := newGemmI8(c, a, w, b.q[wk], b.qs[wk], beta)
		if reverse {
			o = reversedI8(o)
		}
		return o
	}
	o := newGemmNT(c, a, w, beta)
	if once {
		o = readOnce(o)
		o.near = b.pp.near
	}
	if reverse {
		o = reversed(o)
	}
	return o
}

// on sets the worker of the steps that follow: w, or 0 in a Serial
// program.
func (b *pbuilder) on(w int) {
	if b.pp.serial {
		w = 0
	}
	b.at.Worker = w
}

// next starts a new phase.
func (b *pbuilder) next() { b.at.Phase++ }

func (pp *partProgram) plan(prog *Program, in *Input, opt PlanOptions) *Plan {
	n := prog.Net
	b := &pbuilder{pp: pp, prog: prog, net: n, B: in.B, T: in.T, in: in}
	b.plan = &Plan{Schedule: Partitioned, B: in.B, T: in.T, dry: prog.dry, pool: pp.pool}
	b.plan.Buffers = append(b.plan.Buffers, prog.weights...)
	b.plan.Steps = make([]Step, 0, 3*pp.workers*n.NumLayers*n.Dirs()*(in.T+2)+8)
	B, T, N := in.B, in.T, pp.workers

	x := b.pembed(in)
	if in.H0 != nil {
		b.h0 = b.input(&b.plan.in.h0, "h0", in.H0, n.StateSize(B))
	}
	if in.C0 != nil {
		b.c0 = b.input(&b.plan.in.c0, "c0", in.C0, n.CellSize(B))
	}
	w := stackWidths(n)
	// Per-worker scratch, sized for the worker's widest share of any layer.
	b.xp = make([]*Buffer, N)
	b.c = make([]*Buffer, N)
	b.yh = make([]*Buffer, N)
	for wk := 0; wk < N; wk++ {
		var rows, units int
		for _, dirs := range pp.layers {
			u := dirs[0].units[wk].n()
			rows, units = max(rows, dirs[0].l.Cell.Gates()*u), max(units, u)
		}
		b.xp[wk] = b.buffer(fmt.Sprintf("xp.w%d", wk), KindActivation, T*B*rows)
		if w.lstm {
			b.c[wk] = b.buffer(fmt.Sprintf("c.w%d", wk), KindActivation, B*units)
		}
		if w.gru {
			b.yh[wk] = b.buffer(fmt.Sprintf("yh.w%d", wk), KindActivation, B*rows)
		}
	}
	if pp.prec == Int8 {
		b.q, b.qs = make([]*Buffer, N), make([]*Buffer, N)
		var cols []int
		for _, dirs := range n.Layers {
			l := dirs[0]
			cols = append(cols, l.Input, l.Out(), l.Hidden)
		}
		qn, sn := i8ScratchSize(T*B, cols...)
		for wk := 0; wk < N; wk++ {
			b.q[wk] = b.bytes(fmt.Sprintf("q.w%d", wk), KindActivation, qn)
			b.qs[wk] = b.buffer(fmt.Sprintf("qs.w%d", wk), KindActivation, sn)
		}
	}
	if w.proj {
		b.hfull = b.buffer("hfull", KindActivation, B*w.hidden)
	}
	if w.gru && in.H0 == nil {
		b.zero = b.buffer("zero", KindActivation, B*w.out)
	}
	seq, out, hn, cn := b.stackBuffers(n, T, B, w)
	b.hn, b.cn = hn, cn
	for k, dirs := range pp.layers {
		dst := out
		if k < n.NumLayers-1 {
			dst = seq[k%2]
		}
		for d := range dirs {
			b.layer(k, d, x, dst)
		}
		x = dst
	}
	b.plan.output, b.plan.hn, b.plan.cn = out, b.hn, b.cn
	if opt.Head && n.HeadOut > 0 {
		b.plan.head = b.head(out)
	}
	b.plan.index(N)
	return b.plan
}

// pembed gathers the embedding rows of tokens [i0, i1) of T·B per worker,
// or wraps the features.
func (b *pbuilder) pembed(in *Input) *Buffer {
	n, T, B := b.net, b.T, b.B
	if n.Vocab == 0 {
		return b.input(&b.plan.in.features, "features", in.Features, T*B*n.Input)
	}
	tok := b.ids("tokens", KindInput, T*B, in.Tokens)
	b.plan.in.tokens = tok
	x := b.buffer("x", KindActivation, T*B*n.Input)
	dim := n.Input
	table := Dense(b.prog.emb, 0, n.Vocab, dim)
	b.pos(-1, 0, -1)
	for w, s := range split(T*B, b.pp.workers) {
		if s.n() == 0 {
			continue
		}
		b.on(w)
		b.add(newGather(Dense(x, s.lo*dim, s.n(), dim), table, Dense(tok, s.lo, 1, s.n())))
	}
	b.next()
	return x
}

// layer adds the phases of layer k, direction d: input projections, then
// one phase per time step (two with a projection).
func (b *pbuilder) layer(k, d int, x, out *Buffer) {
	n, B, T := b.net, b.B, b.T
	pl := &b.pp.layers[k][d]
	l := pl.l
	I, O, H := l.Input, l.Out(), l.Hidden
	G := l.Cell.Gates()
	dirs := len(n.Layers[k])

	// Input projections and the initial cell state.
	b.pos(k, d, -1)
	for w, u := range pl.units {
		if u.n() == 0 {
			continue
		}
		s, rows := &pl.w[w], G*u.n()
		b.on(w)
		b.add(b.product(w, Dense(b.xp[w], 0, T*B, rows), Dense(x, 0, T*B, I), Dense(s.wih, 0, rows, I), 0, true, false))
		if l.Cell == rnn.LSTM {
			c := Dense(b.c[w], 0, B, u.n())
			if b.c0 != nil {
				b.add(newCopy(c, M(b.c0, n.CellOffset(k, d, B)+u.lo, B, u.n(), H)))
			} else {
				b.add(&zeroOp{c})
			}
		}
	}
	b.next()

	for i := 0; i < T; i++ {
		t, tprev := i, i-1
		if d == 1 {
			t, tprev = T-1-i, T-i
		}
		// h_{t-1} of the rows that ran the step before, from the previous
		// step's output; the rows that start here (all at the first step,
		// and with Lengths the shorter rows of a reverse direction) from
		// h0 or zero.
		rows, carried := b.in.active(t), 0
		if i > 0 {
			carried = min(b.in.active(tprev), rows)
		}
		var from, start Mat
		if carried > 0 {
			from = seqRows(out, tprev, d, B, O, dirs).RowRange(0, carried)
		}
		if rows > carried && b.h0 != nil {
			start = Dense(b.h0, n.StateOffset(k, d, B), B, O).RowRange(carried, rows)
		}
		// The rows whose last step this is: the rows the next step does not
		// run (all of them at the last step).
		done := 0
		if i < T-1 {
			next := t + 1
			if d == 1 {
				next = t - 1
			}
			done = min(b.in.active(next), rows)
		}
		b.stepPhase(pl, k, d, t, stateRows{carried: from, start: start, n: rows, first: carried, done: done},
			seqRows(out, t, d, B, O, dirs).RowRange(0, rows))
	}
}

// stateRows is h_{t-1} for the n rows of a step: rows [0, first) carried
// from the previous step (carried), rows [first, n) starting at this step
// from h0 (start), or from zero when start has no buffer.
// Rows [done, n) end at this step: their final state is copied out.
type stateRows struct {
	carried, start Mat
	n, first, done int
}

// one is h_{t-1} of a step of one row that has one (carried or from
// h0), else a Mat without a buffer.
func (hp stateRows) one() Mat {
	switch {
	case hp.n != 1:
		return Mat{}
	case hp.first == 1:
		return hp.carried
	}
	return hp.start
}

// lstmFinal copies the final c (and h, without a projection) of the rows
// that end at this LSTM step out of worker's units u.
func (b *pbuilder) lstmFinal(hp stateRows, cn, hn, c, hdst Mat, u span, k, d, t int, proj bool) {
	if hp.done >= hp.n {
		return
	}
	rows := hp.n
	b.pos(k, d, -1)
	b.add(newCopy(cn.RowRange(hp.done, rows).ColRange(u.lo, u.hi), c.RowRange(hp.done, rows)))
	if !proj {
		b.add(newCopy(hn.RowRange(hp.done, rows).ColRange(u.lo, u.hi), hdst.RowRange(hp.done, rows)))
	}
	b.pos(k, d, t)
}

// stepPhase adds time step t of layer k, direction d, for the rows and
// initial states hp describes; hout is where h_t goes.
func (b *pbuilder) stepPhase(pl *partLayer, k, d, t int, hp stateRows, hout Mat) {
	n, B := b.net, b.B
	l := pl.l
	H, O := l.Hidden, l.Out()
	G := l.Cell.Gates()
	proj := l.Proj > 0
	rows := hp.n
	hn := Dense(b.hn, n.StateOffset(k, d, B), B, O)
	var cn Mat
	if l.Cell == rnn.LSTM {
		cn = Dense(b.cn, n.CellOffset(k, d, B), B, H)
	}
	b.pos(k, d, t)
	for w, u := range pl.units {
		if u.n() == 0 {
			continue
		}
		s, nu := &pl.w[w], u.n()
		G := G * nu
		b.on(w)
		xp := Dense(b.xp[w], t*B*G, rows, G)
		whh := Dense(s.whh, 0, G, O)
		hdst := hout.ColRange(u.lo, u.hi)
		if proj {
			hdst = M(b.hfull, u.lo, rows, nu, H)
		}
		// A one-row step whose W_hh is past a core's L2 or about its L1
		// (alternates) reads it forwards at even steps and backwards, chunk by
		// chunk, at odd ones, so it starts where the step before ended, on rows
		// still in the cache (float32 and bf16, or int8 in whole panels).
		size := s.whh.Elems * s.whh.ElemSize
		alt := t%2 == 1 && nu%8 == 0 && (s.whh.ElemSize != 1 || G%16 == 0) && alternates(size, b.pp.l1, b.pp.l2, b.pp.wide)
		if l.Cell == rnn.LSTM {
			c := Dense(b.c[w], 0, rows, nu)
			// One row with a previous state and float32 W_hh: the product
			// and the gates in one call.
			if src := hp.one(); src.Buf != nil && s.whh.ElemSize == 4 {
				b.add(newLSTMStep(xp, src, whh, Whole(s.bias), c, hdst, alt, s.chunked))
				b.lstmFinal(hp, cn, hn, c, hdst, u, k, d, t, proj)
				continue
			}
			// The recurrent product of the rows with a previous state.
			if hp.first > 0 {
				b.add(b.product(w, xp.RowRange(0, hp.first), hp.carried, whh, 1, false, alt && rows == 1))
			}
			if hp.start.Buf != nil {
				b.add(b.product(w, xp.RowRange(hp.first, rows), hp.start, whh, 1, false, alt && rows == 1))
			}
			gates := newLSTM(xp, Whole(s.bias), c, hdst)
			if s.chunked {
				gates = chunkedGates(gates)
			}
			b.add(gates)
			b.lstmFinal(hp, cn, hn, c, hdst, u, k, d, t, proj)
			continue
		}
		if l.Cell.Elman() {
			// X'[t] += h_{t-1}·W_hhᵀ for the rows with a previous state
			// (a row starting from zero has X' alone), then the
			// nonlinearity straight into the output.
			product := func(r, h Mat) { b.add(b.product(w, r, h, whh, 1, false, alt && r.Rows == 1)) }
			if hp.first > 0 {
				product(xp.RowRange(0, hp.first), hp.carried)
			}
			if hp.first < rows && hp.start.Buf != nil {
				product(xp.RowRange(hp.first, rows), hp.start)
			}
			b.add(newElman(l.Cell, xp, Whole(s.bias), hdst))
			if hp.done < rows {
				b.pos(k, d, -1)
				b.add(newCopy(hn.RowRange(hp.done, rows).ColRange(u.lo, u.hi), hdst.RowRange(hp.done, rows)))
				b.pos(k, d, t)
			}
			continue
		}
		yh := Dense(b.yh[w], 0, rows, G)
		bih, bhh := Whole(s.bih), Whole(s.bhh)
		product := func(r, h Mat) { b.add(b.product(w, r, h, whh, 0, false, alt && rows == 1)) }
		if hp.first > 0 {
			product(yh.RowRange(0, hp.first), hp.carried)
		}
		start := hp.start
		if hp.first < rows {
			r := yh.RowRange(hp.first, rows)
			if start.Buf != nil {
				product(r, start)
			} else {
				b.add(&zeroOp{r})
				start = M(b.zero, 0, rows-hp.first, O, O)
			}
		}
		if hp.first > 0 {
			b.add(newGRU(xp.RowRange(0, hp.first), yh.RowRange(0, hp.first), bih, bhh,
				hp.carried.ColRange(u.lo, u.hi), hdst.RowRange(0, hp.first)))
		}
		if hp.first < rows {
			b.add(newGRU(xp.RowRange(hp.first, rows), yh.RowRange(hp.first, rows), bih, bhh,
				start.ColRange(u.lo, u.hi), hdst.RowRange(hp.first, rows)))
		}
		if hp.done < rows {
			b.pos(k, d, -1)
			b.add(newCopy(hn.RowRange(hp.done, rows).ColRange(u.lo, u.hi), hdst.RowRange(hp.done, rows)))
			b.pos(k, d, t)
		}
	}
	b.next()
	if !proj {
		return
	}
	// h = W_hr·hfull, rows [p0, p1) per worker, once every unit's hfull is in.
	hfull := Dense(b.hfull, 0, rows, H)
	for w, r := range pl.prow {
		if r.n() == 0 {
			continue
		}
		b.on(w)
		hdst := hout.ColRange(r.lo, r.hi)
		b.add(b.product(w, hdst, hfull, Dense(pl.w[w].whr, 0, r.n(), H), 0, false, false))
		if hp.done < rows {
			b.pos(k, d, -1)
			b.add(newCopy(hn.RowRange(hp.done, rows).ColRange(r.lo, r.hi), hdst.RowRange(hp.done, rows)))
			b.pos(k, d, t)
		}
	}
	b.next()
}

// head applies the head to what it reads (Network.HeadInput): the rows
// gathered on worker 0 where they are not contiguous already, the
// product split by output rows, then bias and activation split by rows.
func (b *pbuilder) head(out *Buffer) *Buffer {
	n, N := b.net, b.pp.workers
	V, W := n.HeadOut, n.OutputWidth()
	b.on(0)
	steps := len(b.plan.Steps)
	src := b.headInput(n, b.in, out, b.hn)
	if len(b.plan.Steps) > steps {
		b.next() // the rows were gathered on worker 0
	}
	rows := src.Rows
	head := b.buffer("head", KindOutput, rows*V)
	hw, hb := Dense(b.prog.headW, 0, V, W), Whole(b.prog.headB)
	b.pos(-1, 0, -1)
	for w, v := range split(V, N) {
		if v.n() == 0 {
			continue
		}
		b.on(w)
		b.add(newGemmNT(M(head, v.lo, rows, v.n(), V), src, hw.RowRange(v.lo, v.hi), 0))
	}
	b.next()
	for w, r := range split(rows, N) {
		if r.n() == 0 {
			continue
		}
		b.on(w)
		b.add(newHead(Dense(head, r.lo*V, r.n(), V), hb, n.Activation))
	}
	b.next()
	return head
}
