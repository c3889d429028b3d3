package wire

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// checkFloat32 reports the first of bit patterns lo, lo+step, ... below hi
// whose appendFloat32 differs from strconv's, or ok.
func checkFloat32(lo, hi, step uint64) (bad uint32, got, want string, ok bool) {
	var g, w []byte
	for b := lo; b < hi; b += step {
		f := math.Float32frombits(uint32(b))
		g = appendFloat32(g[:0], f)
		w = strconv.AppendFloat(w[:0], float64(f), 'g', -1, 32)
		if string(g) != string(w) {
			return uint32(b), string(g), string(w), false
		}
	}
	return 0, "", "", true
}

// TestAppendFloat32 compares appendFloat32 with strconv on every 1021st
// float32 bit pattern (both signs, every exponent), on the patterns next
// to every power of two and of ten, and on a million random ones;
// RNNSERVE_FLOAT32_ALL=1 compares every float32 (a few minutes).
func TestAppendFloat32(t *testing.T) {
	step := uint64(1021)
	if os.Getenv("RNNSERVE_FLOAT32_ALL") != "" {
		step = 1
	}
	const parts = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for p := range uint64(parts) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lo, hi := p<<32/parts, (p+1)<<32/parts
			lo += (step - lo%step) % step
			if b, got, want, ok := checkFloat32(lo, hi, step); !ok {
				mu.Lock()
				t.Errorf("%#08x (%v): %s, strconv %s", b, math.Float32frombits(b), got, want)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var edges []float32
	for e := -150; e <= 128; e++ {
		edges = append(edges, float32(math.Ldexp(1, e)))
	}
	for k := -46; k <= 39; k++ {
		edges = append(edges, float32(math.Pow(10, float64(k))))
	}
	for _, f := range edges {
		b := uint64(math.Float32bits(f))
		for _, sign := range []uint64{0, 1 << 31} {
			if b, got, want, ok := checkFloat32(max(b, 3)-3+sign, b+4+sign, 1); !ok {
				t.Errorf("%#08x (%v): %s, strconv %s", b, math.Float32frombits(b), got, want)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 7))
	for range 1_000_000 {
		b := uint64(r.Uint32())
		if b, got, want, ok := checkFloat32(b, b+1, 1); !ok {
			t.Fatalf("%#08x (%v): %s, strconv %s", b, math.Float32frombits(b), got, want)
		}
	}
}

func BenchmarkAppendFloat32(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, 384)
	for i := range vals {
		vals[i] = float32(r.NormFloat64() * 0.3)
	}
	buf := make([]byte, 0, 8192)
	b.Run("strconv", func(b *testing.B) {
		for b.Loop() {
			buf = buf[:0]
			for _, f := range vals {
				buf = strconv.AppendFloat(buf, float64(f), 'g', -1, 32)
			}
		}
	})
	b.Run("appendFloat32", func(b *testing.B) {
		for b.Loop() {
			buf = buf[:0]
			for _, f := range vals {
				buf = appendFloat32(buf, f)
			}
		}
	})
}

// FuzzAppendFloat32 compares appendFloat32 with strconv on float32 bit
// patterns.
func FuzzAppendFloat32(f *testing.F) {
	for _, b := range []uint32{0, 1, 0x39800000, 0x3f800000, 0x7f7fffff, 0x00800000, 0x3dcccccd, 0xbf000001} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b uint32) {
		if bad, got, want, ok := checkFloat32(uint64(b), uint64(b)+1, 1); !ok {
			t.Errorf("%#08x: %s, strconv %s", bad, got, want)
		}
	})
}
