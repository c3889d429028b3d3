// Package sweep runs the benchmarks of Thakker, Dasika, Beu and Mattina,
// "Measuring scheduling efficiency of RNNs for NLP applications" (Arm ML
// Research) through a simulated last-level cache, and writes every
// benchmark's DRAM traffic per inference, working set and Data Reuse
// Efficiency (package dre) as CSV, JSON and figures. It is the library
// behind the dresim command (cmd/dresim), which only turns flags into the
// options of this package; it lives under dre because it is dre's
// analysis applied to a grid, and it imports dre, never the reverse. Its
// errors begin "dresim:", as the command shows them.
//
// A sweep file (configs/sweeps/*.yaml; ParseSweep) names a grid, the
// paper's Table I (hidden size, layers, cell, input length, vocabulary),
// and applications from the catalog of package models (GNMT, DeepSpeech1,
// LM in two shapes, byteNER; optionally again without their softmax
// head), the schedules (A, A+, P, and P with bf16 or int8 weights: P-bf16,
// P-int8, whose plans read 2 bytes a weight, or 1 plus 8 a row for int8's
// scale and sum) and the caches. Each model at each
// input length under each schedule is a unit: one dry plan, walked once
// per cache, one row per cache. GNMT's unit is its encoder's plan followed
// by its decoder's (schedule.DecoderProgram), so the decoder's traffic is
// that of a plan the engine runs, and A+ applies to the encoder only.
//
// # Why it is fast
//
// The default sweep is 3936 rows, each 100 inferences of a plan of up to a
// few gigabytes, through caches of 2 to 25 MiB: hundreds of billions of
// cache-line accesses if simulated one line at a time. It takes seconds
// because:
//
//   - plans are dry: models.Shape makes networks without weights, so a
//     plan is only its list of steps and byte regions, built once per unit
//     and shared by the unit's caches;
//   - the fully associative LRU is cachesim.ExtentLRU, whose cost follows
//     the number of contiguous ranges in the trace and the cache, not the
//     number of lines (a 32 MiB G read whole is one range);
//   - dre.Analyze stops simulating once the cache's state repeats: an LRU
//     that starts empty is in its steady state after the second inference,
//     and the other 98 are added without being replayed;
//   - units run on every core (a worker pool, RunOptions.Jobs), and the
//     rows are written in the sweep's order as the prefix of finished units
//     grows.
//
// None of this changes a number: dre's tests prove the steady-state
// shortcut exact, and this package's tests compare rows with a plain
// line-by-line, fully associative cachesim.LRU replaying all 100
// inferences.
//
// # Output
//
// Run writes an output directory: ManifestFile first, then CSVFile and
// JSONLFile, written and flushed unit by unit, in order, so they are valid
// whenever the process stops; ResultsFile (the sweep, how the run ended,
// every row) and the figures (FiguresDir) are written at the end, or when
// the context is cancelled, after the analyses under way finish, with
// every row finished by then.
//
// Sharding (Shard) gives unit i to shard i mod N, so every shard gets its
// share of the large models; Merge checks that the shards come from the
// same sweep (its fingerprint) and that none is missing or repeated, and
// WriteDir writes what one unsharded run writes.
//
// ReadOutput, which merge, report and plot read a directory through,
// treats it as hostile: sweep.json is at most MaxManifestBytes, has no
// unknown key, and its sweep must validate and agree with its fingerprint
// and row counts; rows.jsonl holds at most the rows the manifest names,
// each on a line of at most MaxRowBytes with an index inside the sweep
// (FuzzOutput).
//
// # Figures
//
// Plot draws fig3_dre_share, fig4_dre_share_by_length and
// fig5_dre_share_by_vocab, the paper's Figures 3-5: the share of the
// grid's benchmarks (under Schedule A, which is what the paper measured in
// TensorFlow) whose DRE is above each threshold, one panel per cache
// (smallest first, with Schedule A+ beside A), by input length and by
// vocabulary; and fig6_aplus_over_a, Figure 6: each application's traffic
// under A+ normalised to A, per input length, with the values the paper's
// text gives marked over the bars they belong to. Each is written as PNG,
// SVG and PDF, with its legend beside the data, never over it. Reports and
// figures list caches by size, not by name.
//
// # Measured traffic
//
// Measure runs a model's real inference and compares the traffic measured
// by hardware counters or valgrind (package dre/counters) with the model's.
// Under valgrind it runs an executable (the dresim binary) in its child
// mode, ChildCommand, whose arguments ChildArgs writes and RunChild reads.
package sweep
