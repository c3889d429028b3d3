package schedule

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttnOp checks the attention's score and context products against
// float64 loops, for every batch row of a time-major encoder output
// [T][B][W] (so each row's outputs are B·W apart), and that nothing
// outside each op's output is written.
func TestAttnOp(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	fill := func(name string, n int) *Buffer {
		b := &Buffer{Name: name, Kind: KindActivation, Elems: n, ElemSize: 4, F32: make([]float32, n)}
		for i := range b.F32 {
			b.F32[i] = float32(2*r.Float64() - 1)
		}
		return b
	}
	for _, s := range []struct{ T, B, W int }{{1, 1, 1}, {5, 1, 3}, {7, 2, 4}, {3, 3, 16}} {
		mem := attnMemory{buf: fill("mem", s.T*s.B*s.W), T: s.T, W: s.W, B: s.B}
		q := fill("q", s.B*s.W)
		scores := fill("scores", s.B*s.T+1)
		last := scores.F32[s.B*s.T]
		(&attnOp{mem: mem, in: Dense(q, 0, s.B, s.W), out: Dense(scores, 0, s.B, s.T)}).run()
		ctx := fill("ctx", s.B*(s.W+2)+1)
		guard := append([]float32(nil), ctx.F32...)
		(&attnOp{mem: mem, in: Dense(scores, 0, s.B, s.T), out: M(ctx, 0, s.B, s.W, s.W+2), context: true}).run()
		e := func(t, b, j int) float64 { return float64(mem.buf.F32[(t*s.B+b)*s.W+j]) }
		for b := range s.B {
			for i := range s.T {
				var want float64
				for j := range s.W {
					want += e(i, b, j) * float64(q.F32[b*s.W+j])
				}
				if got := scores.F32[b*s.T+i]; math.Abs(float64(got)-want) > 1e-5 {
					t.Fatalf("%+v: row %d score %d = %v, want %v", s, b, i, got, want)
				}
			}
			for j := range s.W + 2 {
				got := ctx.F32[b*(s.W+2)+j]
				if j >= s.W {
					if got != guard[b*(s.W+2)+j] {
						t.Fatalf("%+v: row %d: the context wrote column %d past its %d", s, b, j, s.W)
					}
					continue
				}
				var want float64
				for i := range s.T {
					want += float64(scores.F32[b*s.T+i]) * e(i, b, j)
				}
				if math.Abs(float64(got)-want) > 1e-5 {
					t.Fatalf("%+v: row %d context %d = %v, want %v", s, b, j, got, want)
				}
			}
		}
		if scores.F32[s.B*s.T] != last || ctx.F32[len(ctx.F32)-1] != guard[len(guard)-1] {
			t.Fatalf("%+v: an op wrote past its output", s)
		}
	}
}
