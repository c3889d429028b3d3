package dre

import (
	"errors"
	"fmt"

	"rnnserve/cachesim"
	"rnnserve/schedule"
)

// Align is the byte alignment of every buffer's address in a Layout.
const Align = 4096

// ErrPlan is wrapped by every error about a plan that cannot be analysed.
var ErrPlan = errors.New("dre: invalid plan")

// Layout places buffers at byte addresses: one after another in the order
// given, each starting at a multiple of Align, the first at 0. Laid out in
// a plan's Buffers order, weights come first and in Program order, so every
// plan of one Program gives the weights the same addresses.
type Layout struct {
	addr map[*schedule.Buffer]int64
	size int64
}

// NewLayout lays out bufs. A buffer listed twice keeps its first address.
func NewLayout(bufs []*schedule.Buffer) *Layout {
	l := &Layout{addr: make(map[*schedule.Buffer]int64, len(bufs))}
	for _, b := range bufs {
		if _, ok := l.addr[b]; ok {
			continue
		}
		l.addr[b] = l.size
		l.size += (b.Bytes() + Align - 1) / Align * Align
	}
	return l
}

// Addr returns the address of b, and false if b is not in the layout.
func (l *Layout) Addr(b *schedule.Buffer) (int64, bool) {
	a, ok := l.addr[b]
	return a, ok
}

// Size is the end of the last buffer, rounded up to Align.
func (l *Layout) Size() int64 { return l.size }

// Replay sends every region of p, in plan order (each step's reads, then
// its writes), to s at the addresses of l: one Read or Write per block of
// a region. It fails if a region lies outside its buffer or its buffer is
// not in l.
func Replay(p *schedule.Plan, l *Layout, s cachesim.Sink) error {
	if err := check(p, l); err != nil {
		return err
	}
	replay(p, l, s)
	return nil
}

// check verifies that every region of p lies inside a buffer of l.
func check(p *schedule.Plan, l *Layout) error {
	var err error
	p.Walk(func(r schedule.Region, _ bool) {
		if err != nil {
			return
		}
		if _, ok := l.addr[r.Buf]; !ok {
			err = fmt.Errorf("%w: buffer %q is not in the layout", ErrPlan, r.Buf.Name)
			return
		}
		end := r.Off + int64(max(r.Count-1, 0))*r.Stride + r.Len
		if r.Off < 0 || r.Len < 0 || r.Count < 0 || r.Stride < 0 || end > r.Buf.Bytes() {
			err = fmt.Errorf("%w: region at %d (%d×%d bytes, stride %d) outside buffer %q of %d bytes",
				ErrPlan, r.Off, r.Count, r.Len, r.Stride, r.Buf.Name, r.Buf.Bytes())
		}
	})
	return err
}

// replay is Replay for a plan already checked against l.
func replay(p *schedule.Plan, l *Layout, s cachesim.Sink) {
	p.Walk(func(r schedule.Region, write bool) { replayRegion(l, r, write, s) })
}

// replayRegion sends one Read or Write per block of r to s.
func replayRegion(l *Layout, r schedule.Region, write bool, s cachesim.Sink) {
	a := l.addr[r.Buf] + r.Off
	for range r.Count {
		if write {
			s.Write(a, r.Len)
		} else {
			s.Read(a, r.Len)
		}
		a += r.Stride
	}
}
