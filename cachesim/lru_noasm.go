//go:build purego || !amd64

package cachesim

// useAsm is always false without the assembly; the tests that compare the
// two paths then compare the pure-Go path with itself.
var useAsm = false

func narrowRange(tags []uint32, set, sets uint64, ways int, key, w uint32, n uint64) (misses, wbs uint64, ok bool) {
	return 0, 0, false
}
