//go:build noavx512

package f32

// noAVX512 keeps the AVX-512 kernels out of a build with the tag
// noavx512, so that two builds of one commit can be timed against each
// other on a host that has AVX-512 (scripts/ab_bench.py).
const noAVX512, avx512F32 = true, false
