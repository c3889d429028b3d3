package wire

import (
	"math"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
)

// appendFloat32 appends f as strconv.AppendFloat(dst, float64(f), 'g',
// -1, 32) does, byte for byte: the shortest decimal that reads back as f,
// the closest such (ties to an even last digit, upward for a power of
// two whose lower neighbour is closer, as strconv's Dragonbox does), in %e form for decimal
// exponents below -4 or from 6 on, else in %f form.
//
// An infer response of a model's state is hundreds of floats, and
// strconv's general path (Dragonbox, then its digit formatting) was about
// 5% of the server's CPU at 64 clients; this path does the same with one
// 64×64-bit product and exact 128-bit arithmetic. It takes the finite
// non-zero values whose decimal exponent k (below) lies in [-maxA, -1],
// which is every float32 from about 1e-35 to 3e7, and hands the rest
// (zero, larger, smaller) to strconv. TestAppendFloat32 compares it with
// strconv on every 1021st float32 bit pattern, the neighbours of every
// power of two and of ten and a million random ones, and on all 2^32 with
// RNNSERVE_FLOAT32_ALL=1 (every one equal, 2026-11-27).
//
// The method (the interval of Schubfach): f = c·2^e, and the reals that
// round to f are those strictly inside, or on when c is even, the
// interval from (c - 1/2)·2^e to (c + 1/2)·2^e, the lower end at
// (c - 1/4)·2^e when f is a power of two above the smallest normal
// exponent (its lower neighbour is closer). Scaled by 10^-k, with k the
// largest integer that keeps the scaled interval at least 1 wide, it is
// less than 10 wide: it holds at least one integer and at most one
// multiple of 10. A multiple of 10 in it is the shortest decimal;
// otherwise the integer in it nearest to f·10^-k. With a = -k, the
// scaled values are n·5^a / 2^(2-e-a) for n = 4c and its ends, exact in
// 128 bits for 4c < 2^26 and a ≤ maxA.
func appendFloat32(dst []byte, f float32) []byte {
	b := math.Float32bits(f)
	exp := int(b>>23) & 0xff
	frac := uint64(b & (1<<23 - 1))
	if exp == 0xff || b&0x7fffffff == 0 {
		return strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
	}
	var c uint64
	var e int
	if exp == 0 {
		c, e = frac, -149
	} else {
		c, e = frac|1<<23, exp-150
	}
	asym := frac == 0 && exp > 1
	var k int
	if asym {
		k = floorLog10ThreeQuarters[e-minE]
	} else {
		k = floorLog10Pow2[e-minE]
	}
	a, sh := -k, 2-e+k
	if a < 1 || a > maxA || sh <= 0 || sh >= 128 {
		return strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
	}
	// In units of 2^(e-2): f is 4c, the interval's ends 4c-2 (4c-1) and
	// 4c+2; scaled, s and r (the integer part of f·10^-k and the rest
	// against half a unit: -1, 0, 1), the ends' integer parts and
	// whether they are integers.
	var s, li, ui uint64
	var lexact, uexact bool
	var r int
	p5 := pow5[a]
	if p5[0] == 0 && a <= max64A && sh < 64 {
		// All of it in 64 bits: 4c·5^a < 2^64.
		m, d := 4*c*p5[1], p5[1]
		u, l := m+2*d, m-2*d
		if asym {
			l = m - d
		}
		mask := uint64(1)<<sh - 1
		s, li, ui = m>>sh, l>>sh, u>>sh
		lexact, uexact = l&mask == 0, u&mask == 0
		r = cmp128(0, m&mask, 0, 1<<(sh-1))
	} else {
		mh, ml := bits.Mul64(4*c, p5[1])
		mh += 4 * c * p5[0]
		d2h, d2l := p5[0]<<1|p5[1]>>63, p5[1]<<1 // 2·5^a
		uh, ul := add128(mh, ml, d2h, d2l)
		var lh, ll uint64
		if asym {
			lh, ll = sub128(mh, ml, p5[0], p5[1])
		} else {
			lh, ll = sub128(mh, ml, d2h, d2l)
		}
		s, li, ui = shr128(mh, ml, sh), shr128(lh, ll, sh), shr128(uh, ul, sh)
		lexact, uexact = zero128(low128(lh, ll, sh)), zero128(low128(uh, ul, sh))
		rh, rl := low128(mh, ml, sh)
		var hh, hl uint64 // 2^(sh-1)
		if sh-1 >= 64 {
			hh = 1 << (sh - 1 - 64)
		} else {
			hl = 1 << (sh - 1)
		}
		r = cmp128(rh, rl, hh, hl)
	}
	// f·10^-k < 10c < 2^28 (and its ends about as much): 32 bits hold them.
	even := c&1 == 0
	s32, l32, u32 := uint32(s), uint32(li), uint32(ui)
	inLow := func(d uint32) bool { return d > l32 || d == l32 && lexact && even }
	inHigh := func(d uint32) bool { return d < u32 || d == u32 && (!uexact || even) }
	var d uint32
	sp10 := s32 / 10 * 10
	if lo, hi := inLow(sp10), inHigh(sp10+10); lo != hi {
		if lo {
			d = sp10
		} else {
			d = sp10 + 10
		}
	} else if lo, hi := inLow(s32), inHigh(s32+1); lo != hi {
		if lo {
			d = s32
		} else {
			d = s32 + 1
		}
	} else {
		// Both in: the nearer to f.
		switch r {
		case -1:
			d = s32
		case 1:
			d = s32 + 1
		default:
			// strconv (Dragonbox) breaks a tie upward when f is a
			// power of two with the closer lower neighbour, else to
			// even.
			if asym {
				d = s32 + 1
			} else {
				d = s32 + s32&1
			}
		}
	}
	for d%10 == 0 {
		d /= 10
		k++
	}
	return appendDecimal(dst, f < 0, d, k)
}

