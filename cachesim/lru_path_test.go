package cachesim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// paths runs f once per implementation of the set-associative access: the
// assembly (where the CPU has it) and pure Go, restoring the selection
// afterwards.
func paths(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAsm
	defer func() { useAsm = saved }()
	asms := []bool{false}
	if saved {
		asms = append(asms, true)
	}
	for _, asm := range asms {
		useAsm = asm
		name := "go"
		if asm {
			name = "asm"
		}
		t.Run(name, f)
	}
}

// pathCases are caches of many associativities up to 32 ways (the
// assembly's range: one register up to 16, two up to 32) and beyond it,
// with 2 to 5 sets.
func pathCases() []lruCase {
	var cs []lruCase
	for _, ways := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 20, 31, 32, 33, 40} {
		for _, sets := range []int{2, 3, 5} {
			cs = append(cs, lruCase{fmt.Sprintf("%dway-%dsets", ways, sets), Config{Size: int64(ways*sets) * 64, Ways: ways}})
		}
	}
	return cs
}

// TestLRUPathsMatchReference replays every trace through the LRU on each
// path and through the reference, comparing all counters after every
// request and the state at the end (compareLRU).
func TestLRUPathsMatchReference(t *testing.T) {
	paths(t, func(t *testing.T) {
		testLRUPathsMatchReference(t)
		if useAsm {
			defer func(c uint64) { narrowChunk = c }(narrowChunk)
			narrowChunk = 7 // long ranges in many calls, joins across every set
			t.Run("chunk=7", testLRUPathsMatchReference)
		}
	})
}

func testLRUPathsMatchReference(t *testing.T) {
	for _, tc := range append(pathCases(), lruCases...) {
		for name, ops := range traces(tc.cfg, 2) {
			c := mustLRU(t, tc.cfg)
			ref := newRefLRU(tc.cfg)
			t.Run(tc.name+"/"+name, func(t *testing.T) { compareLRU(t, c, ref, ops) })
		}
	}
}

// TestLRUPathsAgree runs one cache per path side by side on random traces
// and the benchmark's trace, comparing counters after every request and
// the state (snapshot and fingerprint) every few requests.
func TestLRUPathsAgree(t *testing.T) {
	if !useAsm {
		t.Skip("no assembly path on this machine or build")
	}
	defer func() { useAsm = true }()
	cfgs := []Config{{Size: 12 << 20 / 64, Ways: 16}, {Size: 12 << 20 / 64, Ways: 8}, {Size: 12 << 20 / 64, Ways: 32}}
	for _, tc := range pathCases() {
		cfgs = append(cfgs, tc.cfg)
	}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("%d/%d", cfg.Size, cfg.Ways), func(t *testing.T) {
			asm, goc := mustLRU(t, cfg), mustLRU(t, cfg)
			both := func(i int, o op) {
				t.Helper()
				useAsm = true
				apply(asm, []op{o})
				useAsm = false
				apply(goc, []op{o})
				if a, g := asm.Stats(), goc.Stats(); a != g {
					t.Fatalf("after request %d %v: asm %+v, go %+v", i, o, a, g)
				}
				if i%64 == 0 && (!asm.Snapshot().Equal(goc.Snapshot()) || asm.Fingerprint() != goc.Fingerprint()) {
					t.Fatalf("after request %d %v: states differ", i, o)
				}
			}
			rng := rand.New(rand.NewPCG(uint64(cfg.Size), uint64(cfg.Ways)))
			lines := cfg.Size / 64
			for i, o := range randomOps(rng, 5000, 64, 3*lines, 0.4) {
				both(i, o)
			}
			for i, o := range rangeOps(rng, 300, 64, 3*lines) {
				both(i, o)
			}
			rec := &recorder{}
			newStreamReuse(64).run(rec)
			for range 3 {
				for i, o := range rec.ops {
					both(i, o)
				}
			}
			if !asm.Snapshot().Equal(goc.Snapshot()) {
				t.Fatal("final states differ")
			}
		})
	}
}

// recorder is a Sink that keeps the requests.
type recorder struct{ ops []op }

func (r *recorder) Read(addr, n int64)  { r.ops = append(r.ops, op{false, addr, n}) }
func (r *recorder) Write(addr, n int64) { r.ops = append(r.ops, op{true, addr, n}) }

