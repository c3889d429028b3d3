package f32

import "math"

// The pure-Go kernels: the portable path, and the reference the assembly is
// tested against. Each is documented by its loop.

// gemmNTGo is
//
//	for i < m, j < n: c[i*ldc+j] = dotGo(a row i, w row j) + beta*c[i*ldc+j]
//
// with c not read when beta == 0.
func gemmNTGo(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		ar := a[i*lda : i*lda+k]
		cr := c[i*ldc : i*ldc+n]
		for j := range cr {
			s := dotGo(ar, w[j*ldw:j*ldw+k])
			if beta != 0 {
				s += beta * cr[j]
			}
			cr[j] = s
		}
	}
}

// dotGo is Σ_i x[i]*y[i] over len(x) in the order of every GemmNT kernel:
// eight lanes, lane l summing the products at i ≡ l (mod 8) in increasing
// i (the last len(x)%8 products go to lanes 0, 1, ... as if the row were
// padded with zeros), then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). The
// assembly fuses each multiply-add, so the two paths agree to rounding;
// each alone gives a row the same bits in any batch.
func dotGo(x, y []float32) float32 {
	y = y[:len(x)]
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	var xt, yt [8]float32
	for i := 0; i < len(x); i += 8 {
		xs, ys := &xt, &yt
		if i+8 <= len(x) {
			xs, ys = (*[8]float32)(x[i:i+8]), (*[8]float32)(y[i:i+8])
		} else {
			copy(xt[:], x[i:])
			copy(yt[:], y[i:])
		}
		l0 += xs[0] * ys[0]
		l1 += xs[1] * ys[1]
		l2 += xs[2] * ys[2]
		l3 += xs[3] * ys[3]
		l4 += xs[4] * ys[4]
		l5 += xs[5] * ys[5]
		l6 += xs[6] * ys[6]
		l7 += xs[7] * ys[7]
	}
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

// gemvTGo is
//
//	for j < n: y[j] = beta*y[j] + Σ_i x[i]*w[i*ldw+j]
//
// computed as y = beta*y, then one axpy per row of w.
func gemvTGo(k, n int, w []float32, ldw int, x []float32, beta float32, y []float32) {
	y = y[:n]
	scaleGo(beta, y)
	for i, xi := range x[:k] {
		row := w[i*ldw : i*ldw+n]
		for j, v := range row {
			y[j] += xi * v
		}
	}
}

// scaleGo is for i := range y { y[i] *= beta }, with y cleared when beta == 0.
func scaleGo(beta float32, y []float32) {
	if beta == 0 {
		clear(y)
		return
	}
	if beta != 1 {
		for i := range y {
			y[i] *= beta
		}
	}
}

// lstmGo finishes units [from, n) of one LSTM row: with y and bias holding
// the gate blocks i, f, g, o at 0, stride, 2*stride, 3*stride,
//
//	c[j] = σ(y_f+b_f)*c[j] + σ(y_i+b_i)*tanh(y_g+b_g)
//	h[j] = σ(y_o+b_o)*tanh(c[j])
func lstmGo(from, n, stride int, y, bias, c, h []float32) {
	for j := from; j < n; j++ {
		i := Sigmoid(y[j] + bias[j])
		f := Sigmoid(y[stride+j] + bias[stride+j])
		g := Tanh(y[2*stride+j] + bias[2*stride+j])
		o := Sigmoid(y[3*stride+j] + bias[3*stride+j])
		cn := f*c[j] + i*g
		c[j] = cn
		h[j] = o * Tanh(cn)
	}
}

// gruGo finishes units [from, n) of one GRU row: with x (W_ih x), p
// (W_hh h), bih and bhh holding the gate blocks r, z, n at 0, stride,
// 2*stride,
//
//	r = σ(x_r+b_ir+p_r+b_hr), z = σ(x_z+b_iz+p_z+b_hz)
//	n = tanh(x_n+b_in + r*(p_n+b_hn)), hout[j] = (1-z)*n + z*hprev[j]
func gruGo(from, n, stride int, x, p, bih, bhh, hprev, hout []float32) {
	for j := from; j < n; j++ {
		r := Sigmoid(x[j] + bih[j] + p[j] + bhh[j])
		z := Sigmoid(x[stride+j] + bih[stride+j] + p[stride+j] + bhh[stride+j])
		nn := Tanh(x[2*stride+j] + bih[2*stride+j] + r*(p[2*stride+j]+bhh[2*stride+j]))
		hout[j] = nn + z*(hprev[j]-nn)
	}
}

// gemmBF16Go is
//
//	for i < m, j < n: c[i*ldc+j] = beta*c[i*ldc+j] + Σ_{p<k} a[i*lda+p]*float32(w[j*ldw+p])
//
// with c not read when beta == 0.
func gemmBF16Go(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		x := a[i*lda : i*lda+k]
		for j := 0; j < n; j++ {
			row := w[j*ldw : j*ldw+k]
			var s0, s1 float32
			p := 0
			for ; p+2 <= k; p += 2 {
				s0 += bf16(row[p]) * x[p]
				s1 += bf16(row[p+1]) * x[p+1]
			}
			if p < k {
				s0 += bf16(row[p]) * x[p]
			}
			s := s0 + s1
			if beta != 0 {
				s += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = s
		}
	}
}

// sumGo is Σ x[i], with eight partial sums as the assembly keeps.
// finiteGo reports whether no value of x is an infinity or a NaN (all
// exponent bits set): adding one to the exponent field carries into the
// sign bit exactly then, and the carries of four running ORs are tested
// once at the end.
func finiteGo(x []float32) bool {
	const exp, one = 0x7f800000, 0x00800000
	var f0, f1, f2, f3 uint32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		f0 |= math.Float32bits(x[i])&exp + one
		f1 |= math.Float32bits(x[i+1])&exp + one
		f2 |= math.Float32bits(x[i+2])&exp + one
		f3 |= math.Float32bits(x[i+3])&exp + one
	}
	for ; i < len(x); i++ {
		f0 |= math.Float32bits(x[i])&exp + one
	}
	return (f0|f1|f2|f3)&0x80000000 == 0
}

func sumGo(x []float32) float32 {
	var s [8]float32
	i := 0
	for ; i+8 <= len(x); i += 8 {
		for l := range s {
			s[l] += x[i+l]
		}
	}
	for ; i < len(x); i++ {
		s[0] += x[i]
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}
