// Package schedule turns a model run into a Plan: an ordered list of steps,
// each naming its kernel and the byte regions of named buffers it reads and
// writes. The same Plan is run by the engine and walked, without arithmetic,
// by the traffic analysis, so the memory traffic we report is the traffic of
// the code we run.
//
// Two schedules from Thakker et al., "Measuring scheduling efficiency of
// RNNs for NLP applications" (Arm ML Research):
//
//   - Schedule A (their Algorithm 1): W_ih and W_hh are concatenated into
//     one matrix G = [W; U] of shape [In+Out][Gates*H] per layer and
//     direction (the paper's [2n, 4n]; TensorFlow's LSTM kernel layout),
//     stored as its own buffer. Each time step copies x_t beside h in a
//     buffer xh = [x_t; h] and multiplies it by G, so all of G is read at
//     every step. (A GRU needs W_in x and W_hn h apart, so its step
//     multiplies x and h by G's two row blocks separately: still one full
//     pass over G per step.)
//   - Schedule A+ (their Algorithm 2, "split G"): X' = G1·I' for all time
//     steps at once (G1 = W_ih, one pass over it per layer), then per step
//     Y = X'[t] + G2·h with G2 = W_hh: only the recurrent half is read at
//     every step.
//
// Both run layer by layer (every time step of a layer before the next
// layer), both directions of a bidirectional layer in turn, and share the
// embedding gather and the head, which is one product over all time steps.
//
// # Memory layout of a plan
//
// Weights come first (they belong to the Program and are shared by its
// plans; a buffer over one of the network's own matrices holds the
// network's Memory, which owns the large ones on huge pages, so that
// they stay mapped while any plan or stepper reads them), then inputs (time-major features [T][B][In] or token ids [T][B],
// optional h0/c0), then activations: the embedded input, two ping-pong
// sequence buffers [T][B][Dirs*Out] between layers, and per-step scratch
// sized for the widest layer and reused by every layer (A: xh, y; A+: X'
// [T][B][Gates*H], h; both: c, and h before projection), then outputs.
//
// # One runtime
//
// Every plan that runs on more than one core, a Partitioned program's, a
// tree plan's or a top-down generation's, lists its steps phase by phase
// (Step.Phase) and within a phase part by part (Step.Worker), and runs on
// a Pool its caller owns: one job, each phase's parts on the pool's
// workers, the next phase after the barrier. No plan starts goroutines of
// its own, and a panic in any part reaches the caller as a *PanicError.
// Tree and generation parts are long (hundreds of microseconds) and
// uneven, so a worker that waits for another's spins, by the clock, for
// about two of the pool's measured wake-ups before it parks, where a
// worker of P spins, also by the clock, for PoolOptions.Spin
// (Pool.longPhases).
// A depth-batched tree plan has one phase of consecutive trees per part;
// a recursive one, whole subtrees per part, then the nodes above them,
// each part cut into chunks (whole subtrees, or trees' tops, of at least
// a few dozen nodes) that a worker out of work takes from the back of
// another's part (Pool.chunkedPhases), so a helper that wakes late
// holds nobody up; a generation, one phase per wave, its chains spread
// over the parts.
//
// A tree plan or a wave whose parts are left open (TreeOptions.Workers,
// GenerateOptions.Workers 0) goes to the pool only when it is predicted
// to end sooner there (work.go): its parts' flops at the program's
// measured time per flop, against the pool's measured time for a parked
// helper to start a part (Pool.WakeUp, 40-100 µs on a quiet 2-core VM).
// A lone tree of a few dozen nodes is not worth waking a helper for; such
// a plan is built for one worker, runs on its caller with no job on the
// pool, and its steps say so (all worker 0's), so its replay is what ran.
//
// Step.Worker names a part, not a thread: a worker whose part is late has
// it, or its last chunks, taken over by another (see Pool). One worker
// replayed alone (dre.ReplayWorker, dre.Report.Workers) means the same
// for every kind of plan: that part's steps, in plan order, through one
// private cache, what its core runs when nothing is taken over.
package schedule
