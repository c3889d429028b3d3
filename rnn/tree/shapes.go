package tree

import (
	"math"
	"math/rand/v2"
)

// Shape names a family of binary trees, after the datasets of Jeong et
// al.'s Table 1: complete (balanced), moderately balanced and linear trees
// over the same leaves.
type Shape uint8

const (
	Balanced Shape = iota + 1 // split every span in half
	Moderate                  // split at a uniformly random point
	Linear                    // the first leaf against the rest (height = leaves-1)
)

func (s Shape) String() string {
	switch s {
	case Balanced:
		return "balanced"
	case Moderate:
		return "moderate"
	case Linear:
		return "linear"
	}
	return "Shape(?)"
}

// Binary builds a binary tree of the given shape over leaves words drawn
// by word (called once per leaf, left to right); rng is used by Moderate.
// It builds with an explicit stack, so any size works.
func Binary(shape Shape, leaves int, rng *rand.Rand, word func(i int) int32) *Tree {
	split := func(n int) int {
		switch shape {
		case Linear:
			return 1
		case Moderate:
			return 1 + rng.IntN(n-1)
		}
		return n / 2
	}
	return buildSpans(leaves, split, word)
}

// RandomBinary builds a random binary tree over leaves words whose left
// part at each split has k leaves with probability ∝ 1/k^skew (skew 0 is
// uniform; larger skews give right-branching trees, as English parses
// are).
func RandomBinary(rng *rand.Rand, leaves int, skew float64, word func(i int) int32) *Tree {
	var w []float64
	split := func(n int) int {
		w = w[:0]
		sum := 0.0
		for k := 1; k < n; k++ {
			x := 1 / math.Pow(float64(k), skew)
			w = append(w, x)
			sum += x
		}
		u := rng.Float64() * sum
		for k, x := range w {
			if u < x {
				return k + 1
			}
			u -= x
		}
		return n - 1
	}
	return buildSpans(leaves, split, word)
}

// buildSpans splits [0, leaves) recursively with split(n) leaves on the
// left, in post-order, with an explicit stack.
func buildSpans(leaves int, split func(n int) int, word func(i int) int32) *Tree {
	b := builder{t: &Tree{Nodes: make([]Node, 0, 2*leaves-1)}}
	type span struct {
		lo, n int
		done  bool
	}
	stack := []span{{0, leaves, false}}
	var out []int32 // finished subtrees
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.n == 1 {
			out = append(out, b.add(nil, word(s.lo), -1))
			continue
		}
		if s.done {
			r, l := out[len(out)-1], out[len(out)-2]
			out = append(out[:len(out)-2], b.add([]int32{l, r}, -1, -1))
			continue
		}
		k := split(s.n)
		stack = append(stack, span{s.lo, s.n, true}, span{s.lo + k, s.n - k, false}, span{s.lo, k, false})
	}
	return b.t
}
