// Package cachesim simulates the traffic between a last-level cache and
// DRAM for a stream of memory requests. It knows nothing about RNNs: its
// callers (package dre) walk a plan and pass each byte range the plan reads
// or writes to a Sink.
//
// # Model
//
// One level of cache, in front of DRAM, holding lines of LineSize bytes
// (64 by default); no inner levels are modelled, so every request reaches
// it. Replacement is least recently used within a set, or in the whole
// cache when it is fully associative. Writes are write-back with
// write-allocate: a write that misses first fills its line, like a read,
// and the line is written to DRAM only when a dirty copy is evicted or
// flushed.
//
// A request of n bytes at addr is one access to each line it touches.
// DRAM read bytes are fills, Misses*LineSize, whether a read or a write
// missed; DRAM write bytes are write-backs, WriteBacks*LineSize (see
// Stats). Addresses are plain non-negative integers; callers choose the
// layout.
//
// # What is here
//
//   - LRU is the exact simulator for one Config (size, line size,
//     associativity). Its Snapshot and Fingerprint expose the cache's
//     state, so that a caller replaying the same trace again and again can
//     stop once the state no longer changes: every later replay counts the
//     same.
//   - Profile computes stack distances in one pass (Mattson, Gecsei,
//     Slutz and Traiger, "Evaluation techniques for storage hierarchies",
//     IBM Systems Journal 9(2), 1970) and so the Stats of a fully
//     associative LRU of every size at once, write-backs included
//     (Thompson and Smith, "Efficient (stack) algorithms for analysis of
//     write-back and sector memories", ACM TOCS 7(1), 1989).
//   - Trace records line accesses, and OPT replays one with Belady's MIN
//     replacement (Belady, "A study of replacement algorithms for a
//     virtual-storage computer", IBM Systems Journal 5(2), 1966): the
//     fewest misses any cache of that size can have.
//
// # The set-associative LRU
//
// Each set keeps its lines' tags ordered from most to least recently used;
// an access finds its line and moves it to the front. A tag is the line's
// quotient by the number of sets, in 32 bits, with a dirty bit, so a
// 16-way set is one 64-byte cache line and a 12 MiB 16-way cache's 12288
// sets fit a 1 MiB L2 (768 KiB; 1.5 MiB with 64-bit tags). A line whose
// quotient needs more than 31 bits (an address from (2^31-1)·Size/Ways
// on: 1.5 PiB for 12 MiB and 16 ways) switches that cache to 64-bit tags
// for good, order and dirty bits kept.
//
// On amd64 with AVX-512 (golang.org/x/sys/cpu decides at run time; the
// purego build tag leaves it out) sets of up to 32 ways go through
// hand-written assembly, lru_amd64.s: one call per byte range rather than
// per line, and per line one compare of all the set's tags at once, the
// hit's position by TZCNT, and the move to the front as one masked
// VALIGND, with no branch on hit or miss. It exists because the pure-Go
// scan costs a load, a store and a branch for every entry it passes, and
// the benchmark's weight hits sit 10 to 14 entries deep; halving the tags
// alone did not speed it up. On the benchmark trace (BenchmarkLRU, 12 MiB,
// 16 ways, one core) the assembly did a median 290 M line accesses per
// second against 118 M for the pure-Go path with the same tags and 114 M
// for the former 64-bit one, in one alternating run on a loaded machine
// (docs/performance.md, "Cache simulator"). The pure-Go path stays: for
// other machines, for more than 32 ways, and as what the tests hold the
// assembly to.
//
// The tests check LRU against a deliberately simple reference simulator
// (on both paths, the fuzz target on the assembly where the CPU has it),
// the assembly against the pure-Go path request by request, Profile
// against LRU at many sizes, OPT against exhaustive search on
// small traces, and the whole model against valgrind's cachegrind on a
// real program.
package cachesim
