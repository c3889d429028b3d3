package tree

import "rnnserve/internal/f32"

// BinaryLeaf finishes n Binary TreeLSTM leaves: g [n][3H] (leading
// dimension 3H) holds W x without the bias b [3H]; row r's state goes to
// h and c at row dst+r (width H), by f32.TreeLeafGates:
//
//	i, o, u = σ(g_i + b_i), σ(g_o + b_o), tanh(g_u + b_u)
//	c = i⊙u,  h = o⊙tanh(c)
func BinaryLeaf(n, H int, g, b, h, c []float32, dst int) {
	for r := 0; r < n; r++ {
		f32.TreeLeafGates(H, H, g[r*3*H:(r+1)*3*H], b, c[(dst+r)*H:(dst+r+1)*H], h[(dst+r)*H:(dst+r+1)*H])
	}
}

// BinaryInner finishes n Binary TreeLSTM inner nodes: g [n][5H] holds
// U [h_l; h_r] without the bias b [5H]; the children's memories are rows
// left[r] and right[r] of c; the state goes to row dst+r of h and c, by
// f32.TreeInnerGates:
//
//	i, f_l, f_r, o, u = σ, σ, σ, σ, tanh of (g + b)
//	c = i⊙u + f_l⊙c_l + f_r⊙c_r,  h = o⊙tanh(c)
func BinaryInner(n, H int, g, b []float32, left, right []int32, h, c []float32, dst int) {
	for r := 0; r < n; r++ {
		f32.TreeInnerGates(H, H, g[r*5*H:(r+1)*5*H], b,
			c[int(left[r])*H:int(left[r]+1)*H], c[int(right[r])*H:int(right[r]+1)*H],
			c[(dst+r)*H:(dst+r+1)*H], h[(dst+r)*H:(dst+r+1)*H])
	}
}

// chunk is the number of units ChildSum finishes at a time, through
// vectors on its stack.
const chunk = 64

// ChildSum finishes n Child-Sum TreeLSTM nodes. wx [n][4H] holds W x
// without the bias b [4H] (gates i, o, u, f; zero rows for nodes without a
// word), iou [n][3H] holds U_iou h̃ (h̃ the sum of the children's h), and
// uf [K][H] holds U_f h_k for every child of the n nodes in order; node r's
// children are kids[r] (rows of c). The state goes to row dst+r:
//
//	i, o, u = σ, σ, tanh of (wx + b + iou);  f_k = σ(wx_f + b_f + U_f h_k)
//	c = i⊙u + Σ_k f_k⊙c_k,  h = o⊙tanh(c)
//
// The sums are formed in Go and the nonlinearities applied by the vector
// f32.SigmoidTo and f32.TanhTo, chunk units at a time: the same chunks for
// every row, so a node gets the same bits wherever it sits.
func ChildSum(n, H int, wx, b, iou, uf []float32, kids [][]int32, h, c []float32, dst int) {
	var i, o, u, f, fc [chunk]float32
	k0 := 0
	for r := 0; r < n; r++ {
		w := wx[r*4*H : (r+1)*4*H]
		q := iou[r*3*H : (r+1)*3*H]
		ho := h[(dst+r)*H : (dst+r+1)*H]
		co := c[(dst+r)*H : (dst+r+1)*H]
		for j0 := 0; j0 < H; j0 += chunk {
			m := min(chunk, H-j0)
			for j := range m {
				i[j] = w[j0+j] + b[j0+j] + q[j0+j]
				o[j] = w[H+j0+j] + b[H+j0+j] + q[H+j0+j]
				u[j] = w[2*H+j0+j] + b[2*H+j0+j] + q[2*H+j0+j]
				fc[j] = 0
			}
			f32.SigmoidTo(i[:m], i[:m])
			f32.SigmoidTo(o[:m], o[:m])
			f32.TanhTo(u[:m], u[:m])
			for k, kid := range kids[r] {
				ufk := uf[(k0+k)*H+j0 : (k0+k)*H+j0+m]
				for j := range m {
					f[j] = w[3*H+j0+j] + b[3*H+j0+j] + ufk[j]
				}
				f32.SigmoidTo(f[:m], f[:m])
				ck := c[int(kid)*H+j0 : int(kid)*H+j0+m]
				for j := range m {
					fc[j] += f[j] * ck[j]
				}
			}
			for j := range m {
				cv := i[j]*u[j] + fc[j]
				co[j0+j] = cv
				f[j] = cv
			}
			f32.TanhTo(f[:m], f[:m])
			for j := range m {
				ho[j0+j] = o[j] * f[j]
			}
		}
		k0 += len(kids[r])
	}
}

// SumRows writes into row r of dst (width H) the sum of the rows rows[r]
// of src, zero for none.
func SumRows(H int, dst, src []float32, rows [][]int32) {
	for r, rs := range rows {
		d := dst[r*H : (r+1)*H]
		clear(d)
		for _, k := range rs {
			for j, v := range src[int(k)*H : int(k+1)*H] {
				d[j] += v
			}
		}
	}
}

// GatherRows copies rows idx of src (width w) into consecutive rows of
// dst starting at column col of rows of width ldd; a negative index gives
// a zero row.
func GatherRows(w int, dst []float32, ldd, col int, src []float32, idx []int32) {
	for r, k := range idx {
		d := dst[r*ldd+col : r*ldd+col+w]
		if k < 0 {
			clear(d)
			continue
		}
		copy(d, src[int(k)*w:int(k+1)*w])
	}
}

// TanhBias writes tanh(g + b) (plus bil when not nil) for n rows of width
// H into rows dst.. of h: the TreeRNN and RNTN nonlinearity, by the vector
// f32.TanhTo.
func TanhBias(n, H int, g, b, bil, h []float32, dst int) {
	for r := 0; r < n; r++ {
		gr := g[r*H : (r+1)*H]
		ho := h[(dst+r)*H : (dst+r+1)*H]
		for j := range ho {
			v := gr[j] + b[j]
			if bil != nil {
				v = bil[r*H+j] + v
			}
			ho[j] = v
		}
		f32.TanhTo(ho, ho)
	}
}

// Bilinear computes the RNTN's tensor term for n rows: with v [n][2H] the
// children's states and u [n][2H·H] = v·V (V as a [2H][2H·H] matrix),
// out[r][k] = Σ_j v[r][j]·u[r][j·H+k], which is vᵀ V[:, :, k] v.
func Bilinear(n, H int, v, u, out []float32) {
	for r := 0; r < n; r++ {
		vr := v[r*2*H : (r+1)*2*H]
		ur := u[r*2*H*H : (r+1)*2*H*H]
		o := out[r*H : (r+1)*H]
		clear(o)
		for j, vj := range vr {
			row := ur[j*H : (j+1)*H]
			for k, x := range row {
				o[k] += vj * x
			}
		}
	}
}
