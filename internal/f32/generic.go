package f32

// The pure-Go kernels: the portable path, and the reference the assembly is
// tested against. Each is documented by its loop.

// gemmNTGo is
//
//	for i < m, j < n: c[i*ldc+j] = beta*c[i*ldc+j] + Σ_p a[i*lda+p]*w[j*ldw+p]
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

// dotGo is Σ_i x[i]*y[i] over len(x), with four partial sums.
func dotGo(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
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

// gemvBF16Go is
//
//	for i < n: y[i] = beta*y[i] + Σ_{p<k} float32(w[i*ldw+p])*x[p]
func gemvBF16Go(n, k int, w []uint16, ldw int, x []float32, beta float32, y []float32) {
	for i := 0; i < n; i++ {
		row := w[i*ldw : i*ldw+k]
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
			s += beta * y[i]
		}
		y[i] = s
	}
}

// sumGo is Σ x[i], with eight partial sums as the assembly keeps.
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
