package schedule

import (
	"fmt"
	"time"

	"rnnserve/internal/invariants"
	"rnnserve/rnn/tree"
)

// GenerateOptions bound a top-down generation and say where it runs.
type GenerateOptions struct {
	// MaxNodes caps the tree's nodes, root included (default 64).
	MaxNodes int
	// MaxChildren caps each node's children (default 4).
	MaxChildren int
	// MaxDepth caps the levels, the root's included (default 8).
	MaxDepth int
	// Workers is the number of parts each wave is split into, one per
	// worker of Pool: 0 means, wave by wave, the Pool's size when the
	// wave is predicted to end sooner on it than on the caller (its
	// chains each doing the last wave's work per chain, see
	// schedule/work.go), else 1, as without a Pool. Without a Pool the
	// parts run one after another on the calling goroutine.
	Workers int
	// Pool runs the parts; it must have exactly Workers workers (see
	// TreeOptions.Pool).
	Pool *Pool
}

// EnsureDefaults fills zero fields.
func (o *GenerateOptions) EnsureDefaults() {
	if o.MaxNodes == 0 {
		o.MaxNodes = 64
	}
	if o.MaxChildren == 0 {
		o.MaxChildren = 4
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = 8
	}
	if o.Workers == 0 {
		o.Workers = 1
		if o.Pool != nil {
			o.Workers = o.Pool.Workers()
		}
	}
}

// Validate reports an invalid setting.
func (o GenerateOptions) Validate() error {
	if o.MaxNodes < 1 || o.MaxNodes > 1<<16 || o.MaxChildren < 1 || o.MaxChildren > 1<<10 ||
		o.MaxDepth < 1 || o.MaxDepth > 1<<10 || o.Workers < 1 || o.Workers > 1024 {
		return inputErr("generate", "max_nodes %d (1..65536), max_children %d (1..1024), max_depth %d (1..1024), workers %d (1..1024)",
			o.MaxNodes, o.MaxChildren, o.MaxDepth, o.Workers)
	}
	if o.Pool != nil && o.Pool.Workers() != o.Workers {
		return fmt.Errorf("%w: %d generation workers but the pool has %d", ErrPool, o.Workers, o.Pool.Workers())
	}
	return nil
}

// Generated is a tree generated top-down, nodes in creation order
// (breadth-first: parents before children, siblings left to right).
type Generated struct {
	Parents   []int32   // -1 for the root
	Words     []int32   // each node's word id
	H, C      []float32 // [nodes][H]: each node's state
	Truncated bool      // MaxNodes stopped the generation
	// Plan holds the steps that ran, over the buffers they used, for the
	// traffic analysis (dre.Simulate): wave by wave (Step.Phase), each
	// wave's parts in turn (Step.Worker), as a parallel plan lists them.
	// Running it again on the calling goroutine recomputes the same
	// values.
	Plan *Plan
}

