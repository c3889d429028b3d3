package cachesim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func mustLRU(t testing.TB, cfg Config) *LRU {
	t.Helper()
	c, err := NewLRU(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLRUSixAccesses follows a two-line cache by hand.
func TestLRUSixAccesses(t *testing.T) {
	c := mustLRU(t, Config{Size: 128, Ways: FullyAssociative})
	steps := []struct {
		op   op
		want Stats // cumulative
	}{
		// line 0 misses; stack [0]
		{op{false, 0, 64}, Stats{Accesses: 1, Misses: 1, ReadMisses: 1}},
		// line 1 misses, filled and dirtied; [1* 0]
		{op{true, 64, 8}, Stats{Accesses: 2, Misses: 2, ReadMisses: 1, WriteMisses: 1}},
		// line 0 hits; [0 1*]
		{op{false, 0, 1}, Stats{Accesses: 3, Hits: 1, Misses: 2, ReadMisses: 1, WriteMisses: 1}},
		// line 2 misses and evicts dirty line 1; [2 0]
		{op{false, 128, 64}, Stats{Accesses: 4, Hits: 1, Misses: 3, ReadMisses: 2, WriteMisses: 1, WriteBacks: 1}},
		// bytes 60..67: line 0 hits and is dirtied, line 1 misses and
		// evicts clean line 2; [1* 0*]
		{op{true, 60, 8}, Stats{Accesses: 6, Hits: 2, Misses: 4, ReadMisses: 2, WriteMisses: 2, WriteBacks: 1}},
		// line 2 misses and evicts dirty line 0; [2 1*]
		{op{false, 130, 4}, Stats{Accesses: 7, Hits: 2, Misses: 5, ReadMisses: 3, WriteMisses: 2, WriteBacks: 2}},
	}
	for i, s := range steps {
		apply(c, []op{s.op})
		s.want.LineSize = 64
		if got := c.Stats(); got != s.want {
			t.Fatalf("after access %d %v: got %+v, want %+v", i+1, s.op, got, s.want)
		}
	}
	if got := c.Stats(); got.ReadBytes() != 320 || got.WriteBytes() != 128 {
		t.Errorf("bytes: read %d write %d, want 320 and 128", got.ReadBytes(), got.WriteBytes())
	}
	want := []uint64{3 << 1, 2<<1 | 1} // line 2 clean, then line 1 dirty
	if got := c.Snapshot().entries; !slices.Equal(got, want) {
		t.Errorf("state %v, want %v", got, want)
	}
	c.Flush()
	if got := c.Stats().WriteBacks; got != 3 {
		t.Errorf("write-backs after Flush: %d, want 3", got)
	}
	c.Flush()
	if got := c.Stats().WriteBacks; got != 3 {
		t.Errorf("a second Flush wrote back again: %d", got)
	}
}

// TestLRUDirectMapped checks set selection by hand: two one-way sets.
func TestLRUDirectMapped(t *testing.T) {
	c := mustLRU(t, Config{Size: 128, Ways: 1})
	c.Write(0, 1)   // line 0 -> set 0, miss
	c.Read(64, 1)   // line 1 -> set 1, miss
	c.Read(128, 1)  // line 2 -> set 0, miss, evicts dirty line 0
	c.Read(64, 1)   // hit
	c.Read(192, 65) // lines 3 (set 1) and 4 (set 0): both miss
	want := Stats{LineSize: 64, Accesses: 6, Hits: 1, Misses: 5, ReadMisses: 4, WriteMisses: 1, WriteBacks: 1}
	if got := c.Stats(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

type lruCase struct {
	name string
	cfg  Config
}

var lruCases = []lruCase{
	{"64lines-4way-16sets", Config{Size: 4096, Ways: 4}},
	{"48lines-4way-12sets", Config{Size: 48 * 64, Ways: 4}},
	{"48lines-16way-3sets", Config{Size: 48 * 64, Ways: 16}},
	{"64lines-8way-8sets", Config{Size: 64 * 64, Ways: 8}},
	{"96lines-12way-8sets", Config{Size: 96 * 64, Ways: 12}},
	{"96lines-32way-3sets", Config{Size: 96 * 64, Ways: 32}},
	{"direct-mapped-32B", Config{Size: 1024, LineSize: 32, Ways: 1}},
	{"2way-2sets-1B", Config{Size: 4, LineSize: 1, Ways: 2}},
	{"fully-40lines", Config{Size: 40 * 64, Ways: FullyAssociative}},
	{"fully-ways=lines", Config{Size: 16 * 64, Ways: 16}},
	{"fully-1line", Config{Size: 64, Ways: FullyAssociative}},
	{"fully-300lines-128B", Config{Size: 300 * 128, LineSize: 128, Ways: FullyAssociative}},
}

// traces returns the named test traces for a cache configuration.
func traces(cfg Config, seed uint64) map[string][]op {
	cfg.EnsureDefaults()
	rng := rand.New(rand.NewPCG(seed, 1))
	line, lines, sets := cfg.LineSize, cfg.Lines(), cfg.Sets()
	ways := lines / sets
	tr := map[string][]op{
		"random-hot":       randomOps(rng, 2000, line, 2*lines, 0.3),
		"random-wide":      randomOps(rng, 2000, line, 8*lines, 0.5),
		"cyclic-capacity":  cyclicOps(5, lines, line),
		"cyclic-capacity+": cyclicOps(5, lines+1, line),
		"one-set-ways":     oneSetOps(5, ways, line, sets),
		"one-set-ways+1":   oneSetOps(5, ways+1, line, sets),
		"long-ranges":      rangeOps(rng, 200, line, lines),
	}
	var mixed []op
	for _, name := range []string{"cyclic-capacity+", "random-hot", "one-set-ways+1", "long-ranges"} {
		mixed = append(mixed, tr[name]...)
	}
	tr["mixed"] = mixed
	return tr
}

// TestLRUMatchesReference replays every trace through the fast LRU and the
// reference and compares all counters after every request, and the full
// state at the end and after Flush.
func TestLRUMatchesReference(t *testing.T) {
	for _, tc := range lruCases {
		for name, ops := range traces(tc.cfg, 1) {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				c := mustLRU(t, tc.cfg)
				ref := newRefLRU(tc.cfg)
				compareLRU(t, c, ref, ops)
			})
		}
	}
}

func compareLRU(t *testing.T, c *LRU, ref *refLRU, ops []op) {
	t.Helper()
	for i, o := range ops {
		apply(c, ops[i:i+1])
		apply(ref, ops[i:i+1])
		if got, want := c.Stats(), ref.stats; got != want {
			t.Fatalf("after request %d %v: got %+v, want %+v", i, o, got, want)
		}
	}
	if got, want := c.Snapshot().entries, ref.entries(); !slices.Equal(got, want) {
		t.Fatalf("state differs:\n got %v\nwant %v", got, want)
	}
	c.Flush()
	ref.Flush()
	if got, want := c.Stats(), ref.stats; got != want {
		t.Fatalf("after Flush: got %+v, want %+v", got, want)
	}
	if got, want := c.Snapshot().entries, ref.entries(); !slices.Equal(got, want) {
		t.Fatalf("state after Flush differs:\n got %v\nwant %v", got, want)
	}
}

func TestLRUResetStatsKeepsContents(t *testing.T) {
	c := mustLRU(t, Config{Size: 4096, Ways: 4})
	c.Write(0, 4096)
	before := c.Snapshot()
	c.ResetStats()
	if got := c.Stats(); got != (Stats{LineSize: 64}) {
		t.Errorf("stats after reset: %+v", got)
	}
	if !c.Snapshot().Equal(before) {
		t.Error("ResetStats changed the contents")
	}
	c.Read(0, 4096)
	if got := c.Stats(); got.Hits != 64 || got.Misses != 0 {
		t.Errorf("warm rerun: %+v, want 64 hits", got)
	}
}

// TestSteadyState shows how a caller detects that repeated runs of one
// trace have reached a steady state, and that every later run then counts
// the same.
func TestSteadyState(t *testing.T) {
	for _, tc := range lruCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.EnsureDefaults()
			rng := rand.New(rand.NewPCG(7, 7))
			ops := randomOps(rng, 500, cfg.LineSize, 3*cfg.Lines()/2, 0.3)
			c := mustLRU(t, cfg)
			prev := c.Snapshot()
			var last Stats
			steady := 0
			for run := 1; run <= 20 && steady == 0; run++ {
				c.ResetStats()
				apply(c, ops)
				last = c.Stats()
				cur := c.Snapshot()
				if cur.Fingerprint() != c.Fingerprint() {
					t.Fatal("LRU.Fingerprint differs from its Snapshot's")
				}
				if cur.Equal(prev) {
					if cur.Fingerprint() != prev.Fingerprint() {
						t.Fatal("equal snapshots with different fingerprints")
					}
					steady = run
				}
				prev = cur
			}
			if steady < 2 {
				t.Fatalf("steady at run %d, want 2..20", steady)
			}
			for range 3 {
				c.ResetStats()
				apply(c, ops)
				if got := c.Stats(); got != last {
					t.Fatalf("after the steady state: %+v, want %+v", got, last)
				}
			}
		})
	}
}