// appendDecimal appends (-)d·10^k in strconv's 'g' form for the shortest
// digits: %e when the decimal exponent is below -4 or at least 6. d has
// no trailing zero.
func appendDecimal(dst []byte, neg bool, d uint32, k int) []byte {
	nd := 1
	for p := uint32(10); nd < 10 && d >= p; p *= 10 {
		nd++
	}
	dp := nd + k // the decimal point's place after the first digits
	n := len(dst)
	dst = slices.Grow(dst, 32)[:n+32] // the longest: -0.0000 and 10 digits, or 10 digits and e-xx
	b := dst[n:]
	i := 0
	if neg {
		b[0] = '-'
		i = 1
	}
	if x := dp - 1; x < -4 || x >= 6 {
		// d.ddde±xx: the digits one place on, the first moved before the point
		putDigits(b[i+1:i+1+nd], d)
		b[i] = b[i+1]
		i++
		if nd > 1 {
			b[i] = '.'
			i += nd
		}
		b[i] = 'e'
		if x < 0 {
			b[i+1] = '-'
			x = -x
		} else {
			b[i+1] = '+'
		}
		i += 2
		if x >= 100 {
			b[i] = byte('0' + x/100)
			x %= 100
			i++
		}
		b[i], b[i+1] = pairs[2*x], pairs[2*x+1]
		return dst[:n+i+2]
	}
	switch {
	case dp <= 0: // 0.000ddd
		b[i], b[i+1] = '0', '.'
		i += 2
		for range -dp {
			b[i] = '0'
			i++
		}
		putDigits(b[i:i+nd], d)
		i += nd
	case dp < nd: // dd.ddd
		putDigits(b[i+1:i+1+nd], d)
		copy(b[i:], b[i+1:i+1+dp])
		b[i+dp] = '.'
		i += nd + 1
	default: // ddd000
		putDigits(b[i:i+nd], d)
		i += nd
		for range dp - nd {
			b[i] = '0'
			i++
		}
	}
	return dst[:n+i]
}

