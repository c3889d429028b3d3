package rnn

// The row helpers the schedules' copy and head steps run: plain Go, over
// float32 rows with a leading dimension. The products and the gate
// kernels are internal/f32's, which the schedules' ops call directly.

import "math"

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
