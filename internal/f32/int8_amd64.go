//go:build !purego

package f32

import "golang.org/x/sys/cpu"

// i8Path is the int8 product kernel in use, picked from the CPU's
// features (AVX-512 VNNI unless the build has the tag noavx512, then
// AVX2); tests set it to run every path this CPU has (i8Paths).
var i8Path = bestI8Path()

func bestI8Path() i8Kernel {
	x := cpu.X86
	switch {
	case !noAVX512 && x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI:
		return i8VNNI
	case x.HasAVX2:
		return i8AVX2
	}
	return i8Go
}

// i8Paths lists the int8 kernels this CPU can run, best first.
func i8Paths() []i8Kernel {
	var ps []i8Kernel
	for _, p := range []i8Kernel{i8VNNI, i8AVX2} {
		if p >= bestI8Path() {
			ps = append(ps, p)
		}
	}
	return append(ps, i8Go)
}

//go:noescape
func i8GemvVNNI(groups, quads int, q *uint8, s float32, p *uint8, c *float32, beta float32)

//go:noescape
func i8TileVNNI(np, rows, quads int, q *uint8, ldq int, s *float32, p *uint8, c *float32, ldc int, beta float32)

//go:noescape
func i8GemvAVX2(groups, quads int, q *uint8, s float32, p *uint8, c *float32, beta float32)

//go:noescape
func i8TileAVX2(np, rows, quads int, q *uint8, ldq int, s *float32, p *uint8, c *float32, ldc int, beta float32)

//go:noescape
func absMaxAVX2(n int, x *float32) float32

//go:noescape
func quantizeAVX2(n int, x *float32, inv float32, q *uint8)

// gemmI8Kernel runs the whole panels of a packed W past A and the last
// partial panel (n%16 rows) through a scratch C of sixteen columns.
//
// One row streams W four panels at a time (i8GemvVNNI, i8GemvAVX2). More
// rows go in tiles of up to four rows, W's panels outermost, four at a
// time, so that they (64·kq bytes) stay in cache while every group of rows
// passes them: VNNI's tiles are four rows by four panels, AVX2's four rows
// by one panel at a time, for as many panels as it is given.
func gemmI8Kernel(m, n, kq int, q []uint8, ldq int, s []float32, p []uint8, beta float32, c []float32, ldc int) {
	path := i8Path
	if path == i8Go {
		gemmI8Go(m, n, kq, q, ldq, s, p, beta, c, ldc)
		return
	}
	quads, pb := kq/4, I8Panel*kq+i8MetaSize
	full := n / I8Panel
	// tile runs rows [i0, i0+rows) past np panels from panel j0 into c
	// (column j0·16 of row i0, ldc apart).
	tile := func(np, i0, rows, j0 int, c []float32, ldc int) {
		if path == i8VNNI {
			i8TileVNNI(np, rows, quads, &q[i0*ldq], ldq, &s[i0], &p[j0*pb], &c[0], ldc, beta)
			return
		}
		i8TileAVX2(np, rows, quads, &q[i0*ldq], ldq, &s[i0], &p[j0*pb], &c[0], ldc, beta)
	}
	if m == 1 {
		g := full / 4
		if g > 0 {
			if path == i8VNNI {
				i8GemvVNNI(g, quads, &q[0], s[0], &p[0], &c[0], beta)
			} else {
				i8GemvAVX2(g, quads, &q[0], s[0], &p[0], &c[0], beta)
			}
		}
		if j0 := 4 * g; j0 < full {
			tile(full-j0, 0, 1, j0, c[16*j0:], ldc)
		}
	} else {
		for j0 := 0; j0 < full; j0 += 4 {
			np := min(4, full-j0)
			for i0 := 0; i0 < m; i0 += 4 {
				tile(np, i0, min(4, m-i0), j0, c[i0*ldc+16*j0:], ldc)
			}
		}
	}
	if tail := n - 16*full; tail > 0 {
		var t [4 * I8Panel]float32
		for i0 := 0; i0 < m; i0 += 4 {
			rows := min(4, m-i0)
			for r := 0; r < rows && beta != 0; r++ {
				copy(t[16*r:16*r+tail], c[(i0+r)*ldc+16*full:])
			}
			tile(1, i0, rows, full, t[:], 16)
			for r := 0; r < rows; r++ {
				copy(c[(i0+r)*ldc+16*full:(i0+r)*ldc+n], t[16*r:16*r+tail])
			}
		}
	}
}

// absMaxKernel is absMaxGo with the first len(x)&^31 values in assembly.
func absMaxKernel(x []float32) float32 {
	n32 := len(x) &^ 31
	if i8Path == i8Go || n32 == 0 {
		return absMaxGo(x)
	}
	return max(absMaxAVX2(n32, &x[0]), absMaxGo(x[n32:]))
}

// quantizeKernel is quantizeGo with the first len(x)&^31 values in
// assembly.
func quantizeKernel(q []uint8, x []float32, inv float32) {
	n32 := len(x) &^ 31
	if i8Path == i8Go {
		n32 = 0
	}
	if n32 > 0 {
		quantizeAVX2(n32, &x[0], inv, &q[0])
	}
	quantizeGo(q[n32:len(x)], x[n32:], inv)
}
