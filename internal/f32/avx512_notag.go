//go:build !noavx512

package f32

const noAVX512 = false