// Generate runs the top-down generator (tree.TopDownLSTM) from root, the
// root's word id. It is the recursive executor's: the structure is decided
// while it runs, so there is nothing to depth-batch.
//
// The root's state is an LSTM step on its word from zeros. A node's
// children come from a chain: starting from the node's state, while the
// grow head's argmax on the chain's h is 1 (and MaxChildren, MaxDepth
// allow), the next child's word is the classifier's argmax on that h and
// the child's state an LSTM step on that word from the chain's state. The
// chains of different nodes are independent: each wave (the nodes of one
// depth) is one phase on the pool, its chains split into Workers parts of
// consecutive nodes, one per worker, as a tree plan's parts are. MaxNodes
// is applied at the end of each wave in creation order, so the result does
// not depend on the number of workers. Every step runs through the same
// Step type as fixed plans and is recorded as it runs, with its part and
// wave. A panic in a part reaches the caller as in Plan.Run: from the pool
// as a *PanicError (Pool.Phases), on the calling goroutine as it was
// raised.
func (p *TreeProgram) Generate(root int32, opt GenerateOptions) (*Generated, error) {
	m := p.Model
	if !m.Cell.Dynamic() {
		return nil, fmt.Errorf("schedule: Generate needs a %v model, not %v", tree.TopDownLSTM, m.Cell)
	}
	if p.dry {
		return nil, ErrDryPlan
	}
	auto := opt.Workers == 0 // as many parts as pay (see work.go)
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if root < 0 || int(root) >= m.Vocab {
		return nil, inputErr("root", "word id %d outside the vocabulary of %d", root, m.Vocab)
	}
	W := opt.Workers
	E, H, V := m.Embed, m.Hidden, m.Vocab
	// Every computed state gets its own row: at most MaxNodes nodes each
	// try MaxChildren children, plus the root.
	rowsCap := 1 + opt.MaxNodes*opt.MaxChildren
	decCap := opt.MaxNodes * (opt.MaxChildren + 1)
	g := &generator{prog: p, plan: &Plan{B: 1}, E: E, H: H, V: V, parts: make([][]Step, W)}
	g.plan.Buffers = append(g.plan.Buffers, p.weights...)
	g.h = g.buffer("h", KindOutput, rowsCap*H)
	g.c = g.buffer("c", KindActivation, rowsCap*H)
	g.y = g.buffer("gates", KindActivation, rowsCap*4*H)
	g.zero = g.buffer("zero", KindActivation, H)
	g.grow = g.buffer("grow_logits", KindActivation, decCap*2)
	g.word = g.buffer("word_logits", KindActivation, decCap*V)
	g.chosen = &Buffer{Name: "decisions", Kind: KindActivation, Elems: 2 * decCap, ElemSize: 8, I64: make([]int64, 2*decCap)}
	g.plan.Buffers = append(g.plan.Buffers, g.chosen)

	// The root.
	g.step(0, 0, -1, root)
	g.endWave(0)
	out := &Generated{Parents: []int32{-1}, Words: []int32{root}}
	rowOf := []int32{0}
	depth := []int{1}
	wave := []int{0}
	next := int32(1) // next state row
	dec := int32(0)  // next decision row
	perChain := 0.0  // flops of a chain of the last wave
	times := make([]time.Duration, W)
	type kid struct {
		word, row int32
	}
	for ph := 1; len(wave) > 0; ph++ {
		if len(out.Words) >= opt.MaxNodes {
			out.Truncated = true
			break
		}
		chains := make([][]kid, len(wave))
		// Reserve rows: each chain may add up to MaxChildren states and
		// take MaxChildren+1 decisions.
		base := make([]int32, len(wave))
		dbase := make([]int32, len(wave))
		for i := range wave {
			base[i], dbase[i] = next, dec
			next += int32(opt.MaxChildren)
			dec += int32(opt.MaxChildren + 1)
		}
		// The wave runs on P parts, as many as it has chains up to W:
		// part w grows the chains of wave[from(w):from(w+1)]. A wave of
		// one chain runs on the caller alone, and so does one whose
		// chains, each expected to do the last wave's work, would not pay
		// for the pool (work.go), when the parts are left open.
		P := min(W, len(wave))
		from := func(w int) int { return len(wave) * w / P }
		if auto && P > 1 {
			work := make([]int64, P)
			for w := range work {
				work[w] = int64(float64(from(w+1)-from(w)) * perChain)
			}
			if !opt.Pool.pays(work, nil, P, &p.rate[Recursive]) {
				P = 1
			}
		}
		part := func(w int) {
			if w >= P {
				return
			}
			start := time.Now()
			defer func() { times[w] = time.Since(start) }()
			for i := from(w); i < from(w+1); i++ {
				n := wave[i]
				prev := rowOf[n]
				if depth[n]+1 > opt.MaxDepth {
					continue
				}
				for k := 0; k < opt.MaxChildren; k++ {
					d := dbase[i] + int32(k)
					if g.decide(w, prev, d) != 1 {
						break
					}
					word := int32(g.predict(w, prev, d))
					row := base[i] + int32(k)
					g.step(w, row, prev, word)
					chains[i] = append(chains[i], kid{word, row})
					prev = row
				}
			}
		}
		if opt.Pool != nil && P > 1 && !invariants.Enabled {
			opt.Pool.longPhases(1, func(_, w int) { part(w) })
		} else {
			for w := range P {
				part(w)
			}
		}
		var flops int64
		for w := range P {
			f := stepsFlops(g.parts[w])
			if !invariants.Enabled { // checked steps take the checker's time
				p.rate[Recursive].observe(times[w], f)
			}
			flops += f
		}
		perChain = float64(flops) / float64(len(wave))
		g.endWave(ph)
		var nextWave []int
		for i, n := range wave {
			for _, k := range chains[i] {
				if len(out.Words) >= opt.MaxNodes {
					out.Truncated = true
					break
				}
				out.Parents = append(out.Parents, int32(n))
				out.Words = append(out.Words, k.word)
				rowOf = append(rowOf, k.row)
				depth = append(depth, depth[n]+1)
				nextWave = append(nextWave, len(out.Words)-1)
			}
		}
		wave = nextWave
	}
	out.H = make([]float32, len(rowOf)*H)
	out.C = make([]float32, len(rowOf)*H)
	for i, r := range rowOf {
		copy(out.H[i*H:(i+1)*H], g.h.F32[int(r)*H:int(r+1)*H])
		copy(out.C[i*H:(i+1)*H], g.c.F32[int(r)*H:int(r+1)*H])
	}
	// Trim the buffers to the rows used, so the plan's working set is what
	// ran.
	g.trim(g.h, int(next)*H)
	g.trim(g.c, int(next)*H)
	g.trim(g.y, int(next)*4*H)
	g.trim(g.grow, int(dec)*2)
	g.trim(g.word, int(dec)*V)
	g.chosen.Elems = max(2*int(dec), 1)
	g.chosen.I64 = g.chosen.I64[:g.chosen.Elems]
	g.plan.index(W)
	out.Plan = g.plan
	return out, nil
}

