package cachesim

import (
	"slices"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// FuzzLRU decodes a cache configuration and a trace from the input and
// checks the fast LRU against the reference after every request, and, for
// fully associative caches, the profile against both at the end.
//
// Input: byte 0 picks the line size (1..64 B), byte 1 the associativity
// (1..4, 8, 12, 16 or 20 ways, or fully associative), byte 2 the number of sets (1..6) or of
// lines (1..12); then each 3 bytes are a request: write bit, address within
// four times the capacity, and length up to three lines.
func FuzzLRU(f *testing.F) {
	f.Add([]byte{6, 1, 3, 0, 0, 64, 1, 200, 10, 0, 7, 190, 3, 128, 3})
	f.Add([]byte{2, 4, 5, 1, 1, 1, 0, 2, 2, 1, 3, 3, 0, 4, 4, 1, 5, 5})
	f.Add([]byte{0, 0, 1, 0, 0, 1, 1, 1, 1, 0, 2, 1})
	f.Add([]byte{6, 6, 1, 0, 0, 64, 1, 200, 10, 0, 7, 190, 3, 128, 3, 1, 40, 90})
	f.Add([]byte{6, 8, 1, 0, 0, 64, 1, 200, 10, 0, 7, 190, 3, 128, 3, 1, 40, 90})
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		lineSize := int64(1) << (data[0] % 7)
		ways := []int{1, 2, 3, 4, FullyAssociative, 8, 12, 16, 20}[data[1]%9]
		lines := int64(1 + data[2]%6)
		if ways == FullyAssociative {
			lines = int64(1 + data[2]%12)
		} else {
			lines *= int64(ways)
		}
		cfg := Config{Size: lines * lineSize, LineSize: lineSize, Ways: ways}
		c, err := NewLRU(cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		ref := newRefLRU(cfg)
		p := mustProfile(t, lineSize)
		for b := data[3:]; len(b) >= 3; b = b[3:] {
			o := op{
				write: b[0]&1 != 0,
				addr:  (int64(b[0]>>1)<<8 | int64(b[1])) % (4 * lines * lineSize),
				n:     int64(b[2]) % (3*lineSize + 1),
			}
			apply(c, []op{o})
			apply(ref, []op{o})
			apply(p, []op{o})
			if got, want := c.Stats(), ref.stats; got != want {
				t.Fatalf("%+v, after %v: got %+v, want %+v", cfg, o, got, want)
			}
		}
		if got, want := c.Snapshot().entries, ref.entries(); !slices.Equal(got, want) {
			t.Fatalf("%+v: state %v, want %v", cfg, got, want)
		}
		if ways == FullyAssociative {
			if got, want := p.Stats(cfg.Size), c.Stats(); got != want {
				t.Fatalf("%+v: profile %+v, LRU %+v", cfg, got, want)
			}
		}
		c.Flush()
		ref.Flush()
		if got, want := c.Stats(), ref.stats; got != want {
			t.Fatalf("%+v, after Flush: got %+v, want %+v", cfg, got, want)
		}
	})
}
