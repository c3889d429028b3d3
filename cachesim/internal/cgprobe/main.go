// Command cgprobe reads memory in the pattern of package cgpattern, for
// the cachesim test that runs it under valgrind's cachegrind. It prints
// the address of each array, so that the test can simulate the same
// accesses, and a checksum that keeps the reads from being optimized away.
// With -passes 0 it only allocates, which gives the test the cache misses
// of the Go runtime alone.
package main

import (
	"flag"
	"fmt"
	"runtime/debug"
	"unsafe"

	"rnnserve/cachesim/internal/cgpattern"
)

func main() {
	passes := flag.Int("passes", 1, "passes over the pattern")
	flag.Parse()
	debug.SetGCPercent(-1) // no collector touching memory behind our back

	arrays := make([][]byte, len(cgpattern.Sizes))
	for i, n := range cgpattern.Sizes {
		arrays[i] = make([]byte, n)
		fmt.Printf("array %d %d\n", i, uintptr(unsafe.Pointer(unsafe.SliceData(arrays[i]))))
	}
	var sum byte
	cgpattern.Walk(*passes, func(a, off int) { sum += arrays[a][off] })
	fmt.Printf("sum %d\n", sum)
}
