package rnn

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Sample draws an index from a row of log-probabilities (or logits: they
// are normalised here) at the given temperature, keeping only the topK most
// likely entries when topK > 0. Temperature <= 0 means greedy (argmax).
// scratch, if it has room for len(logp) values, is used to avoid allocation.
func Sample(logp []float32, temperature float64, topK int, r *rand.Rand, scratch []float64) int {
	if temperature <= 0 || topK == 1 {
		best := 0
		for i, v := range logp {
			if v > logp[best] {
				best = i
			}
		}
		return best
	}
	if cap(scratch) < len(logp) {
		scratch = make([]float64, len(logp))
	}
	w := scratch[:len(logp)]
	cut := math.Inf(-1)
	if topK > 0 && topK < len(logp) {
		sorted := make([]float64, len(logp))
		for i, v := range logp {
			sorted[i] = float64(v)
		}
		sort.Float64s(sorted)
		cut = sorted[len(sorted)-topK]
	}
	Tempered(w, logp, temperature)
	var sum float64
	for i, v := range logp {
		if float64(v) < cut {
			w[i] = 0
		}
		sum += w[i]
	}
	u := r.Float64() * sum
	last := 0
	for i, x := range w {
		if x == 0 {
			continue
		}
		last = i
		if u < x {
			return i
		}
		u -= x
	}
	return last
}

// Tempered writes into w the weights of a row of log-probabilities (or
// logits) at temperature t > 0, exp((v - max)/t) for every value v of the
// row, and returns their sum: divided by it, they are the softmax of
// logp/t. w must have room for len(logp) values.
func Tempered(w []float64, logp []float32, t float64) (sum float64) {
	mx := math.Inf(-1)
	for _, v := range logp {
		mx = math.Max(mx, float64(v))
	}
	w = w[:len(logp)]
	for i, v := range logp {
		w[i] = math.Exp((float64(v) - mx) / t)
		sum += w[i]
	}
	return sum
}

// Probabilities writes into dst the probabilities that a head row with
// activation a stands for: exp of log-probabilities, softmax of raw
// logits, or the row itself when it already holds probabilities.
func Probabilities(a Activation, row, dst []float32) {
	switch a {
	case ActSoftmax:
		copy(dst, row)
	case ActLogSoftmax:
		for i, v := range row {
			dst[i] = float32(math.Exp(float64(v)))
		}
	default:
		copy(dst, row)
		Softmax(1, len(dst), dst)
	}
}

// TopK writes into ids the indices of the len(ids) largest values of row,
// largest first (ties by lower index).
func TopK(row []float32, ids []int64) {
	k := len(ids)
	n := 0
	for i, v := range row {
		// Insert i into the sorted prefix ids[:n] if it belongs there.
		if n == k && v <= row[ids[k-1]] {
			continue
		}
		j := min(n, k-1)
		for j > 0 && row[ids[j-1]] < v {
			ids[j] = ids[j-1]
			j--
		}
		ids[j] = int64(i)
		if n < k {
			n++
		}
	}
}
