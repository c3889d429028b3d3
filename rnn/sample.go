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
	mx := math.Inf(-1)
	for _, v := range logp {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for i, v := range logp {
		if float64(v) < cut {
			w[i] = 0
			continue
		}
		w[i] = math.Exp((float64(v) - mx) / temperature)
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
