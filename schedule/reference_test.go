package schedule

import (
	"math"

	"rnnserve/rnn"
)

// refStack is the reference every sequence schedule is held to: PyTorch's
// LSTM, GRU and Elman (nn.RNN, tanh or relu) equations in float64, one batch row and one direction at a
// time, from the weights as PyTorch lays them out (W_ih, W_hh, b_ih, b_hh,
// W_hr; gate orders i,f,g,o and r,z,n), for any stack (mixed layers,
// bidirectional, projection), with h0/c0, embedding, head and per-row
// lengths (steps past a row's length are padding: zero outputs, and the
// row's final state is the one after its last real step, as PyTorch's
// packed sequences give), the head on what it reads (every step, each
// row's last step, or the final states). It shares no code with the
// schedules. Outputs are time-major like Result's.
func refStack(net *rnn.Network, in Input) (out, hn, cn, head []float64) {
	T, B := in.T, in.B
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	// x[t][b] is the input of the current layer.
	x := make([][][]float64, T)
	for t := range T {
		x[t] = make([][]float64, B)
		for b := range B {
			row := make([]float64, net.Input)
			for j := range row {
				if net.Vocab > 0 {
					row[j] = float64(net.Embedding[int(in.Tokens[t*B+b])*net.Input+j])
				} else {
					row[j] = float64(in.Features[(t*B+b)*net.Input+j])
				}
			}
			x[t][b] = row
		}
	}
	hn = make([]float64, net.StateSize(B))
	cn = make([]float64, net.CellSize(B))
	for k, dirs := range net.Layers {
		O := dirs[0].Out()
		next := make([][][]float64, T)
		for t := range T {
			next[t] = make([][]float64, B)
			for b := range B {
				next[t][b] = make([]float64, len(dirs)*O)
			}
		}
		for d, l := range dirs {
			H, I := l.Hidden, l.Input
			G := l.Cell.Gates()
			for b := range B {
				h, c := make([]float64, O), make([]float64, H)
				if in.H0 != nil {
					off := net.StateOffset(k, d, B) + b*O
					for j := range h {
						h[j] = float64(in.H0[off+j])
					}
				}
				if in.C0 != nil && l.Cell == rnn.LSTM {
					off := net.CellOffset(k, d, B) + b*H
					for j := range c {
						c[j] = float64(in.C0[off+j])
					}
				}
				L := T
				if in.Lengths != nil {
					L = in.Lengths[b]
				}
				for i := range L {
					t := i
					if d == 1 {
						t = L - 1 - i
					}
					gi, gh := make([]float64, G*H), make([]float64, G*H)
					for r := range G * H {
						gi[r], gh[r] = float64(l.Bih[r]), float64(l.Bhh[r])
						for j := range I {
							gi[r] += float64(l.Wih[r*I+j]) * x[t][b][j]
						}
						for j := range O {
							gh[r] += float64(l.Whh[r*O+j]) * h[j]
						}
					}
					full := make([]float64, H)
					for j := range H {
						switch l.Cell {
						case rnn.RNNTanh:
							full[j] = math.Tanh(gi[j] + gh[j])
						case rnn.RNNReLU:
							full[j] = math.Max(gi[j]+gh[j], 0)
						case rnn.LSTM:
							ig := sig(gi[j] + gh[j])
							fg := sig(gi[H+j] + gh[H+j])
							gg := math.Tanh(gi[2*H+j] + gh[2*H+j])
							og := sig(gi[3*H+j] + gh[3*H+j])
							c[j] = fg*c[j] + ig*gg
							full[j] = og * math.Tanh(c[j])
						default:
							r := sig(gi[j] + gh[j])
							z := sig(gi[H+j] + gh[H+j])
							nn := math.Tanh(gi[2*H+j] + r*gh[2*H+j])
							full[j] = (1-z)*nn + z*h[j]
						}
					}
					if l.Proj > 0 {
						for p := range O {
							var v float64
							for j := range H {
								v += float64(l.Whr[p*H+j]) * full[j]
							}
							h[p] = v
						}
					} else {
						copy(h, full)
					}
					copy(next[t][b][d*O:], h)
				}
				copy(hn[net.StateOffset(k, d, B)+b*O:], h)
				if l.Cell == rnn.LSTM {
					copy(cn[net.CellOffset(k, d, B)+b*H:], c)
				}
			}
		}
		x = next
	}
	W := net.OutputWidth()
	out = make([]float64, T*B*W)
	for t := range T {
		for b := range B {
			copy(out[(t*B+b)*W:], x[t][b])
		}
	}
	if net.HeadOut == 0 {
		return out, hn, cn, nil
	}
	// What the head reads: every step, each row's last step, or the top
	// layer's final h of each direction side by side.
	var rows [][]float64
	switch net.HeadInput {
	case rnn.HeadEveryStep:
		for r := range T * B {
			rows = append(rows, out[r*W:(r+1)*W])
		}
	case rnn.HeadLastStep:
		for b := range B {
			L := T
			if in.Lengths != nil {
				L = in.Lengths[b]
			}
			rows = append(rows, out[((L-1)*B+b)*W:((L-1)*B+b+1)*W])
		}
	case rnn.HeadFinalState:
		top := len(net.Layers) - 1
		O := net.Out()
		for b := range B {
			var row []float64
			for d := range net.Layers[top] {
				off := net.StateOffset(top, d, B) + b*O
				row = append(row, hn[off:off+O]...)
			}
			rows = append(rows, row)
		}
	}
	V := net.HeadOut
	head = make([]float64, len(rows)*V)
	for r, src := range rows {
		row := head[r*V : (r+1)*V]
		for v := range V {
			row[v] = float64(net.HeadB[v])
			for j := range W {
				row[v] += float64(net.HeadW[v*W+j]) * src[j]
			}
		}
		if net.Activation == rnn.ActNone {
			continue
		}
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(v - mx)
		}
		for v := range row {
			if net.Activation == rnn.ActSoftmax {
				row[v] = math.Exp(row[v]-mx) / sum
			} else {
				row[v] -= mx + math.Log(sum)
			}
		}
	}
	return out, hn, cn, head
}
