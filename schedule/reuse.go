package schedule

import (
	"encoding/binary"
	"sync"
)

// Plans are worth keeping: building one allocates every step's op and
// every activation buffer, which for a small model costs more than
// running it (hidden 64, T = 100: 240 µs to build, 170 µs to run).
// Acquire hands out a plan built before for an input of the same shape,
// with the new input's data bound in its place; Release gives it back.

// planKey is what decides a plan's structure: everything of an Input but
// its values.
type planKey struct {
	T, B         int
	head, h0, c0 bool
	lengths      string // Input.Lengths as varints
}

func keyOf(in *Input, opt PlanOptions) planKey {
	k := planKey{T: in.T, B: in.B, head: opt.Head, h0: in.H0 != nil, c0: in.C0 != nil}
	if in.Lengths != nil {
		b := make([]byte, 0, len(in.Lengths))
		for _, l := range in.Lengths {
			b = binary.AppendUvarint(b, uint64(l))
		}
		k.lengths = string(b)
	}
	return k
}

// MaxPlanShapes is how many input shapes a Program keeps released plans
// for (see Acquire). Clients that vary their lengths can make as many
// shapes as they like; past this many the least recently used shape's
// plans are dropped for the garbage collector.
const MaxPlanShapes = 64

// planCache is a Program's released plans by shape: a sync.Pool per
// shape, at most MaxPlanShapes shapes, the least recently used dropped
// first.
type planCache struct {
	mu      sync.Mutex
	shapes  map[planKey]*cachedShape
	clock   uint64 // counts uses
	evicted int64
}

type cachedShape struct {
	used  uint64 // the clock at its last use
	plans sync.Pool
}

// pool is the pool of key's plans, made (and the least recently used
// shape dropped) if there is none.
func (c *planCache) pool(key planKey) *sync.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	if sh, ok := c.shapes[key]; ok {
		sh.used = c.clock
		return &sh.plans
	}
	if c.shapes == nil {
		c.shapes = map[planKey]*cachedShape{}
	}
	if len(c.shapes) >= MaxPlanShapes {
		var oldest planKey
		least := c.clock
		for k, sh := range c.shapes {
			if sh.used < least {
				oldest, least = k, sh.used
			}
		}
		delete(c.shapes, oldest)
		c.evicted++
	}
	sh := &cachedShape{used: c.clock}
	c.shapes[key] = sh
	return &sh.plans
}

// PlanCache describes a Program's kept plans (Acquire).
type PlanCache struct {
	Shapes  int   // input shapes with plans kept, at most MaxPlanShapes
	Evicted int64 // shapes dropped so far to stay within MaxPlanShapes
}

// PlanCache reports how many shapes p keeps plans for and how many it
// has dropped: what a server exports to show clients' shapes churning
// its plans.
func (p *Program) PlanCache() PlanCache {
	p.cache.mu.Lock()
	defer p.cache.mu.Unlock()
	return PlanCache{Shapes: len(p.cache.shapes), Evicted: p.cache.evicted}
}

// Acquire is Plan for a plan that is given back with Release when its
// outputs have been read: it reuses a plan of a previous input of the
// same shape (batch, length, lengths, initial states, head) when one is
// free, binding in's slices as its inputs. A Program keeps its plans in a
// sync.Pool per shape, so the garbage collector frees the ones not in
// use, and keeps pools for the MaxPlanShapes shapes used last (PlanCache
// counts them). A dry program's plans are built anew.
func (p *Program) Acquire(in Input, opt PlanOptions) (*Plan, error) {
	if err := p.check(&in); err != nil {
		return nil, err
	}
	if p.dry {
		return p.build(in, opt), nil
	}
	pool := p.cache.pool(keyOf(&in, opt))
	if q, ok := pool.Get().(*Plan); ok {
		q.bind(&in)
		return q, nil
	}
	q := p.build(in, opt)
	q.reuse = pool
	return q, nil
}

// Release gives a plan from Acquire back for reuse; its outputs (the
// slices of its Result) must not be used after. It does nothing for a plan
// from Plan.
func (p *Plan) Release() {
	if p.reuse != nil {
		p.reuse.Put(p)
	}
}

// bind points the plan's input buffers at in's slices (of the lengths
// the plan was built for).
func (p *Plan) bind(in *Input) {
	if b := p.in.features; b != nil {
		b.F32 = in.Features
	}
	if b := p.in.tokens; b != nil {
		b.I64 = in.Tokens
	}
	if b := p.in.h0; b != nil {
		b.F32 = in.H0
	}
	if b := p.in.c0; b != nil {
		b.F32 = in.C0
	}
}
