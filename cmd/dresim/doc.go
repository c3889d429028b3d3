// Command dresim sweeps the benchmarks of Thakker, Dasika, Beu and Mattina,
// "Measuring scheduling efficiency of RNNs for NLP applications" (Arm ML
// Research) through a simulated last-level cache, and writes every
// benchmark's DRAM traffic per inference, working set and Data Reuse
// Efficiency (package dre) as CSV, JSON and figures.
//
//	dresim run configs/sweeps/paper.yaml -o dresim-out/paper    # Table I and the applications
//	dresim table1 -o dresim-out/table1                          # configs/sweeps/table1.yaml
//	dresim run paper --shard 0/4 -o dresim-out/paper-0          # one of four shards ...
//	dresim merge dresim-out/paper-? -o dresim-out/paper         # ... joined
//	dresim plot dresim-out/paper                                # redraw the figures
//	dresim report dresim-out/paper                              # the numbers, as Markdown
//
// The sweeps, their analysis and their output are package dre/sweep (its
// documentation says why a sweep is fast and what the output directory
// holds); this command turns flags into that package's options. It is
// also the only place that reads the environment: without --shard,
// `dresim run` takes its shard from an indexed batch job, a Kubernetes
// Indexed Job (JOB_COMPLETION_INDEX, with the count from --shard-count or
// DRESIM_SHARD_COUNT) or a Slurm job array (SLURM_ARRAY_TASK_ID, _COUNT,
// _MIN, _STEP, _MAX); flags override the environment, and a bad or
// out-of-range value is refused by name (shardenv.go; docs/deploy.md).
//
// On Ctrl-C (or SIGTERM) a run stops handing out work, writes the rows
// finished by then, results.json and the figures, and exits with status
// 130; a second Ctrl-C ends the process at once.
package main
