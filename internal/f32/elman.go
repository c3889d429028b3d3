package f32

// ElmanGates finishes one row of n units of an Elman step (PyTorch's
// nn.RNN): y holds W_ih·x + W_hh·h without biases, bias holds b_ih + b_hh,
// and h [n] receives
//
//	h = tanh(y + bias)      nonlinearity='tanh', nn.RNN's default
//	h = max(y + bias, 0)    nonlinearity='relu'
//
// h may be y itself. tanh is Tanh's approximation; where the CPU has the
// assembly, the sums are formed in Go and their tanh taken eight at a
// time by the vector kernel TanhTo uses, the last n%8 by Tanh. An Elman
// unit has one gate, so its step is W_hh's product and this one pass:
// no fused kernel would read W_hh faster than GemmNT does.
func ElmanGates(n int, relu bool, y, bias, h []float32) {
	if n <= 0 {
		return
	}
	if len(y) < n || len(bias) < n || len(h) < n {
		panic(errShortGat)
	}
	if relu || !useAsm {
		elmanGo(n, relu, y, bias, h)
		return
	}
	y, bias, h = y[:n], bias[:n], h[:n]
	for j := range h {
		h[j] = y[j] + bias[j]
	}
	n8 := tanhVec(h, h)
	for j := n8; j < n; j++ {
		h[j] = Tanh(h[j])
	}
}

// elmanGo is the Elman step's nonlinearity unit by unit:
//
//	for j < n: h[j] = tanh(y[j]+bias[j]), or max(y[j]+bias[j], 0) with relu
func elmanGo(n int, relu bool, y, bias, h []float32) {
	y, bias, h = y[:n], bias[:n], h[:n]
	if relu {
		for j := range h {
			h[j] = max(y[j]+bias[j], 0)
		}
		return
	}
	for j := range h {
		h[j] = Tanh(y[j] + bias[j])
	}
}
