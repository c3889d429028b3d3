package f32

import "math"

// splitBF16Go is what splitBF16DP (bf16dp_amd64.s) writes: x[0:k] as hi
// and lo bf16 values with hi + lo within 2^-16 of x, a 32-column chunk at
// a time (hi's 32, then lo's), the last chunk padded with zeros:
//
//	hi = the top 16 bits of x
//	lo = x - hi (exact), rounded to bf16 to nearest even
func splitBF16Go(k int, x []float32, dst []uint16) {
	for c := 0; c*32 < k; c++ {
		ch := dst[64*c : 64*c+64]
		clear(ch)
		for i := 0; i < 32 && 32*c+i < k; i++ {
			v := x[32*c+i]
			hi := math.Float32bits(v) >> 16
			lo := math.Float32bits(v - math.Float32frombits(hi<<16))
			lo += 0x7fff + (lo>>16)&1
			ch[i], ch[32+i] = uint16(hi), uint16(lo>>16)
		}
	}
}
