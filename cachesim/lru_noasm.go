//go:build purego || !amd64

package cachesim

// useAsm is always false without the assembly; the tests that compare the
// two paths then compare the pure-Go path with itself.
var useAsm = false

// narrowChunk is the assembly's lines per call; the tests set it.
var narrowChunk uint64 = 1 << 16

func narrowRange(tags []uint32, set, sets uint64, ways int, key, w uint32, n uint64) (misses, wbs uint64, ok bool) {
	return 0, 0, false
}
