package cachesim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func mustProfile(t testing.TB, lineSize int64) *Profile {
	t.Helper()
	p, err := NewProfile(lineSize)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProfileByHand: lines A B C A B A have distances ∞ ∞ ∞ 3 3 2.
func TestProfileByHand(t *testing.T) {
	p := mustProfile(t, 64)
	for _, line := range []int64{0, 1, 2, 0, 1, 0} {
		p.Read(line*64, 64)
	}
	dist, cold := p.Histogram()
	if want := []int64{0, 1, 2}; !slices.Equal(dist, want) || cold != 3 {
		t.Errorf("histogram %v cold %d, want %v cold 3", dist, cold, want)
	}
	for lines, want := range map[int64]int64{1: 6, 2: 5, 3: 3, 100: 3} {
		if got := p.Stats(lines * 64).Misses; got != want {
			t.Errorf("%d lines: %d misses, want %d", lines, got, want)
		}
	}
	// 130 bytes hold two whole lines.
	if got := p.Stats(130).Misses; got != 5 {
		t.Errorf("130 bytes: %d misses, want 5", got)
	}
}

// TestProfileWriteBacksByHand: line 0 is written, then 1 and 2 are read,
// then 0 is read again at distance 3: a cache of one or two lines evicted
// it dirty, a larger one still holds it dirty until Flush.
func TestProfileWriteBacksByHand(t *testing.T) {
	p := mustProfile(t, 64)
	p.Write(0, 1)
	p.Read(64, 128)
	p.Read(0, 1)
	want := map[int64]int64{1: 1, 2: 1, 3: 0}
	for lines, w := range want {
		if got := p.Stats(lines * 64).WriteBacks; got != w {
			t.Errorf("%d lines: %d write-backs, want %d", lines, got, w)
		}
	}
	p.Flush()
	for lines, w := range map[int64]int64{1: 1, 2: 1, 3: 1} {
		if got := p.Stats(lines * 64).WriteBacks; got != w {
			t.Errorf("after Flush, %d lines: %d write-backs, want %d", lines, got, w)
		}
	}
}

// TestProfileMatchesLRU compares the profile with an exact fully
// associative LRU of every size from 1 to beyond the trace's footprint, at
// checkpoints in the middle of traces, after ResetStats and after Flush.
func TestProfileMatchesLRU(t *testing.T) {
	for _, lineSize := range []int64{64, 16} {
		cfg := Config{Size: 64 * lineSize, LineSize: lineSize, Ways: FullyAssociative}
		for name, ops := range traces(cfg, 2) {
			t.Run(fmt.Sprint(lineSize, "/", name), func(t *testing.T) {
				compareProfile(t, lineSize, ops, 600)
			})
		}
	}
	// Enough distinct lines that the Fenwick tree is compacted at a
	// large size.
	rng := rand.New(rand.NewPCG(5, 5))
	t.Run("wide", func(t *testing.T) {
		compareProfile(t, 64, randomOps(rng, 6000, 64, 3000, 0.4), 3100)
	})
}

func compareProfile(t *testing.T, lineSize int64, ops []op, maxLines int64) {
	t.Helper()
	p := mustProfile(t, lineSize)
	sizes := []int64{1, 2, 3, 5, 8, 13, 20, 31, 47, 63, 64, 65, 100, 200, 299, 300, 301, 1000, maxLines}
	lrus := make([]*LRU, len(sizes))
	for i, lines := range sizes {
		lrus[i] = mustLRU(t, Config{Size: lines * lineSize, LineSize: lineSize, Ways: FullyAssociative})
	}
	all := []Sink{p}
	for _, c := range lrus {
		all = append(all, c)
	}
	check := func(when string) {
		t.Helper()
		for i, c := range lrus {
			if got, want := p.Stats(sizes[i]*lineSize), c.Stats(); got != want {
				t.Fatalf("%s, %d lines: profile %+v, LRU %+v", when, sizes[i], got, want)
			}
		}
	}
	// Feed the trace in four parts, and do the first part twice with a
	// reset between, to check warm counts.
	quarter := len(ops) / 4
	for _, s := range all {
		apply(s, ops[:quarter])
	}
	check("first part")
	p.ResetStats()
	for _, c := range lrus {
		c.ResetStats()
	}
	check("after ResetStats")
	for part := range 4 {
		for _, s := range all {
			apply(s, ops[part*quarter:(part+1)*quarter])
		}
		check(fmt.Sprint("part ", part))
		if part == 1 {
			p.Flush()
			for _, c := range lrus {
				c.Flush()
			}
			check("after Flush")
		}
	}
	for _, s := range all {
		apply(s, ops[4*quarter:])
	}
	p.Flush()
	for _, c := range lrus {
		c.Flush()
	}
	check("at the end")
}

func TestProfileHistogramSumsToMisses(t *testing.T) {
	p := mustProfile(t, 64)
	apply(p, randomOps(rand.New(rand.NewPCG(9, 9)), 3000, 64, 500, 0.2))
	dist, cold := p.Histogram()
	total := p.Stats(64).Accesses
	for c := range int64(len(dist) + 2) {
		misses := cold
		for d := c; d < int64(len(dist)); d++ {
			misses += dist[d]
		}
		if c == 0 {
			if misses != total {
				t.Fatalf("histogram and cold add to %d, want %d accesses", misses, total)
			}
			continue
		}
		if got := p.Stats(c * 64).Misses; got != misses {
			t.Fatalf("%d lines: Stats says %d misses, histogram %d", c, got, misses)
		}
	}
}

func TestProfileBadInput(t *testing.T) {
	if _, err := NewProfile(100); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewProfile(100): %v", err)
	}
	p := mustProfile(t, 0)
	if p.LineSize() != DefaultLineSize {
		t.Errorf("line size %d", p.LineSize())
	}
	defer func() {
		if recover() == nil {
			t.Error("Stats(32) with 64-byte lines did not panic")
		}
	}()
	p.Stats(32)
}