func TestSnapshotDistinguishesStates(t *testing.T) {
	for _, ways := range []int{2, FullyAssociative} {
		t.Run(fmt.Sprint("ways=", ways), func(t *testing.T) {
			cfg := Config{Size: 256, Ways: ways}
			build := func(ops ...op) *LRU {
				c := mustLRU(t, cfg)
				apply(c, ops)
				return c
			}
			a := build(op{false, 0, 1}, op{false, 128, 1})
			states := map[string]*LRU{
				"other order": build(op{false, 128, 1}, op{false, 0, 1}),
				"dirty":       build(op{true, 0, 1}, op{false, 128, 1}),
				"other line":  build(op{false, 0, 1}, op{false, 256, 1}),
				"one more":    build(op{false, 0, 1}, op{false, 128, 1}, op{false, 64, 1}),
			}
			if !a.Snapshot().Equal(build(op{false, 0, 1}, op{false, 128, 1}).Snapshot()) {
				t.Error("the same trace gives different snapshots")
			}
			for name, b := range states {
				if a.Snapshot().Equal(b.Snapshot()) {
					t.Errorf("%s: snapshots equal", name)
				}
				if a.Fingerprint() == b.Fingerprint() {
					t.Errorf("%s: fingerprints equal", name)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Size: 0, LineSize: 64, Ways: 16}, "Size 0 is not positive"},
		{Config{Size: -4096, LineSize: 64, Ways: 16}, "Size -4096 is not positive"},
		{Config{Size: 32, LineSize: 64, Ways: 1}, "Size 32 is smaller than one line"},
		{Config{Size: 100, LineSize: 64, Ways: 1}, "Size 100 is not a multiple of LineSize 64"},
		{Config{Size: 4096, LineSize: 48, Ways: 1}, "LineSize 48 is not a positive power of two"},
		{Config{Size: 4096, LineSize: -64, Ways: 1}, "LineSize -64"},
		{Config{Size: 4096, LineSize: 0, Ways: 1}, "LineSize 0"},
		{Config{Size: 1024, LineSize: 64, Ways: 3}, "Ways 3 does not divide the 16 lines"},
		{Config{Size: 1024, LineSize: 64, Ways: 32}, "Ways 32 exceeds the 16 lines"},
		{Config{Size: 1024, LineSize: 64, Ways: -2}, "Ways -2 is neither positive nor FullyAssociative"},
		{Config{Size: 1024, LineSize: 64, Ways: 0}, "Ways 0"},
		{Config{Size: 1 << 40, LineSize: 1, Ways: FullyAssociative}, "more than 2147483647"},
	}
	for _, b := range bad {
		err := b.cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: got %v, want %q", b.cfg, err, b.want)
		}
		if !strings.HasPrefix(fmt.Sprint(err), "cachesim: ") {
			t.Errorf("%+v: error %q lacks the package prefix", b.cfg, err)
		}
	}
	if _, err := NewLRU(Config{Size: 1000}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewLRU with a bad size: %v", err)
	}
	good := []Config{
		{Size: 12 << 20, LineSize: 64, Ways: 16}, // 12288 sets, not a power of two
		{Size: 64, LineSize: 64, Ways: 1},
		{Size: 1 << 20, LineSize: 128, Ways: FullyAssociative},
		{Size: 1 << 10, LineSize: 64, Ways: 16},
	}
	for _, cfg := range good {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

func TestEnsureDefaults(t *testing.T) {
	cfg := Config{Size: 12 << 20}
	cfg.EnsureDefaults()
	if want := (Config{Size: 12 << 20, LineSize: 64, Ways: 16}); cfg != want {
		t.Errorf("got %+v, want %+v", cfg, want)
	}
	if got := cfg.Sets(); got != 12288 {
		t.Errorf("sets %d, want 12288", got)
	}
	c := mustLRU(t, Config{Size: 1 << 20, Ways: FullyAssociative})
	if got := c.Config(); got.LineSize != 64 || got.Ways != FullyAssociative || got.Sets() != 1 {
		t.Errorf("config %+v", got)
	}
}

func TestLRUEmptyAndBadRanges(t *testing.T) {
	c := mustLRU(t, Config{Size: 1024})
	c.Read(100, 0)
	c.Write(0, 0)
	if got := c.Stats(); got.Accesses != 0 {
		t.Errorf("zero-length requests counted: %+v", got)
	}
	c.Read(math.MaxInt64-64, 64) // the last whole line of the address space
	for _, r := range []op{{false, -1, 1}, {true, 0, -1}, {false, math.MaxInt64, 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v did not panic", r)
				}
			}()
			apply(c, []op{r})
		}()
	}
}

// TestLineTable checks the hash table against a map through inserts and
// deletions, growth, and clustered keys.
func TestLineTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	tab := newLineTable(0)
	want := map[uint64]int32{}
	for i := range 200000 {
		var line uint64
		if rng.IntN(2) == 0 {
			line = rng.Uint64N(3000)
		} else {
			line = rng.Uint64N(1<<63 - 1)
		}
		if _, ok := want[line]; ok && rng.IntN(2) == 0 {
			tab.remove(line)
			delete(want, line)
		} else {
			tab.put(line, int32(i))
			want[line] = int32(i)
		}
		if i%1000 == 0 {
			if tab.n != len(want) {
				t.Fatalf("size %d, want %d", tab.n, len(want))
			}
			for l, v := range want {
				if got, ok := tab.get(l); !ok || got != v {
					t.Fatalf("get(%d) = %d, %v; want %d", l, got, ok, v)
				}
			}
		}
		if _, ok := tab.get(line + 1); ok != hasKey(want, line+1) {
			t.Fatalf("get(%d) presence %v disagrees with the map", line+1, ok)
		}
	}
}

func hasKey(m map[uint64]int32, k uint64) bool {
	_, ok := m[k]
	return ok
}
