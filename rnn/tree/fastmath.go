package tree

import "math"

// The gate nonlinearities in float32. The package rnn's Sigmoid and Tanh go
// through float64 math.Exp and math.Tanh, which cost more than the products
// of a tree cell; these keep float32 and stay within 2 ulp of sigmoid and
// within 2e-7 of tanh (TestFastMath checks them against float64 math).

// expf is e^x for x in [-87, 88] (clamped outside): x = n·ln2 + r with
// n = round(x·log2 e) and |r| <= ln2/2 (ln2 split in two so n·ln2 is exact), e^r by a degree-6
// Taylor polynomial, scaled by 2^n through the exponent bits.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	x = min(max(x, -87), 88)
	// Round x·log2(e) to the nearest integer: adding and subtracting
	// 1.5·2^23 leaves no fraction bits in float32.
	const round = 12582912
	n := (x*log2e + round) - round
	r := x - n*ln2hi - n*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// sigmoid is 1/(1+e^-x).
func sigmoid(x float32) float32 { return 1 / (1 + expf(-x)) }

// tanh is tanh(x): 1 - 2/(e^2x + 1), and x itself near 0, where the
// subtraction would lose relative precision.
func tanh(x float32) float32 {
	if x > -0.01 && x < 0.01 {
		x2 := x * x
		return x * (1 - x2*(1.0/3-x2*(2.0/15)))
	}
	return 1 - 2/(expf(2*x)+1)
}
