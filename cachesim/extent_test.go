package cachesim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// extOp is one request of an ExtentLRU test trace.
type extOp struct {
	write   bool
	addr, n int64
}

func (o extOp) String() string {
	if o.write {
		return fmt.Sprintf("W(%d,%d)", o.addr, o.n)
	}
	return fmt.Sprintf("R(%d,%d)", o.addr, o.n)
}

func extApply(s Sink, o extOp) {
	if o.write {
		s.Write(o.addr, o.n)
	} else {
		s.Read(o.addr, o.n)
	}
}

func extMust(t testing.TB, cfg Config) (*ExtentLRU, *LRU) {
	t.Helper()
	e, err := NewExtentLRU(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLRU(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, l
}

// extCheck verifies the ExtentLRU's internal invariants: both trees hold
// the same nodes in key order with heap-ordered priorities and correct
// sums; extents are disjoint; each extent's virtual times lie above the
// key of the next older one; no two stack neighbours could merge; and the
// line count matches and fits the capacity.
func extCheck(t testing.TB, c *ExtentLRU) {
	t.Helper()
	var inorder [extTrees][]int32
	var walk func(tr int, x int32) uint64
	walk = func(tr int, x int32) uint64 {
		if x == 0 {
			return 0
		}
		n := &c.nodes[x]
		for _, k := range n.kid[tr] {
			if k != 0 && c.nodes[k].pri > n.pri {
				t.Fatalf("tree %d: heap order broken at node %d", tr, x)
			}
		}
		s := walk(tr, n.kid[tr][0])
		inorder[tr] = append(inorder[tr], x)
		s += n.size() + walk(tr, n.kid[tr][1])
		if tr == extByTime && s != n.sum {
			t.Fatalf("node %d: sum %d, want %d", x, n.sum, s)
		}
		return s
	}
	total := walk(extByTime, c.root[extByTime])
	walk(extByAddr, c.root[extByAddr])
	if total != c.lines || total > c.cap {
		t.Fatalf("lines: trees hold %d, counter %d, capacity %d", total, c.lines, c.cap)
	}
	if len(inorder[0]) != len(inorder[1]) || len(inorder[0]) != c.Len() {
		t.Fatalf("trees hold %d and %d nodes, Len %d", len(inorder[0]), len(inorder[1]), c.Len())
	}
	for i, x := range inorder[extByAddr] {
		if n := &c.nodes[x]; n.lo > n.hi {
			t.Fatalf("extent [%d,%d] is empty", n.lo, n.hi)
		}
		if i > 0 && c.nodes[inorder[extByAddr][i-1]].hi >= c.nodes[x].lo {
			t.Fatalf("extents overlap or are out of address order at %d", i)
		}
	}
	byTime := inorder[extByTime]
	for i := 1; i < len(byTime); i++ {
		o, n := &c.nodes[byTime[i-1]], &c.nodes[byTime[i]]
		if n.key-n.size()+1 <= o.key || n.key > c.clock {
			t.Fatalf("times: extent [%d,%d] key %d over [%d,%d] key %d (clock %d)", n.lo, n.hi, n.key, o.lo, o.hi, o.key, c.clock)
		}
		if n.lo == o.hi+1 && n.dirty == o.dirty {
			t.Fatalf("not canonical: [%d,%d] over [%d,%d] could merge", n.lo, n.hi, o.lo, o.hi)
		}
	}
}

// extCompare replays ops through an ExtentLRU and a fully associative LRU
// and compares every counter after every request, the state (snapshots,
// fingerprints and the invariants) along the way and at the end, and all
// of it again after Flush.
func extCompare(t testing.TB, cfg Config, ops []extOp) {
	t.Helper()
	e, l := extMust(t, cfg)
	every := max(1, len(ops)/64)
	for i, o := range ops {
		extApply(e, o)
		extApply(l, o)
		if got, want := e.Stats(), l.Stats(); got != want {
			t.Fatalf("after request %d %v: got %+v, want %+v", i, o, got, want)
		}
		if i%every == 0 || i == len(ops)-1 {
			extCheck(t, e)
			if !e.Snapshot().Equal(l.Snapshot()) {
				t.Fatalf("after request %d %v: state differs:\n got %v\nwant %v", i, o, e.Snapshot().entries, l.Snapshot().entries)
			}
			if e.Fingerprint() != l.Fingerprint() {
				t.Fatalf("after request %d: fingerprints differ", i)
			}
		}
	}
	e.Flush()
	l.Flush()
	extCheck(t, e)
	if got, want := e.Stats(), l.Stats(); got != want {
		t.Fatalf("after Flush: got %+v, want %+v", got, want)
	}
	if !e.Snapshot().Equal(l.Snapshot()) {
		t.Fatalf("state after Flush differs:\n got %v\nwant %v", e.Snapshot().entries, l.Snapshot().entries)
	}
}

var extConfigs = []struct {
	name string
	cfg  Config
}{
	{"1line", Config{Size: 64, Ways: FullyAssociative}},
	{"2lines", Config{Size: 128, Ways: FullyAssociative}},
	{"16lines", Config{Size: 16 * 64, Ways: FullyAssociative}},
	{"100lines-128B", Config{Size: 100 * 128, LineSize: 128, Ways: FullyAssociative}},
	{"512lines-ways=lines", Config{Size: 512 * 64, Ways: 512}},
}

// extTraces returns the named test traces for a cache of lines lines of
// line bytes.
func extTraces(rng *rand.Rand, line, lines int64) map[string][]extOp {
	tr := map[string][]extOp{}
	// Random unaligned ranges up to twice the cache, over a region four
	// times its size: overlapping, partial, mixed reads and writes.
	var ops []extOp
	for range 600 {
		ops = append(ops, extOp{write: rng.IntN(3) == 0, addr: rng.Int64N(4 * lines * line), n: rng.Int64N(2*lines*line + 1)})
	}
	tr["random"] = ops
	// Short ranges in a hot region a bit larger than the cache.
	ops = nil
	for range 2000 {
		ops = append(ops, extOp{write: rng.IntN(2) == 0, addr: rng.Int64N(lines*line + 3*line), n: 1 + rng.Int64N(3*line)})
	}
	tr["hot"] = ops
	// Blocks written in reverse address order, then the whole region read
	// forwards, then backwards block by block: many pieces per request.
	ops = nil
	for round := range 4 {
		span := lines + int64(round) - 2
		for b := span - 1; b >= 0; b-- {
			ops = append(ops, extOp{write: b%3 == 0, addr: b * line, n: line})
		}
		ops = append(ops, extOp{addr: 0, n: max(span, 1) * line})
		for b := span - 1; b >= 0; b -= 2 {
			ops = append(ops, extOp{addr: b * line, n: 1})
		}
	}
	tr["reversed"] = ops
	// Every other line written, then everything read: more than 32 pieces.
	ops = nil
	for round := range 3 {
		for l := int64(round % 2); l < 3*lines; l += 2 {
			ops = append(ops, extOp{write: true, addr: l*line + line/2, n: 1})
		}
		ops = append(ops, extOp{addr: line / 3, n: 3 * lines * line}, extOp{write: true, addr: lines * line, n: lines * line / 2})
	}
	tr["interleaved"] = ops
	// A cache exactly full, one line short and one line over, re-read.
	ops = nil
	for _, k := range []int64{lines, lines - 1, lines + 1, lines} {
		for range 3 {
			ops = append(ops, extOp{addr: 0, n: max(k, 1) * line})
			ops = append(ops, extOp{write: true, addr: 0, n: max(k, 1) * line})
		}
	}
	tr["exactly-full"] = ops
	// Streaming matrix-vector products: a matrix three times the cache read
	// whole, beside small vectors read and written, step after step.
	ops = nil
	mat := 3 * lines * line
	for range 5 {
		ops = append(ops,
			extOp{addr: mat + 8192, n: 2 * line},
			extOp{addr: 0, n: mat},
			extOp{write: true, addr: mat + 16384, n: line + 7},
			extOp{addr: mat + 16384, n: 5},
		)
	}
	tr["streaming"] = ops
	return tr
}

func TestExtentLRUMatchesLRU(t *testing.T) {
	for _, tc := range extConfigs {
		cfg := tc.cfg
		cfg.EnsureDefaults()
		rng := rand.New(rand.NewPCG(3, uint64(cfg.Lines())))
		for name, ops := range extTraces(rng, cfg.LineSize, cfg.Lines()) {
			t.Run(tc.name+"/"+name, func(t *testing.T) { extCompare(t, tc.cfg, ops) })
		}
	}
}

// TestExtentLRUStackDistance follows the distance formula by hand: lines
// 10..19 then 0..9 are read, then 0..19. Lines 0..9 are at distance 10 and
// lines 10..19 at distance 20, so a 16-line cache hits the first ten and
// misses the rest, and a 20-line cache hits all of them.
func TestExtentLRUStackDistance(t *testing.T) {
	for _, tc := range []struct {
		lines      int64
		hits, miss int64
	}{{16, 10, 10}, {19, 10, 10}, {20, 20, 0}, {10, 10, 10}, {9, 0, 20}} {
		c, _ := extMust(t, Config{Size: tc.lines * 64, Ways: FullyAssociative})
		c.Read(640, 640)
		c.Read(0, 640)
		c.ResetStats()
		c.Read(0, 1280)
		if s := c.Stats(); s.Hits != tc.hits || s.Misses != tc.miss {
			t.Errorf("%d lines: %d hits, %d misses, want %d and %d", tc.lines, s.Hits, s.Misses, tc.hits, tc.miss)
		}
	}
}

// TestExtentLRUCanonical checks the extent list: a stream of adjacent
// requests is one extent, a write splits off a dirty extent, and Flush
// merges what then only differed in dirtiness.
func TestExtentLRUCanonical(t *testing.T) {
	c, _ := extMust(t, Config{Size: 1 << 20, Ways: FullyAssociative})
	for i := range int64(100) {
		c.Read(i*100, 100)
	}
	want := []Extent{{First: 0, Last: 156}}
	if got := c.Extents(nil); !slices.Equal(got, want) {
		t.Fatalf("after a stream: %v, want %v", got, want)
	}
	c.Write(64*50, 64*10)
	want = []Extent{{50, 59, true}, {60, 156, false}, {0, 49, false}}
	if got := c.Extents(nil); !slices.Equal(got, want) {
		t.Fatalf("after a write: %v, want %v", got, want)
	}
	c.Flush()
	want = []Extent{{50, 59, false}, {60, 156, false}, {0, 49, false}}
	if got := c.Extents(nil); !slices.Equal(got, want) {
		t.Fatalf("after Flush: %v, want %v", got, want)
	}
	if got := c.Stats().WriteBacks; got != 10 {
		t.Errorf("Flush wrote back %d lines, want 10", got)
	}
	c.Read(0, 64*50)
	want = []Extent{{0, 49, false}, {50, 59, false}, {60, 156, false}}
	if got := c.Extents(nil); !slices.Equal(got, want) {
		t.Fatalf("after reading 0..49: %v, want %v", got, want)
	}
	c.Read(64*50, 64*10) // continues 0..49 in address and in recency
	want = []Extent{{0, 59, false}, {60, 156, false}}
	if got := c.Extents(nil); !slices.Equal(got, want) {
		t.Fatalf("after reading 50..59: %v, want %v", got, want)
	}
}

func TestNewExtentLRU(t *testing.T) {
	if _, err := NewExtentLRU(Config{Size: 4096, Ways: 4}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("set-associative config: err %v, want ErrInvalidConfig", err)
	}
	if _, err := NewExtentLRU(Config{Size: 100, Ways: FullyAssociative}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("size not a multiple of the line: err %v, want ErrInvalidConfig", err)
	}
	c, err := NewExtentLRU(Config{Size: 4096, Ways: FullyAssociative})
	if err != nil {
		t.Fatal(err)
	}
	c.Read(100, 0)
	if c.Stats().Accesses != 0 || c.Len() != 0 {
		t.Error("a zero-length request touched the cache")
	}
	c.Write(0, 4096)
	before := c.Extents(nil)
	c.ResetStats()
	if c.Stats() != (Stats{LineSize: 64}) || !slices.Equal(c.Extents(nil), before) {
		t.Errorf("ResetStats: stats %+v, extents %v, want zero stats and %v", c.Stats(), c.Extents(nil), before)
	}
	if c.Config().Ways != FullyAssociative || c.Config().LineSize != 64 {
		t.Errorf("Config %+v", c.Config())
	}
	defer func() {
		if recover() == nil {
			t.Error("a negative range did not panic")
		}
	}()
	c.Read(-1, 10)
}

// FuzzExtentLRU decodes the input as a cache size and requests and
// compares the ExtentLRU with LRU on them.
func FuzzExtentLRU(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 10, 1, 0, 1, 5, 3, 0, 0, 20})
	f.Add([]byte{1, 1, 0, 2, 0, 3, 0, 4, 200, 0, 0, 0, 0})
	f.Add([]byte{16, 0, 1, 255, 255, 1, 0, 0, 255, 7, 9, 9, 0, 40})
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		lines := 1 + int64(data[0]%32)
		cfg := Config{Size: lines * 64, Ways: FullyAssociative}
		var ops []extOp
		for rest := data[1:]; len(rest) >= 4 && len(ops) < 200; rest = rest[4:] {
			v := binary.LittleEndian.Uint32(rest)
			ops = append(ops, extOp{
				write: v&1 != 0,
				addr:  int64(v>>1&0x3ff) * 8, // 1024 words: 128 lines
				n:     int64(v >> 11 & 0x7ff * 4),
			})
		}
		extCompare(t, cfg, ops)
	})
}

