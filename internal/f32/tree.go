package f32

// The Binary TreeLSTM's fused gate kernels (Tai, Socher and Manning 2015,
// N = 2): one node's row of pre-activations in, its memory c and output h
// out, eight units at a time with the sigmoid and tanh of approx.go. Like
// LSTMGates they take the gate blocks stride elements apart, and like every
// kernel here they compute a unit the same way wherever its row sits, so a
// node has the same bits alone or in a batch.

// TreeLeafGates finishes one Binary TreeLSTM leaf of n units. y and bias
// hold the gate pre-activations and biases in three blocks i, o, u, the
// block of gate q starting at q*stride (stride >= n); c [n] and h [n]
// receive the leaf's memory and output:
//
//	c = σ(y_i+b_i)⊙tanh(y_u+b_u),  h = σ(y_o+b_o)⊙tanh(c)
func TreeLeafGates(n, stride int, y, bias, c, h []float32) {
	if n <= 0 {
		return
	}
	if stride < n || len(y) < 2*stride+n || len(bias) < 2*stride+n || len(c) < n || len(h) < n {
		panic(errShortGat)
	}
	treeLeafKernel(n, stride, y, bias, c, h)
}

// TreeInnerGates finishes one Binary TreeLSTM inner node of n units. y and
// bias hold five blocks i, f_l, f_r, o, u, stride elements apart; cl and
// cr [n] are the children's memories; c [n] and h [n] receive the node's:
//
//	c = σ(y_i+b_i)⊙tanh(y_u+b_u) + σ(y_fl+b_fl)⊙c_l + σ(y_fr+b_fr)⊙c_r
//	h = σ(y_o+b_o)⊙tanh(c)
//
// c may not overlap cl or cr.
func TreeInnerGates(n, stride int, y, bias, cl, cr, c, h []float32) {
	if n <= 0 {
		return
	}
	if stride < n || len(y) < 4*stride+n || len(bias) < 4*stride+n || len(cl) < n || len(cr) < n || len(c) < n || len(h) < n {
		panic(errShortGat)
	}
	treeInnerKernel(n, stride, y, bias, cl, cr, c, h)
}

// treeLeafGo finishes units [from, n) of a leaf:
//
//	c[j] = σ(y_i+b_i)*tanh(y_u+b_u),  h[j] = σ(y_o+b_o)*tanh(c[j])
func treeLeafGo(from, n, stride int, y, bias, c, h []float32) {
	for j := from; j < n; j++ {
		i := Sigmoid(y[j] + bias[j])
		u := Tanh(y[2*stride+j] + bias[2*stride+j])
		cv := i * u
		c[j] = cv
		o := Sigmoid(y[stride+j] + bias[stride+j])
		h[j] = o * Tanh(cv)
	}
}

// treeInnerGo finishes units [from, n) of an inner node:
//
//	c[j] = (σ(y_i+b_i)*tanh(y_u+b_u) + σ(y_fl+b_fl)*cl[j]) + σ(y_fr+b_fr)*cr[j]
//	h[j] = σ(y_o+b_o)*tanh(c[j])
func treeInnerGo(from, n, stride int, y, bias, cl, cr, c, h []float32) {
	for j := from; j < n; j++ {
		i := Sigmoid(y[j] + bias[j])
		u := Tanh(y[4*stride+j] + bias[4*stride+j])
		fl := Sigmoid(y[stride+j] + bias[stride+j])
		fr := Sigmoid(y[2*stride+j] + bias[2*stride+j])
		cv := i*u + fl*cl[j] + fr*cr[j]
		c[j] = cv
		o := Sigmoid(y[3*stride+j] + bias[3*stride+j])
		h[j] = o * Tanh(cv)
	}
}
