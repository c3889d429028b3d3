// Package counters measures the memory traffic of real code, to set beside
// the traffic package dre models for the same plan: hardware performance
// counters where the machine has them, and valgrind's cache simulation of
// the real binary everywhere valgrind runs.
//
// # Sources
//
//   - perf: core events of the thread that runs the inference (or of one
//     CPU), opened through github.com/hodgesds/perf-utils: cycles,
//     instructions, the generic cache references and misses, and the
//     last-level cache's loads, load misses, stores and store misses.
//   - uncore: bytes read and written at the memory controller, from the
//     Intel uncore_imc_* PMUs' CAS counts (one CAS moves a 64-byte line;
//     the scale and unit sysfs gives for each event turn counts into
//     bytes) or AMD amd_umc_* PMUs when the kernel names CAS events for
//     them in sysfs. perf-utils opens only the kernel's generic event
//     types, so these are opened with perf_event_open directly
//     (golang.org/x/sys/unix), with the PMU's type number from sysfs.
//     Uncore counters count the whole machine (or socket), not a thread.
//   - cachegrind: the program run under valgrind (Valgrind), whose cache
//     simulator counts the last-level misses and, under callgrind with
//     --simulate-wb=yes, the dirty evictions (write-backs) of the real
//     binary: the same quantities as dre's model, on the real access order.
//
// The hardware sources need Linux; elsewhere every event is unavailable
// with ErrUnsupportedOS.
//
// # Never a silent zero
//
// Detect tries every event once and records, per event, either that it
// opened or an *UnavailableError saying why not: the machine has no PMU
// for it (a virtual machine usually has none), perf_event_paranoid or
// missing privileges forbid it, or the PMU does not know the event. Counts
// keep "not measured" apart from zero: an event that could not be opened,
// or whose read gave no value, is absent from Counts, never 0.
//
// perf-utils reports failures in two ways that this package handles: its
// constructors return a profiler together with an error when some events
// failed (the profiler then silently lacks them), and it formats the
// kernel's errno into the error's text with %q, so errors.Is cannot find
// it. Events are therefore opened one per profiler, so that each error
// belongs to one event, and the errno is recognised by the kernel's own
// message for it (syscall.Errno.Error), which the text contains.
//
// # What the numbers mean
//
// Last-level misses times the line size approximate the DRAM bytes read
// (hardware prefetches that hit are not misses, prefetches that fetch are
// not always counted, and write-backs are not misses at all); the memory
// controller's CAS counts are the DRAM traffic itself, of everything the
// machine did at the time. Measure subtracts an idle baseline: the same
// counters over an equally long idle interval, so that the counters' own
// overhead and (for uncore) the machine's background traffic are not
// charged to the inference.
package counters