// putDigits writes d's decimal digits into b, which is exactly as long.
func putDigits(b []byte, d uint32) {
	i := len(b)
	for d >= 100 {
		q := d / 100
		r := d - q*100
		i -= 2
		b[i], b[i+1] = pairs[2*r], pairs[2*r+1]
		d = q
	}
	if d >= 10 {
		b[i-2], b[i-1] = pairs[2*d], pairs[2*d+1]
	} else {
		b[i-1] = byte('0' + d)
	}
}

// pairs is "00" to "99".
const pairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

func add128(ah, al, bh, bl uint64) (uint64, uint64) {
	l, carry := bits.Add64(al, bl, 0)
	h, _ := bits.Add64(ah, bh, carry)
	return h, l
}

func sub128(ah, al, bh, bl uint64) (uint64, uint64) {
	l, borrow := bits.Sub64(al, bl, 0)
	h, _ := bits.Sub64(ah, bh, borrow)
	return h, l
}

// shr128 is (h, l) >> s for 0 < s < 128, whose result fits 64 bits.
func shr128(h, l uint64, s int) uint64 {
	if s >= 64 {
		return h >> (s - 64)
	}
	return l>>s | h<<(64-s)
}

// low128 is (h, l) mod 2^s, for 0 < s < 128.
func low128(h, l uint64, s int) (uint64, uint64) {
	if s >= 64 {
		return h & (1<<(s-64) - 1), l
	}
	return 0, l & (1<<s - 1)
}

func zero128(h, l uint64) bool { return h|l == 0 }

func cmp128(ah, al, bh, bl uint64) int {
	switch {
	case ah < bh || ah == bh && al < bl:
		return -1
	case ah > bh || ah == bh && al > bl:
		return 1
	}
	return 0
}

// minE and maxE bound a float32's binary exponent e (f = c·2^e); maxA
// bounds a: 4c·5^a stays below 2^128.
const (
	minE = -149
	maxE = 104
	maxA = 43
	// max64A bounds a for 64-bit arithmetic: 4c·5^a < 2^26·5^16 < 2^64.
	max64A = 16
)

var (
	// floorLog10Pow2[e-minE] is the largest k with 10^k ≤ 2^e;
	// floorLog10ThreeQuarters[e-minE] the largest with 10^k ≤ 3·2^(e-2).
	floorLog10Pow2, floorLog10ThreeQuarters [maxE - minE + 1]int
	// pow5[a] is 5^a as {high, low} 64-bit words.
	pow5 [maxA + 1][2]uint64
)

func init() {
	// Exact, with big integers: compare 10^k·2^-e (·4/3) with 1.
	floor := func(num *big.Int, e int) int {
		// the largest k with 10^k ≤ num·2^e
		x := new(big.Rat).SetInt(num)
		if e >= 0 {
			x.Mul(x, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(e))))
		} else {
			x.Quo(x, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(-e))))
		}
		k := 0
		ten := big.NewRat(10, 1)
		p := big.NewRat(1, 1)
		if x.Cmp(p) >= 0 {
			for {
				next := new(big.Rat).Mul(p, ten)
				if next.Cmp(x) > 0 {
					return k
				}
				p, k = next, k+1
			}
		}
		for p.Cmp(x) > 0 {
			p.Quo(p, ten)
			k--
		}
		return k
	}
	for e := minE; e <= maxE; e++ {
		floorLog10Pow2[e-minE] = floor(big.NewInt(1), e)
		floorLog10ThreeQuarters[e-minE] = floor(big.NewInt(3), e-2)
	}
	p := big.NewInt(1)
	mask := new(big.Int).SetUint64(math.MaxUint64)
	for a := range pow5 {
		pow5[a] = [2]uint64{new(big.Int).Rsh(p, 64).Uint64(), new(big.Int).And(p, mask).Uint64()}
		p.Mul(p, big.NewInt(5))
	}
}
