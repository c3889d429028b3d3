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
// The tests check LRU against a deliberately simple reference simulator,
// Profile against LRU at many sizes, OPT against exhaustive search on
// small traces, and the whole model against valgrind's cachegrind on a
// real program.
package cachesim
