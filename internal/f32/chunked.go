package f32

// The chunked order of an LSTM's gate rows.
//
// LSTMStepPackedReverse reads a gate-major W (row q·n+j feeds gate q of
// unit j) StepChunk units at a time, from the last: four runs of
// StepChunk rows a chunk, one in each gate's block, a quarter of W apart.
// Stored chunk by chunk instead, the four gates' rows of StepChunk units
// side by side, a chunk is one run and W is read as whole runs either
// way: on AMD's Zen 5 the schedule P on one core, whose steps alternate
// over a 1 MiB W at hidden 256 (1 MiB L2) and a 64 KiB one at hidden 64
// (48 KiB L1), ran 1.04-1.10x and 1.07-1.14x faster (docs/performance.md,
// "Gate rows chunk by chunk"). The products are unchanged: a row is the
// same sum wherever it is stored, so the results are the gate-major
// kernels' bit for bit.

// ChunkRow is where gate-major row r of an LSTM of n units (n a multiple
// of StepChunk) goes in the chunked order: the rows of units [c, c +
// StepChunk) of chunk c/StepChunk start at 4c, gate by gate.
func ChunkRow(n, r int) int {
	q, j := r/n, r%n
	return j/StepChunk*4*StepChunk + q*StepChunk + j%StepChunk
}

// LSTMGatesChunked is LSTMGates(n, n, y, bias, c, h) for y and bias in
// the chunked order (n a multiple of StepChunk), with the same results.
func LSTMGatesChunked(n int, y, bias, c, h []float32) {
	if n <= 0 {
		return
	}
	if n%StepChunk != 0 {
		panic(errChunks)
	}
	if len(y) < 4*n || len(bias) < 4*n || len(c) < n || len(h) < n {
		panic(errShortGat)
	}
	for lo := 0; lo < n; lo += StepChunk {
		lstmKernel(StepChunk, StepChunk, y[4*lo:], bias[4*lo:], c[lo:], h[lo:])
	}
}

// LSTMStepPackedChunked is LSTMStepPacked with W (packed by PackNT after
// its rows were put in the chunked order), xp and bias in the chunked
// order, n a multiple of StepChunk: the same results, bit for bit. With
// reverse it takes the chunks from the last, as LSTMStepPackedReverse
// takes its units, each chunk's rows of W one run.
func LSTMStepPackedChunked(n, k int, h, p []float32, xp, bias, c, hout []float32, reverse bool) {
	if n <= 0 {
		return
	}
	if n%StepChunk != 0 {
		panic(errChunks)
	}
	if len(h) < k || len(xp) < 4*n || len(bias) < 4*n || len(c) < n || len(hout) < n {
		panic(errShortGat)
	}
	if len(p) < 4*n*k {
		panic(errShortW)
	}
	if !reverse {
		streamRows(p, 0, 4*n, k, k)
		GemmNTPacked(1, 4*n, k, h, max(k, 1), p, 1, xp, 4*n)
		LSTMGatesChunked(n, xp, bias, c, hout)
		return
	}
	const m = 4 * StepChunk
	BackChunks(n, StepChunk, func(lo, _ int) {
		r := 4 * lo
		streamRows(p, r, m, k, k)
		GemmNTPacked(1, m, k, h, max(k, 1), p[r*k:], 1, xp[r:], m)
		lstmKernel(StepChunk, StepChunk, xp[r:], bias[r:], c[lo:], hout[lo:])
	})
}