// TestLRUWiden crosses the end of the 32-bit tags: lines just below
// narrowEnd (whose keys are the largest that fit, 2^32-1), a range that
// reaches it, then lines far beyond and small ones again, against the
// reference after every request.
func TestLRUWiden(t *testing.T) {
	paths(t, func(t *testing.T) {
		for _, ways := range []int{1, 4, 16, 20} {
			for _, lineSize := range []int64{1, 64} {
				cfg := Config{Size: int64(3*ways) * lineSize, LineSize: lineSize, Ways: ways}
				t.Run(fmt.Sprintf("ways=%d/line=%d", ways, lineSize), func(t *testing.T) {
					c := mustLRU(t, cfg)
					ref := newRefLRU(cfg)
					end := int64(c.narrowEnd) * lineSize // first byte of the first wide line
					var ops []op
					for i := range int64(2 * ways) {
						ops = append(ops, op{i%3 == 0, i * lineSize, 1})
					}
					for i := range int64(3*ways + 2) {
						ops = append(ops, op{i%2 == 0, end - (i+1)*lineSize, lineSize})
					}
					ops = append(ops,
						op{false, end - 5*lineSize, 5 * lineSize}, // ends at the last narrow line: still narrow
						op{false, 0, 2 * lineSize},
					)
					check := func(ops []op) {
						t.Helper()
						for i, o := range ops {
							apply(c, []op{o})
							apply(ref, []op{o})
							if got, want := c.Stats(), ref.stats; got != want {
								t.Fatalf("after request %d %v: got %+v, want %+v", i, o, got, want)
							}
						}
						if got, want := c.Snapshot().entries, ref.entries(); !slices.Equal(got, want) {
							t.Fatalf("state differs:\n got %v\nwant %v", got, want)
						}
					}
					check(ops)
					if c.narrow == nil {
						t.Fatal("widened before any line reached narrowEnd")
					}
					before := c.Fingerprint()
					c.widen()
					if c.Fingerprint() != before {
						t.Fatal("widen changed the state")
					}
					c = mustLRU(t, cfg)
					ref = newRefLRU(cfg)
					check(ops)
					check([]op{
						{true, end - 3*lineSize, 4 * lineSize}, // reaches narrowEnd
						{false, 1 << 62, 3 * lineSize},
						{true, 0, lineSize},
						{false, end - 2*lineSize, 2 * lineSize},
					})
					if c.narrow != nil {
						t.Fatal("still narrow after a line at narrowEnd")
					}
					check(ops)
					c.Flush()
					ref.Flush()
					check(nil)
				})
			}
		}
	})
}

// TestNarrowRangeStaysInBounds runs the set loop on tags with poisoned
// neighbours on both sides, every way count and start set, and checks that
// the neighbours are untouched and the result matches the pure-Go loop.
func TestNarrowRangeStaysInBounds(t *testing.T) {
	if !useAsm {
		t.Skip("no assembly path on this machine or build")
	}
	const guard, poison = 37, 0xdeadbeef
	rng := rand.New(rand.NewPCG(5, 5))
	for ways := 1; ways <= 32; ways++ {
		for _, sets := range []uint64{1, 2, 3, 7} {
			n := int(sets) * ways
			all := make([]uint32, guard+n+guard)
			for i := range all {
				all[i] = poison
			}
			tags := all[guard : guard+n]
			for i := range tags {
				tags[i] = 0
			}
			want := slices.Clone(tags)
			for range 200 {
				set := rng.Uint64N(sets)
				key := uint32(rng.IntN(4*ways)+1)<<1 | 1
				w := uint32(rng.IntN(2))
				cnt := 1 + rng.Uint64N(3*sets*uint64(ways))
				m, wb, ok := narrowRange(tags, set, sets, ways, key, w, cnt)
				if !ok {
					t.Fatalf("ways %d: the assembly declined", ways)
				}
				wm, wwb := accessNarrowGo(want, set, sets, ways, key, w, cnt)
				if m != wm || wb != wwb || !slices.Equal(tags, want) {
					t.Fatalf("ways %d sets %d: asm (%d, %d) %v, go (%d, %d) %v", ways, sets, m, wb, tags, wm, wwb, want)
				}
			}
			for i, v := range all {
				if (i < guard || i >= guard+n) && v != poison {
					t.Fatalf("ways %d sets %d: wrote %#x at %d outside the tags", ways, sets, v, i-guard)
				}
			}
		}
	}
}
