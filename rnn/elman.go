package rnn

import "rnnserve/internal/f32"

// ElmanPointwise finishes an Elman step (nn.RNN) for B rows of H units:
// y [B][H] (leading dimension ldy) holds W_ih x + W_hh h without biases,
// bias [H] is b_ih + b_hh, and h [B][H] (leading dimension ldh, which may
// be y) receives tanh(y + bias), or max(y + bias, 0) for RNNReLU.
func ElmanPointwise(cell CellKind, B, H int, y []float32, ldy int, bias, h []float32, ldh int) {
	relu := cell == RNNReLU
	for b := 0; b < B; b++ {
		f32.ElmanGates(H, relu, y[b*ldy:b*ldy+H], bias, h[b*ldh:b*ldh+H])
	}
}
