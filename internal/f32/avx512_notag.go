//go:build !noavx512 && !avx512f32

package f32

const noAVX512, avx512F32 = false, false
