// Package benchcpu guards benchmarks that size their work by GOMAXPROCS
// (a pool of workers, a plan split over them) against a -cpu list.
//
// Given several -cpu values, Go's testing runs each sub-benchmark's first
// run under the first value at the process's GOMAXPROCS instead, and
// runs the parent benchmark function once, at that setting too
// (golang/go#49980): the first row named for one core would time two,
// and a pool the parent started would have the wrong width for the rest.
// Such benchmarks take one -cpu value a process, as
// scripts/bench_compare.py runs them (with GOMAXPROCS set beside it).
package benchcpu

import (
	"flag"
	"strings"
	"testing"
)

// One fails b when -cpu lists more than one value.
func One(b testing.TB) {
	b.Helper()
	if f := flag.Lookup("test.cpu"); f != nil && strings.Contains(f.Value.String(), ",") {
		b.Fatalf("-cpu %s: give one value a process (Go runs a sub-benchmark's first run at the process's GOMAXPROCS, golang/go#49980)", f.Value)
	}
}
