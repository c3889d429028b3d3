// Package dre measures how well a schedule reuses data in the cache: it
// replays a plan's memory requests through a simulated last-level cache and
// reports the DRAM traffic per inference, the working set and their ratio,
// Data Reuse Efficiency, as defined by Thakker, Dasika, Beu and Mattina,
// "Measuring scheduling efficiency of RNNs for NLP applications" (Arm ML
// Research; Section III-A for DRE, Section V for the LRU analytical model
// this package follows).
//
// # What it computes
//
// A plan (package schedule) is one inference as an ordered list of steps,
// each reading and then writing byte regions of named buffers. A Layout
// places the buffers at addresses, in plan order, each aligned to Align
// (4096) bytes; weights come first, so every plan of one Program puts the
// weights at the same addresses. The plan is replayed N times back to back
// (Options.Runs, 100 by default, as the paper measured) through one cache
// that starts empty, so the first run is cold and the others find what the
// previous run left. The cache is a write-back, write-allocate LRU
// (package cachesim): fully associative by default, simulated by
// cachesim.ExtentLRU, whose cost follows the number of contiguous ranges
// rather than lines; set-associative caches use cachesim.LRU. Per run,
//
//	read bytes  = misses × line size        (every miss fills a line)
//	write bytes = write-backs × line size   (dirty lines evicted)
//
// Dirty lines still in the cache after the last run are not flushed, as
// nothing forces them out of a real cache either.
//
//	AvgRW = (Σ read bytes + Σ write bytes) / N
//	DRE   = AvgRW / working set
//
// DRE is 1 when a run moves as much data as its working set, below 1 when
// the working set stays cached between runs, and far above 1 when data is
// evicted before it is used again (Schedule A reading G at every step).
//
// # Working set
//
// The paper computes the working set from the configuration as weights +
// word embeddings + intermediate values. WorkingSetOf does the same from a
// network's shape, 4 bytes per value, for T steps of batch B:
//
//	weights      = every parameter except the embedding: per layer and
//	               direction W_ih, W_hh, b_ih, b_hh (and W_hr with a
//	               projection), then the head's weight and bias
//	embedding    = vocab × input × 4
//	intermediate = 4 × ( T·B·input                  the input sequence
//	                   + Σ_layers T·B·dirs·out       every layer's output sequence
//	                   + Σ_layers dirs·B·(out + hidden if LSTM)   the final h (and c)
//	                   + T·B·head_out )              the head's output (B·head_out
//	                                                 for a head on h_n or the last step)
//
// where out is the layer's projection size if any, else its hidden size
// (the layers of a mixed stack differ). Token ids are not counted. A
// Partitioned program may store the recurrent weights (W_ih, W_hh, W_hr)
// as bf16 or int8: WorkingSetOfPrecision counts those at 2 bytes, or at 1
// byte plus 8 bytes a row for int8's scale and sum (biases, embedding and
// head stay 4), and WorkingSetOfProgram uses the program's precision.
//
// # One entry
//
// Analyze takes any plan (or the steps recorded while one ran) and the
// working set the caller's model defines: WorkingSetOfProgram for a
// sequence program, package treetraffic's for tree batches, an
// encoder-decoder's own sum in dresim. The server's traffic figures, the
// tree sweeps and dresim all get their DRE from it. This is the network's data, whatever the schedule; the
// report also gives the plan's own buffer sizes by kind (Schedule A's G is
// W_ih and W_hh side by side with the two LSTM biases summed; A+ keeps the
// gate pre-activations of all steps; layers share two sequence buffers),
// and the footprint: the bytes of the distinct lines one run touches (an
// embedding lookup touches only the rows of its tokens).
//
// # The steady-state shortcut
//
// The trace is the same every run and the simulator deterministic, so the
// counts of a run depend only on the cache's state before it. After each
// run the state is compared (fingerprint first, then exactly) with the
// states after every earlier run; once the state after run r equals the
// state after run j < r, runs j+1..r repeat forever, and the remaining runs
// are added without being simulated. An LRU cache that starts empty gets
// there after two runs: the state after run 2 equals the state after run 1,
// so every run after the cold one counts the same. Every run ends with the
// same lines in the same order (per set, the last ones the trace touches),
// and a line ends dirty when the trace wrote it after the line's last fill:
// a fill in run 2 is a fill at the same point of run 1 (the line was absent
// there too), and a line that run 2 never fills stays from run 1, filled
// at its first touch, so it is dirty after either run when the trace
// writes it at all. The comparison still runs, so that any other Cache is
// handled exactly, cycles longer than one run included.
//
// # Per-core traffic
//
// The replay above is one serial trace through one shared cache. Each step
// of a plan also names the worker (core) that runs it; with
// Options.PrivateCache, Analyze replays each worker's steps alone through
// a cache the size of a core's private cache (Report.Workers), for the
// bytes that core moves to and from the shared cache. A and A+ plans run on one core;
// a Partitioned plan's, a tree plan's or a generation's workers run in
// parallel, phase by phase, so its busiest worker is its critical path
// (schedule's package doc, "One runtime"). The private caches are not kept coherent: a line
// another worker writes stays valid here. Report.Workers and
// Report.WarmRW leave out the cold run, as a server that has already
// answered a request does.
//
// # The optimal bound
//
// With Options.OPT, Belady's MIN (cachesim.OPT) gives the fewest misses any
// replacement policy can have in one run of a cache of this size, whatever
// the cache held before the run: MIN replays one run preceded by one read of
// each line the run touches, which lets it pick the best starting contents;
// those reads are not counted. Every run of any cache of this size, the
// cold one and the steady ones alike, misses at least that often, so the
// bound's read bytes bound AvgRW's read part from below. The line trace
// costs memory (about 16 bytes per line access), so it is only built up to
// Options.OPTMaxAccesses accesses.
package dre