// generator records and runs a generation's steps.
type generator struct {
	prog    *TreeProgram
	plan    *Plan
	parts   [][]Step // each part's steps of the wave running
	E, H, V int

	h, c, y, zero, grow, word *Buffer
	chosen                    *Buffer // I64 [decisions][2]: each decision's grow and word argmax
}

func (g *generator) buffer(name string, kind BufferKind, elems int) *Buffer {
	b := &Buffer{Name: name, Kind: kind, Elems: elems, ElemSize: 4, F32: make([]float32, elems)}
	g.plan.Buffers = append(g.plan.Buffers, b)
	return b
}

func (g *generator) trim(b *Buffer, elems int) {
	b.Elems = max(elems, 1)
	b.F32 = b.F32[:b.Elems]
}

// run records the step of o at row r in part w's steps and runs it
// (checked against its regions with the invariants build tag, where the
// parts run in turn on the calling goroutine).
func (g *generator) run(w, r int, o op) {
	s := Step{Kernel: o.kernel(), Layer: -1, T: r, Worker: w, op: o}
	g.parts[w] = append(g.parts[w], s)
	if invariants.Enabled {
		if err := checkSteps([]Step{s}, 0, g.plan.Buffers); err != nil {
			panic(err)
		}
		return
	}
	o.run()
}

// endWave appends the steps of the wave that ran to the plan, part after
// part, as phase ph.
func (g *generator) endWave(ph int) {
	for w, steps := range g.parts {
		for _, s := range steps {
			s.Phase = ph
			g.plan.Steps = append(g.plan.Steps, s)
		}
		g.parts[w] = steps[:0]
	}
	g.plan.T = len(g.plan.Steps)
}

// step computes, in part pt, state row from the state prev (-1: zeros)
// and word w: y = W_ih x + W_hh h_prev, c = c_prev, then the LSTM update.
func (g *generator) step(pt int, row, prev, w int32) {
	p, E, H := g.prog, g.E, g.H
	r := int(row)
	y, h, c := Dense(g.y, r*4*H, 1, 4*H), Dense(g.h, r*H, 1, H), Dense(g.c, r*H, 1, H)
	hp := Dense(g.zero, 0, 1, H)
	if prev >= 0 {
		hp = Dense(g.h, int(prev)*H, 1, H)
	}
	g.run(pt, r, stable(newGemmNT(y, Dense(p.emb, int(w)*E, 1, E), Dense(p.w, 0, 4*H, E), 0)))
	g.run(pt, r, stable(newGemmNT(y, hp, Dense(p.u, 0, 4*H, H), 1)))
	if prev >= 0 {
		g.run(pt, r, newCopy(c, Dense(g.c, int(prev)*H, 1, H)))
	} else {
		g.run(pt, r, &zeroOp{c})
	}
	g.run(pt, r, newLSTM(y, Whole(p.b), c, h))
}

// decide runs, in part pt, the grow head on state row s into decision
// row d and returns its argmax (1: another child).
func (g *generator) decide(pt int, s, d int32) int {
	p, H := g.prog, g.H
	logits := Dense(g.grow, int(d)*2, 1, 2)
	out := Dense(g.chosen, 2*int(d), 1, 1)
	g.run(pt, int(s), stable(newGemmNT(logits, Dense(g.h, int(s)*H, 1, H), Dense(p.grow, 0, 2, H), 0)))
	g.run(pt, int(s), &decideOp{logits: logits, b: Whole(p.growB), out: out})
	return int(out.Buf.I64[out.Off])
}

// predict runs, in part pt, the word classifier on state row s into
// decision row d and returns its argmax.
func (g *generator) predict(pt int, s, d int32) int {
	p, H, V := g.prog, g.H, g.V
	logits := Dense(g.word, int(d)*V, 1, V)
	out := Dense(g.chosen, 2*int(d)+1, 1, 1)
	g.run(pt, int(s), stable(newGemmNT(logits, Dense(g.h, int(s)*H, 1, H), Dense(p.clsW, 0, V, H), 0)))
	g.run(pt, int(s), &decideOp{logits: logits, b: Whole(p.clsB), out: out})
	return int(out.Buf.I64[out.Off])
}