// BenchmarkStreaming replays Schedule A's pattern for one LSTM layer with
// hidden size 512 (the DRE paper's Section IV example): per time step, an
// 8 MiB matrix read whole beside small vectors, through a fully
// associative 2 MiB cache, with the line-by-line LRU and the ExtentLRU.
//
//	go test ./cachesim/ -run '^$' -bench 'BenchmarkStreaming' -benchtime 3x
func BenchmarkStreaming(b *testing.B) {
	cfg := Config{Size: 2 << 20, Ways: FullyAssociative}
	const g = 8 << 20
	step := []extOp{
		{addr: g, n: 2048},                      // x_t
		{write: true, addr: g + 4096, n: 2048},  // xh
		{addr: 0, n: g},                         // G
		{addr: g + 4096, n: 4096},               // xh
		{write: true, addr: g + 8192, n: 8192},  // y
		{addr: g + 8192, n: 8192},               // y
		{write: true, addr: g + 16384, n: 2048}, // c, h
	}
	for _, impl := range []string{"LRU", "ExtentLRU"} {
		b.Run(impl, func(b *testing.B) {
			var c interface {
				Sink
				Stats() Stats
			}
			var err error
			if impl == "LRU" {
				c, err = NewLRU(cfg)
			} else {
				c, err = NewExtentLRU(cfg)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			steps := 0
			for b.Loop() {
				for range 100 {
					for _, o := range step {
						extApply(c, o)
					}
					steps++
				}
			}
			s := c.Stats()
			b.ReportMetric(float64(s.Accesses)/b.Elapsed().Seconds()/1e6, "Mlines/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
		})
	}
}
