package rnn

import (
	"math"

	"rnnserve/internal/f32"
)

// MatMulT computes C = A·Wᵀ + beta·C for A [m][k] (leading dimension lda),
// W [n][k] (ldw) and C [m][n] (ldc). It is the one product the schedules
// need: a batch of rows times a weight matrix stored as PyTorch stores it.
// With m == 1 it is a matrix-vector product. It runs on the kernels of
// internal/f32 (AVX2+FMA assembly where the CPU has it).
func MatMulT(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	f32.GemmNT(m, n, k, a, lda, w, ldw, beta, c, ldc)
}

// MatMulTOnce is MatMulT for a W that is read once and not again for a
// while (an input projection's W_ih): with a few rows it pulls W in
// through its first row's eight row streams whatever W's size
// (f32.GemmNTOnce). Same results, bit for bit.
func MatMulTOnce(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	f32.GemmNTOnce(m, n, k, a, lda, w, ldw, beta, c, ldc)
}

// Finite reports whether every value of x is finite (no infinity, no
// NaN), in one vectorised pass where the CPU allows.
func Finite(x []float32) bool { return f32.Finite(x) }

// MatMul computes C = A·W + beta·C for A [m][k] (lda), W [k][n] (ldw) and
// C [m][n] (ldc): the product for weights stored input-major, as Schedule
// A's concatenated G is. Only the first n values of each row of C are
// written.
func MatMul(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	f32.GemmNN(m, n, k, a, lda, w, ldw, beta, c, ldc)
}

// LSTMStep runs one LSTM step of one row of H units: y [4H] becomes y
// + W_hh·h (W_hh [4H][k], ldw, gate-major), then LSTMPointwise's gates
// (c updated, hout written), with the same results as MatMulT and
// LSTMPointwise but in one kernel call (f32.LSTMStep). hout must not
// overlap h.
func LSTMStep(H, k int, h, whh []float32, ldw int, y, bias, c, hout []float32) {
	f32.LSTMStep(H, k, h, whh, ldw, y, bias, c, hout)
}

// LSTMStepReverse is LSTMStep with the units taken in chunks of
// StepChunk from the last (f32.LSTMStepReverse): the same results, with
// W_hh read backwards, so that a step after a forward one starts on the
// rows still in the cache.
func LSTMStepReverse(H, k int, h, whh []float32, ldw int, y, bias, c, hout []float32) {
	f32.LSTMStepReverse(H, k, h, whh, ldw, y, bias, c, hout)
}

// LSTMStepPackedReverse is LSTMStepReverse for a W_hh packed by PackT;
// H must be a multiple of 8.
func LSTMStepPackedReverse(H, k int, h, whh []float32, y, bias, c, hout []float32) {
	f32.LSTMStepPackedReverse(H, k, h, whh, y, bias, c, hout)
}

// StepChunk is the units LSTMStepReverse takes at a time, in order.
const StepChunk = f32.StepChunk

// LSTMStepPacked is LSTMStep for a W_hh packed by PackT: the same results.
func LSTMStepPacked(H, k int, h, whh []float32, y, bias, c, hout []float32) {
	f32.LSTMStepPacked(H, k, h, whh, y, bias, c, hout)
}

// LSTMPointwise finishes an LSTM step for B rows of H units:
// y [B][4H] (leading dimension ldy) holds W_ih x + W_hh h without biases;
// bias [4H] is b_ih + b_hh; c [B][H] is updated in place; h [B][H]
// (leading dimension ldh) receives o⊙tanh(c).
func LSTMPointwise(B, H int, y []float32, ldy int, bias, c, h []float32, ldh int) {
	for b := 0; b < B; b++ {
		f32.LSTMGates(H, H, y[b*ldy:b*ldy+4*H], bias, c[b*H:b*H+H], h[b*ldh:b*ldh+H])
	}
}

// GRUPointwise finishes a GRU step for B rows of H units: x [B][3H] (ldx)
// holds W_ih x and hp [B][3H] (ldp) holds W_hh h, both without biases;
// h [B][H] (ldh) holds h_{t-1} and is overwritten with h_t.
func GRUPointwise(B, H int, x []float32, ldx int, hp []float32, ldp int, bih, bhh, h []float32, ldh int) {
	for b := 0; b < B; b++ {
		hr := h[b*ldh : b*ldh+H]
		f32.GRUGates(H, H, x[b*ldx:b*ldx+3*H], hp[b*ldp:b*ldp+3*H], bih, bhh, hr, hr)
	}
}

// CopyRows copies rows×cols values from src (leading dimension lds) to dst (ldd).
func CopyRows(rows, cols int, dst []float32, ldd int, src []float32, lds int) {
	for r := 0; r < rows; r++ {
		copy(dst[r*ldd:r*ldd+cols], src[r*lds:r*lds+cols])
	}
}

// ZeroRows sets rows×cols values of dst (leading dimension ldd) to zero.
func ZeroRows(rows, cols int, dst []float32, ldd int) {
	for r := 0; r < rows; r++ {
		clear(dst[r*ldd : r*ldd+cols])
	}
}

// AddBias adds bias [n] to each of the m rows of c [m][n] (leading dimension ldc).
func AddBias(m, n int, c []float32, ldc int, bias []float32) {
	for r := 0; r < m; r++ {
		row := c[r*ldc : r*ldc+n]
		for j, v := range bias[:n] {
			row[j] += v
		}
	}
}

// Softmax replaces each of the m rows of c [m][n] by its softmax, computed
// stably (the row maximum is subtracted first) with float64 accumulation.
func Softmax(m, n int, c []float32) {
	for r := 0; r < m; r++ {
		row := c[r*n : r*n+n]
		mx := rowMax(row)
		var sum float64
		for j, v := range row {
			e := math.Exp(float64(v - mx))
			row[j] = float32(e)
			sum += e
		}
		inv := 1 / sum
		for j, v := range row {
			row[j] = float32(float64(v) * inv)
		}
	}
}

// LogSoftmax replaces each of the m rows of c [m][n] by its log-softmax.
func LogSoftmax(m, n int, c []float32) {
	for r := 0; r < m; r++ {
		row := c[r*n : r*n+n]
		mx := rowMax(row)
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v - mx))
		}
		lse := float32(math.Log(sum))
		for j, v := range row {
			row[j] = v - mx - lse
		}
	}
}

func rowMax(row []float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		if v > mx {
			mx = v
		}
	}
	return mx
}

// Embed gathers the embedding rows of ids into dst: dst[i] = table[ids[i]]
// for rows of width dim. The ids must already be checked against the table.
func Embed(dst []float32, table []float32, dim int, ids []int64) {
	for i, id := range ids {
		copy(dst[i*dim:(i+1)*dim], table[int(id)*dim:int(id+1)*dim])
	}
}

// PackT writes W [n][k] (leading dimension ldw) into dst (n·k floats) in
// the panel order MatMulTPacked reads as one stream (f32.PackNT).
func PackT(dst []float32, n, k int, w []float32, ldw int) { f32.PackNT(dst, n, k, w, ldw) }

// MatMulTPacked is MatMulT with W packed by PackT: the same results, bit
// for bit, with W read sequentially.
func MatMulTPacked(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int) {
	f32.GemmNTPacked(m, n, k, a, lda, p, beta, c, ldc)
}
