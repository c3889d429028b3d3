//go:build !purego

package cachesim

import "golang.org/x/sys/cpu"

// useAsm selects the AVX-512 path for sets of at most 32 ways; tests clear
// it to run the pure-Go path in the same binary.
var useAsm = cpu.X86.HasAVX512F && cpu.X86.HasBMI1 && cpu.X86.HasBMI2

// narrowChunk bounds the lines of one assembly call (about 0.2 ms at the
// benchmark's rate): the runtime cannot preempt a goroutine inside
// assembly, so a long range goes in chunks, with Go in between. Tests
// lower it to exercise the joins.
var narrowChunk uint64 = 1 << 16

// narrowRange runs accessNarrowGo's loop in assembly when a set fits one
// or two 512-bit registers (at most 32 ways of 32 bits) and reports whether
// it did. The arguments are accessNarrowGo's, already checked by the
// caller: set < sets, len(tags) == sets*ways, and the keys of all n lines
// fit 32 bits.
func narrowRange(tags []uint32, set, sets uint64, ways int, key, w uint32, n uint64) (misses, wbs uint64, ok bool) {
	if !useAsm || ways > 32 {
		return 0, 0, false
	}
	for n > 0 {
		k := min(n, narrowChunk)
		var m, wb uint64
		if ways <= 16 {
			m, wb = lruRange16AVX512(&tags[0], set, sets, uint64(ways), key, w, k)
		} else {
			m, wb = lruRange32AVX512(&tags[0], set, sets, uint64(ways), key, w, k)
		}
		misses += m
		wbs += wb
		n -= k
		// The next chunk starts k lines on: k/sets rounds of the sets
		// later, and one more if it passes the last set.
		set += k % sets
		key += 2 * uint32(k/sets)
		if set >= sets {
			set -= sets
			key += 2
		}
	}
	return misses, wbs, true
}

// lruRange16AVX512 is accessNarrowGo for 1 to 16 ways.
//
//go:noescape
func lruRange16AVX512(tags *uint32, set, sets, ways uint64, key, w uint32, n uint64) (misses, wbs uint64)

// lruRange32AVX512 is accessNarrowGo for 17 to 32 ways.
//
//go:noescape
func lruRange32AVX512(tags *uint32, set, sets, ways uint64, key, w uint32, n uint64) (misses, wbs uint64)
