package f32

import "math"

// Constants of the float32 exp, sigmoid and tanh approximations. The
// assembly (gates_amd64.s) holds the same bit patterns as eight-lane
// vectors.
const (
	log2e = 1.4426950408889634
	ln2hi = 0.693359375    // ln 2 rounded to 9 bits: n·ln2hi is exact
	ln2lo = -2.12194440e-4 // ln 2 - ln2hi
	expHi = 88.0           // exp clamps its argument to [expLo, expHi],
	expLo = -87.0          // where 2^n stays a normal float32
	tanhT = 0.625          // below it tanh uses its odd polynomial
	tanh1 = -0.3333327925728116
	tanh2 = 0.13331382436990233
	tanh3 = -0.053735396731772585
	tanh4 = 0.02062651769707545
	tanh5 = -0.005692214498425713
)

// expf is e^x in float32: x = n·ln2 + r with |r| <= ln2/2 (Cody and
// Waite's two-part ln 2), e^r by its Taylor polynomial of degree 7 (error
// below 6e-9 on that interval), and 2^n put in the exponent field. x is
// clamped to [-87, 88] first. n is x·log2(e) rounded to nearest even, as
// the assembly's VROUNDPS does: adding and subtracting 1.5·2^23 leaves no
// fraction bits (exact for |x·log2 e| < 2^22).
func expf(x float32) float32 {
	const round = 0x1.8p23
	x = min(max(x, expLo), expHi)
	n := (float32(x*log2e) + round) - round
	r := x - n*ln2hi
	r = r - n*ln2lo
	p := float32(1.0 / 5040)
	p = p*r + 1.0/720
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// Sigmoid is 1/(1+e^-x) in float32, with the same approximation of e^x as
// the assembly gate kernels.
func Sigmoid(x float32) float32 {
	return 1 / (1 + expf(-x))
}

// Tanh is tanh(x) in float32: for |x| >= 0.625, 1 - 2/(e^{2|x|}+1); below,
// the odd polynomial |x| + |x|³·P(x²) whose coefficients were fitted (in
// float64, near-minimax in relative error) to tanh on [0, 0.625]; the sign
// is x's.
func Tanh(x float32) float32 {
	a := float32(math.Abs(float64(x)))
	var t float32
	if a < tanhT {
		u := a * a
		p := float32(tanh5)
		p = p*u + tanh4
		p = p*u + tanh3
		p = p*u + tanh2
		p = p*u + tanh1
		t = a*u*p + a
	} else {
		t = 1 - 2/(expf(2*a)+1)
	}
	return float32(math.Copysign(float64(t), float64(x)))
}

// SigmoidTo sets dst[i] = Sigmoid(src[i]) for i < len(src).
func SigmoidTo(dst, src []float32) {
	if len(dst) < len(src) {
		panic(errShortDst)
	}
	n8 := sigmoidVec(dst, src)
	for i, v := range src[n8:] {
		dst[n8+i] = Sigmoid(v)
	}
}

// TanhTo sets dst[i] = Tanh(src[i]) for i < len(src).
func TanhTo(dst, src []float32) {
	if len(dst) < len(src) {
		panic(errShortDst)
	}
	n8 := tanhVec(dst, src)
	for i, v := range src[n8:] {
		dst[n8+i] = Tanh(v)
	}
}
