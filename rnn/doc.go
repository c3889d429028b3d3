// Package rnn is the numeric core of rnnserve: the shapes and weights of
// LSTM, GRU and Elman (nn.RNN) stacks and of the attention decoder, and
// the plain-Go row helpers (softmax, bias, sampling) around them. It does no I/O and knows
// nothing of plans, files or HTTP.
//
// # Layout
//
// Everything is float32 and row-major, with PyTorch's conventions so that a
// state_dict loads without reshuffling:
//
//   - gate order LSTM i, f, g, o and GRU r, z, n, stacked along the rows of
//     W_ih [G*H][In] and W_hh [G*H][Hout] (G = 4 for LSTM, 3 for GRU, 1 for
//     an Elman cell);
//   - an LSTM with projection (proj_size P > 0) has W_hr [P][H], and its
//     recurrent state h has P elements while c keeps H;
//   - sequences are time-major: [T][B][F], so the B rows of one time step are
//     contiguous; every activation has a batch dimension B >= 1.
//
// The matrix products and the fused gate kernels are internal/f32's
// (AVX2+FMA or AVX-512 assembly chosen at run time, a pure-Go fallback
// under -tags purego), which replaced gonum's pure-Go Sgemv/Sgemm when
// benchmarks showed it 2-4x faster (docs/performance.md); the schedules'
// ops call them by their one name there. The gates follow PyTorch's equations:
//
//	LSTM: i = σ(y_i), f = σ(y_f), g = tanh(y_g), o = σ(y_o)
//	      c' = f⊙c + i⊙g,  h' = o⊙tanh(c')          (then h' = W_hr h' with projection)
//	GRU:  r = σ(x_r + b_ir + h_r + b_hr), z = σ(x_z + b_iz + h_z + b_hz)
//	      n = tanh(x_n + b_in + r⊙(h_n + b_hn)),  h' = (1-z)⊙n + z⊙h
//	Elman (nn.RNN): h' = tanh(y) (RNNTanh) or max(y, 0) (RNNReLU)
//
// where y = W_ih x + W_hh h + b_ih + b_hh and x_*, h_* are the rows of W_ih x
// and W_hh h.
package rnn
