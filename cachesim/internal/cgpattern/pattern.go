// Package cgpattern is the memory access pattern that the cachesim tests
// run twice: for real, in the cgprobe program under valgrind's cachegrind,
// and simulated, through cachesim's LRU. Sharing the code keeps the two
// from drifting apart.
//
// The pattern is tuned for the cache the test asks cachegrind to model: an
// LL of 1 MiB, 8-way, 64-byte lines (2048 sets), behind a 32 KiB D1. Each
// pass reads one byte of every line of a hot array (4 lines per LL set),
// a fresh chunk of a streamed array (2 lines per set), lines of a third
// array that all fall in one LL set (9 lines for 8 ways, so LRU misses all
// of them), and random lines of a fourth array (2 per set on average), so
// that whether a hot line survives to the next pass depends on exact LRU
// order. Every array is far larger than D1.
package cgpattern

const (
	lineSize       = 64
	hotSize        = 512 << 10
	streamSize     = 8 << 20
	streamChunk    = 256 << 10
	conflictStride = 128 << 10 // LL sets * lineSize: the same LL (and D1) set
	conflictLines  = 9
	conflictRounds = 64
	randomSize     = 2 << 20
	randomReads    = 4096
)

// Sizes are the byte sizes of the arrays Walk indexes, in order.
var Sizes = []int{hotSize, streamSize, conflictStride * conflictLines, randomSize}

// Walk calls visit(array, offset) once for each one-byte read of the
// pattern, passes times over.
func Walk(passes int, visit func(array, offset int)) {
	rng := uint64(0x9e3779b97f4a7c15)
	for p := range passes {
		for off := 0; off < hotSize; off += lineSize {
			visit(0, off)
		}
		start := p * streamChunk % streamSize
		for off := start; off < start+streamChunk; off += lineSize {
			visit(1, off)
		}
		for range conflictRounds {
			for k := range conflictLines {
				visit(2, k*conflictStride)
			}
		}
		for range randomReads {
			rng ^= rng << 13
			rng ^= rng >> 7
			rng ^= rng << 17
			visit(3, int(rng%(randomSize/lineSize))*lineSize)
		}
	}
}
