package cachesim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func mustTrace(t testing.TB, lineSize int64) *Trace {
	t.Helper()
	tr, err := NewTrace(lineSize)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// lineTrace makes a trace of one-line reads of the given lines.
func lineTrace(t testing.TB, lines []int64) *Trace {
	tr := mustTrace(t, 64)
	for _, l := range lines {
		tr.Read(l*64, 64)
	}
	return tr
}

// TestOPTTextbook uses the reference string of Silberschatz, Galvin and
// Gagne's Operating System Concepts with three frames: 9 faults under
// optimal replacement, 12 under LRU.
func TestOPTTextbook(t *testing.T) {
	tr := lineTrace(t, []int64{7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1})
	if got := OPT(tr, 3*64); got.Misses != 9 || got.Hits != 11 || got.Accesses != 20 {
		t.Errorf("OPT: %+v, want 9 misses of 20", got)
	}
	c := mustLRU(t, Config{Size: 3 * 64, Ways: FullyAssociative})
	tr.Replay(c)
	if got := c.Stats().Misses; got != 12 {
		t.Errorf("LRU: %d misses, want 12", got)
	}
}

// minMisses is the fewest misses of any demand-fetching replacement for
// the lines of tr and a cache of capacity lines, by exhaustive search
// over every choice of victim (memoized on the cache contents).
func minMisses(tr *Trace, capacity int) int64 {
	memo := map[string]int64{}
	var search func(i int, cache []int64) int64
	search = func(i int, cache []int64) int64 {
		if i == tr.Len() {
			return 0
		}
		key := fmt.Sprint(i, cache)
		if v, ok := memo[key]; ok {
			return v
		}
		line, _ := tr.At(i)
		var best int64
		switch {
		case slices.Contains(cache, line):
			best = search(i+1, cache)
		case len(cache) < capacity:
			best = 1 + search(i+1, sorted(append(slices.Clone(cache), line)))
		default:
			best = int64(tr.Len())
			for v := range cache {
				next := slices.Clone(cache)
				next[v] = line
				best = min(best, 1+search(i+1, sorted(next)))
			}
		}
		memo[key] = best
		return best
	}
	return search(0, nil)
}

func sorted(s []int64) []int64 { slices.Sort(s); return s }

// naiveMIN simulates MIN with write-backs by scanning for next uses, with
// the tie rule OPT documents: among lines never used again, clean first.
func naiveMIN(tr *Trace, capacity int) Stats {
	type entry struct {
		line  int64
		dirty bool
	}
	var cache []entry
	s := Stats{LineSize: tr.LineSize(), Accesses: int64(tr.Len())}
	nextUse := func(line int64, after int) int {
		for j := after + 1; j < tr.Len(); j++ {
			if l, _ := tr.At(j); l == line {
				return j
			}
		}
		return tr.Len() // never
	}
	for i := range tr.Len() {
		line, write := tr.At(i)
		if k := slices.IndexFunc(cache, func(e entry) bool { return e.line == line }); k >= 0 {
			s.Hits++
			cache[k].dirty = cache[k].dirty || write
			continue
		}
		s.Misses++
		if write {
			s.WriteMisses++
		} else {
			s.ReadMisses++
		}
		if len(cache) == capacity {
			victim, far := -1, -1
			for k, e := range cache {
				n := nextUse(e.line, i)
				if n == tr.Len() && !e.dirty {
					n++ // a clean dead line beats a dirty one
				}
				if n > far {
					victim, far = k, n
				}
			}
			if cache[victim].dirty {
				s.WriteBacks++
			}
			cache = slices.Delete(cache, victim, victim+1)
		}
		cache = append(cache, entry{line, write})
	}
	return s
}

func randomLineTrace(t testing.TB, rng *rand.Rand, n, span int, pw float64) *Trace {
	tr := mustTrace(t, 64)
	for range n {
		addr := rng.Int64N(int64(span)) * 64
		if rng.Float64() < pw {
			tr.Write(addr, 1)
		} else {
			tr.Read(addr, 1)
		}
	}
	return tr
}

func TestOPTBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for i := range 300 {
		n, span, capacity := 1+rng.IntN(14), 1+rng.IntN(6), 1+rng.IntN(4)
		tr := randomLineTrace(t, rng, n, span, 0.4)
		got := OPT(tr, int64(capacity)*64)
		if want := minMisses(tr, capacity); got.Misses != want {
			t.Fatalf("trace %d (%v), %d lines: OPT %d misses, exhaustive search %d", i, tr.acc, capacity, got.Misses, want)
		}
		if want := naiveMIN(tr, capacity); got != want {
			t.Fatalf("trace %d (%v), %d lines: OPT %+v, naive MIN %+v", i, tr.acc, capacity, got, want)
		}
	}
}

func TestOPTAgainstNaiveAndLRU(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	for i := range 40 {
		span := 2 + rng.IntN(200)
		tr := randomLineTrace(t, rng, 2000, span, 0.3)
		distinct := map[int64]bool{}
		for j := range tr.Len() {
			l, _ := tr.At(j)
			distinct[l] = true
		}
		for _, capacity := range []int{1, 2, 7, span / 2, span - 1, span, span + 5} {
			if capacity < 1 {
				continue
			}
			size := int64(capacity) * 64
			got := OPT(tr, size)
			if want := naiveMIN(tr, capacity); got != want {
				t.Fatalf("trace %d, %d lines: OPT %+v, naive MIN %+v", i, capacity, got, want)
			}
			lru := mustLRU(t, Config{Size: size, Ways: FullyAssociative})
			tr.Replay(lru)
			if got.Misses > lru.Stats().Misses {
				t.Fatalf("trace %d, %d lines: OPT %d misses > LRU %d", i, capacity, got.Misses, lru.Stats().Misses)
			}
			if got.Misses < int64(len(distinct)) {
				t.Fatalf("trace %d: %d misses, fewer than the %d distinct lines", i, got.Misses, len(distinct))
			}
			if capacity >= len(distinct) && (got.Misses != int64(len(distinct)) || got.WriteBacks != 0) {
				t.Fatalf("trace %d: everything fits in %d lines, got %+v", i, capacity, got)
			}
		}
	}
}

func TestTrace(t *testing.T) {
	if _, err := NewTrace(3); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewTrace(3): %v", err)
	}
	tr := mustTrace(t, 0)
	if tr.LineSize() != 64 {
		t.Fatalf("line size %d", tr.LineSize())
	}
	tr.Read(60, 8)   // lines 0, 1
	tr.Write(128, 0) // nothing
	tr.Write(130, 1) // line 2
	type acc struct {
		line  int64
		write bool
	}
	want := []acc{{0, false}, {1, false}, {2, true}}
	var got []acc
	for i := range tr.Len() {
		l, w := tr.At(i)
		got = append(got, acc{l, w})
	}
	if !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
	again := mustTrace(t, 64)
	tr.Replay(again)
	if !slices.Equal(again.acc, tr.acc) {
		t.Errorf("replay recorded %v, want %v", again.acc, tr.acc)
	}
	defer func() {
		if recover() == nil {
			t.Error("OPT with a size below one line did not panic")
		}
	}()
	OPT(tr, 63)
}
