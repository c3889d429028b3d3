//go:build purego || !amd64

package f32

// i8Path is always the pure-Go path without the assembly.
var i8Path = i8Go

func i8Paths() []i8Kernel { return []i8Kernel{i8Go} }

func gemmI8Kernel(m, n, kq int, q []uint8, ldq int, s []float32, p []uint8, beta float32, c []float32, ldc int) {
	gemmI8Go(m, n, kq, q, ldq, s, p, beta, c, ldc)
}

func absMaxKernel(x []float32) float32 { return absMaxGo(x) }

func quantizeKernel(q []uint8, x []float32, inv float32) { quantizeGo(q, x, inv) }
