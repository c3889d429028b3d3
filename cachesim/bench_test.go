package cachesim

import (
	"fmt"
	"testing"
)

// streamReuse is the benchmark trace, shaped like an RNN inference: each
// run reads a weight matrix row by row (reused every run), streams a
// fresh input region (never reused), and writes then reads an activation
// buffer (reused). With 12 MiB of cache the weights and activations stay
// cached, so accesses mix hits deep in the LRU order with misses.
type streamReuse struct {
	weights, stream, act int64 // bytes per run
	next                 int64 // start of the next fresh stream chunk
}

const (
	weightsBase = 0
	actBase     = 1 << 30
	streamBase  = 1 << 32
	rowBytes    = 4096
)

// newStreamReuse scales the trace: 1 gives 6 MiB of weights, 2 MiB of
// stream and 256 KiB of activations per run.
func newStreamReuse(scale int64) *streamReuse {
	return &streamReuse{weights: 6 << 20 / scale, stream: 2 << 20 / scale, act: 256 << 10 / scale}
}

// run feeds one run to s and returns its line accesses, for 64-byte lines.
func (g *streamReuse) run(s Sink) (lines int64) {
	for off := int64(0); off < g.weights; off += rowBytes {
		s.Read(weightsBase+off, rowBytes)
	}
	for off := int64(0); off < g.stream; off += rowBytes {
		s.Read(streamBase+g.next+off, rowBytes)
	}
	g.next += g.stream
	s.Write(actBase, g.act)
	s.Read(actBase, g.act)
	return (g.weights + g.stream + 2*g.act) / 64
}

func reportAccesses(b *testing.B, accesses int64) {
	b.ReportMetric(float64(accesses)/b.Elapsed().Seconds(), "accesses/s")
}

// go test -run '^$' -bench 'BenchmarkLRU' -benchtime 3s ./cachesim/
func BenchmarkLRU(b *testing.B) {
	for _, cfg := range []Config{
		{Size: 12 << 20, LineSize: 64, Ways: 16},
		{Size: 12 << 20, LineSize: 64, Ways: FullyAssociative},
	} {
		name := fmt.Sprintf("size=12MiB/ways=%d", cfg.Ways)
		if cfg.Ways == FullyAssociative {
			name = "size=12MiB/fully-associative"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			c := mustLRU(b, cfg)
			g := newStreamReuse(1)
			var accesses int64
			for b.Loop() {
				accesses += g.run(c)
			}
			reportAccesses(b, accesses)
		})
	}
}

// go test -run '^$' -bench 'BenchmarkProfile' -benchtime 3s ./cachesim/
func BenchmarkProfile(b *testing.B) {
	b.ReportAllocs()
	p := mustProfile(b, 64)
	g := newStreamReuse(8)
	var accesses int64
	for b.Loop() {
		accesses += g.run(p)
	}
	reportAccesses(b, accesses)
}

// go test -run '^$' -bench 'BenchmarkOPT' -benchtime 3s ./cachesim/
func BenchmarkOPT(b *testing.B) {
	b.ReportAllocs()
	tr := mustTrace(b, 64)
	g := newStreamReuse(1)
	for range 4 {
		g.run(tr)
	}
	var accesses int64
	for b.Loop() {
		OPT(tr, 12<<20)
		accesses += int64(tr.Len())
	}
	reportAccesses(b, accesses)
}
