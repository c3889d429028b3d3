//go:build avx512f32 && !noavx512

package f32

// avx512F32 makes the float32 AVX-512 kernels the default wherever the
// CPU has AVX-512, also where they are not (wide512), for timing them
// against the AVX2 kernels (scripts/ab_bench.py with a build of the tag
// noavx512).
const noAVX512, avx512F32 = false, true
