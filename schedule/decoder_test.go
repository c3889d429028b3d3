package schedule

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"rnnserve/models"
	"rnnserve/rnn"
)

// decoderCase is an encoder and an attention decoder over its outputs.
type decoderCase struct {
	name    string
	enc     rnn.Config
	dec     rnn.DecoderConfig
	s       Schedule
	T, B, S int
}

func decoderCases() []decoderCase {
	lstm := rnn.Config{Cell: rnn.LSTM, Input: 6, Hidden: 8, Layers: 2, Vocab: 13}
	bi := rnn.Config{Cell: rnn.LSTM, Input: 5, Hidden: 4, Layers: 1, Bidirectional: true, Vocab: 9}
	gru := rnn.Config{Cell: rnn.GRU, Input: 7, Hidden: 6, Layers: 2}
	elman := rnn.Config{Cell: rnn.RNNReLU, Input: 6, Hidden: 5, Layers: 1, Bidirectional: true}
	return []decoderCase{
		{"lstm-A-b1", lstm, rnn.DecoderConfig{Cell: rnn.LSTM, Vocab: 11, Embed: 5, Hidden: 9, Layers: 2, Memory: 8}, A, 6, 1, 7},
		{"lstm-A+-b2-3layers", lstm, rnn.DecoderConfig{Cell: rnn.LSTM, Vocab: 17, Embed: 4, Hidden: 6, Layers: 3, Memory: 8}, APlus, 5, 2, 6},
		{"bidir-encoder-A+-b3", bi, rnn.DecoderConfig{Cell: rnn.LSTM, Vocab: 10, Embed: 3, Hidden: 5, Layers: 1, Memory: 8}, APlus, 4, 3, 5},
		{"gru-A-b2", gru, rnn.DecoderConfig{Cell: rnn.GRU, Vocab: 12, Embed: 5, Hidden: 7, Layers: 2, Memory: 6}, A, 5, 2, 6},
		{"elman-A+-b2", elman, rnn.DecoderConfig{Cell: rnn.RNNTanh, Vocab: 9, Embed: 4, Hidden: 6, Layers: 2, Memory: 10}, APlus, 4, 2, 5},
		{"elman-relu-A-b1", gru, rnn.DecoderConfig{Cell: rnn.RNNReLU, Vocab: 8, Embed: 3, Hidden: 5, Layers: 1, Memory: 6}, A, 6, 1, 4},
	}
}

// randomDecoder makes a decoder with seeded weights, scaled up so that the
// argmax tokens vary from step to step.
func randomDecoder(t testing.TB, cfg rnn.DecoderConfig, seed uint64) *rnn.Decoder {
	t.Helper()
	d, err := rnn.NewDecoder(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	models.Randomize(d.Stack, seed)
	r := rand.New(rand.NewPCG(seed, 7))
	for _, w := range []struct {
		v     []float32
		scale float64
	}{{d.Embedding, 4}, {d.Attn.Wa, 1}, {d.Attn.Wc, 2}, {d.Stack.HeadW, 3}} {
		for i := range w.v {
			w.v[i] = float32(w.scale * (2*r.Float64() - 1))
		}
	}
	for _, dirs := range d.Stack.Layers {
		for i := range dirs[0].Wih {
			dirs[0].Wih[i] *= 3
		}
	}
	return d
}

// encoderPlan builds the encoder's plan (without head) on random tokens
// or features.
func encoderPlan(t testing.TB, net *rnn.Network, s Schedule, T, B int, r *rand.Rand) (*Plan, Input) {
	t.Helper()
	in := Input{T: T, B: B}
	if net.Vocab > 0 {
		in.Tokens = make([]int64, T*B)
		for i := range in.Tokens {
			in.Tokens[i] = r.Int64N(int64(net.Vocab))
		}
	} else if !net.Dry() {
		in.Features = randFloats(T*B*net.Input, r)
	}
	prog, err := NewProgram(net, s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := prog.Plan(in, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p, in
}

// refDecode is a straightforward float64 implementation of greedy decoding
// with Luong general attention and input feeding, one batch row at a time,
// from PyTorch-layout weights (not Schedule A's concatenated G).
func refDecode(d *rnn.Decoder, mem []float32, T, B, S int, start int64) (tokens []int64, att, logp, hn, cn []float64) {
	n := d.Stack
	H, E, W, V, L := n.Hidden, d.Embed, d.Attn.Memory, d.Vocab, n.NumLayers
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	tokens = make([]int64, S*B)
	att = make([]float64, S*B*H)
	logp = make([]float64, B*V)
	hn, cn = make([]float64, L*B*H), make([]float64, L*B*H)
	for b := range B {
		h := make([][]float64, L)
		c := make([][]float64, L)
		for k := range L {
			h[k], c[k] = make([]float64, H), make([]float64, H)
		}
		htil := make([]float64, H)
		prev := start
		for t := range S {
			x := make([]float64, 0, E+H)
			for _, v := range d.Embedding[int(prev)*E : int(prev+1)*E] {
				x = append(x, float64(v))
			}
			x = append(x, htil...)
			for k := range L {
				l := n.Layers[k][0]
				if k > 0 {
					x = slices.Clone(h[k-1])
				}
				G := l.Rows() / H
				gi := make([]float64, G*H) // W_ih x + b_ih
				gh := make([]float64, G*H) // W_hh h + b_hh
				for r := range G * H {
					gi[r], gh[r] = float64(l.Bih[r]), float64(l.Bhh[r])
					for j, v := range x {
						gi[r] += float64(l.Wih[r*len(x)+j]) * v
					}
					for j, v := range h[k] {
						gh[r] += float64(l.Whh[r*H+j]) * v
					}
				}
				for j := range H {
					switch l.Cell {
					case rnn.RNNTanh:
						h[k][j] = math.Tanh(gi[j] + gh[j])
					case rnn.RNNReLU:
						h[k][j] = math.Max(gi[j]+gh[j], 0)
					case rnn.LSTM:
						i := sig(gi[j] + gh[j])
						f := sig(gi[H+j] + gh[H+j])
						g := math.Tanh(gi[2*H+j] + gh[2*H+j])
						o := sig(gi[3*H+j] + gh[3*H+j])
						c[k][j] = f*c[k][j] + i*g
						h[k][j] = o * math.Tanh(c[k][j])
					default:
						r := sig(gi[j] + gh[j])
						z := sig(gi[H+j] + gh[H+j])
						nn := math.Tanh(gi[2*H+j] + r*gh[2*H+j])
						h[k][j] = (1-z)*nn + z*h[k][j]
					}
				}
			}
			top := h[L-1]
			q := make([]float64, W)
			for i := range W {
				for j := range H {
					q[i] += float64(d.Attn.Wa[i*H+j]) * top[j]
				}
			}
			scores := make([]float64, T)
			mx := math.Inf(-1)
			for s := range T {
				for j := range W {
					scores[s] += float64(mem[(s*B+b)*W+j]) * q[j]
				}
				mx = math.Max(mx, scores[s])
			}
			var z float64
			for s := range scores {
				scores[s] = math.Exp(scores[s] - mx)
				z += scores[s]
			}
			cat := make([]float64, W+H)
			for s := range T {
				for j := range W {
					cat[j] += scores[s] / z * float64(mem[(s*B+b)*W+j])
				}
			}
			copy(cat[W:], top)
			for i := range H {
				var v float64
				for j := range W + H {
					v += float64(d.Attn.Wc[i*(W+H)+j]) * cat[j]
				}
				htil[i] = math.Tanh(v)
			}
			copy(att[(t*B+b)*H:], htil)
			row := logp[b*V : (b+1)*V]
			mx = math.Inf(-1)
			for v := range V {
				row[v] = float64(n.HeadB[v])
				for j := range H {
					row[v] += float64(n.HeadW[v*H+j]) * htil[j]
				}
				mx = math.Max(mx, row[v])
			}
			var sum float64
			for _, v := range row {
				sum += math.Exp(v - mx)
			}
			best := 0
			for v := range row {
				row[v] -= mx + math.Log(sum)
				if row[v] > row[best] {
					best = v
				}
			}
			tokens[t*B+b] = int64(best)
			prev = int64(best)
		}
		for k := range L {
			copy(hn[(k*B+b)*H:], h[k])
			copy(cn[(k*B+b)*H:], c[k])
		}
	}
	return tokens, att, logp, hn, cn
}

func closeTo64(got []float32, want []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*math.Max(1, math.Abs(want[i]))) {
			return fmt.Errorf("element %d: got %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

type walked struct {
	buf                  string
	kind                 BufferKind
	off, len, stride     int64
	count                int
	write                bool
	kernel, layer, tstep int
}

func walkOf(p *Plan) []walked {
	var w []walked
	for _, s := range p.Steps {
		for i, r := range append(s.Reads(), s.Writes()...) {
			w = append(w, walked{r.Buf.Name, r.Buf.Kind, r.Off, r.Len, r.Stride, r.Count, i >= len(s.Reads()), int(s.Kernel), s.Layer, s.T})
		}
	}
	return w
}

// TestDecoderDryWalk checks that a dry plan given the tokens a run chose
// walks exactly as the run did (after it ran), region by region, and that
// every region lies inside its buffer.
func TestDecoderDryWalk(t *testing.T) {
	for i, tc := range decoderCases() {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 11))
			encNet := randomNet(t, tc.enc, uint64(i)+1)
			encPlan, encIn := encoderPlan(t, encNet, tc.s, tc.T, tc.B, r)
			dp, err := NewDecoderProgram(randomDecoder(t, tc.dec, uint64(i)+2))
			if err != nil {
				t.Fatal(err)
			}
			plan, err := dp.Plan(encPlan, DecodeInput{Steps: tc.S, Start: 2})
			if err != nil {
				t.Fatal(err)
			}
			res, err := plan.Run()
			if err != nil {
				t.Fatal(err)
			}

			dryEnc, err := rnn.NewNetwork(tc.enc, true)
			if err != nil {
				t.Fatal(err)
			}
			dryDec, err := rnn.NewDecoder(tc.dec, true)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := NewProgram(dryEnc, tc.s)
			if err != nil {
				t.Fatal(err)
			}
			dryIn := Input{T: tc.T, B: tc.B, Tokens: encIn.Tokens}
			dryEncPlan, err := prog.Plan(dryIn, PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ddp, err := NewDecoderProgram(dryDec)
			if err != nil {
				t.Fatal(err)
			}
			dry, err := ddp.Plan(dryEncPlan, DecodeInput{Steps: tc.S, Start: 2, Tokens: slices.Clone(res.Tokens)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dry.Run(); !errors.Is(err, ErrDryPlan) {
				t.Errorf("dry Run = %v, want ErrDryPlan", err)
			}
			got, want := walkOf(dry.Plan), walkOf(plan.Plan)
			if len(got) != len(want) {
				t.Fatalf("dry plan walks %d regions, the run %d", len(got), len(want))
			}
			for k := range got {
				if got[k] != want[k] {
					t.Fatalf("region %d: dry %+v, run %+v", k, got[k], want[k])
				}
			}
			for _, s := range plan.Plan.Steps {
				for _, r := range append(s.Reads(), s.Writes()...) {
					if end := r.Off + int64(r.Count-1)*r.Stride + r.Len; r.Off < 0 || end > r.Buf.Bytes() {
						t.Fatalf("region [%d, %d) outside buffer %s of %d bytes", r.Off, end, r.Buf.Name, r.Buf.Bytes())
					}
				}
			}
			// Every output step reads each decoder layer's G once.
			reads := map[string]int{}
			plan.Plan.Walk(func(r Region, write bool) {
				if !write && r.Buf.Kind == KindWeight && r.Off == 0 && r.Len == r.Buf.Bytes() {
					reads[r.Buf.Name]++
				}
			})
			if tc.dec.Cell == rnn.LSTM {
				for k := range tc.dec.Layers {
					if n := reads[fmt.Sprintf("dec.l%d.G", k)]; n != tc.S {
						t.Errorf("dec.l%d.G read whole %d times, want %d", k, n, tc.S)
					}
				}
			}
			for _, name := range []string{"dec.head.weight", "dec.attn.W_a", "dec.attn.W_c"} {
				if reads[name] != tc.S {
					t.Errorf("%s read whole %d times, want %d", name, reads[name], tc.S)
				}
			}
		})
	}
}

func TestDecoderErrors(t *testing.T) {
	tc := decoderCases()[0]
	r := rand.New(rand.NewPCG(1, 2))
	encNet := randomNet(t, tc.enc, 1)
	encPlan, _ := encoderPlan(t, encNet, tc.s, tc.T, tc.B, r)
	dp, err := NewDecoderProgram(randomDecoder(t, tc.dec, 2))
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]DecodeInput{
		"zero steps":       {Steps: 0},
		"too many steps":   {Steps: MaxSteps + 1},
		"start out":        {Steps: 2, Start: int64(tc.dec.Vocab)},
		"negative start":   {Steps: 2, Start: -1},
		"tokens with data": {Steps: 2, Tokens: []int64{1, 2}},
	} {
		if _, err := dp.Plan(encPlan, in); !errors.Is(err, ErrInput) {
			t.Errorf("%s: %v, want ErrInput", name, err)
		}
	}
	if _, err := dp.Plan(nil, DecodeInput{Steps: 1}); !errors.Is(err, ErrDecoder) {
		t.Errorf("nil encoder plan: %v, want ErrDecoder", err)
	}

	// The memory width must match the encoder's outputs.
	other := tc.dec
	other.Memory++
	dp2, err := NewDecoderProgram(randomDecoder(t, other, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dp2.Plan(encPlan, DecodeInput{Steps: 1}); !errors.Is(err, ErrDecoder) {
		t.Errorf("memory mismatch: %v, want ErrDecoder", err)
	}

	// Dry and real halves do not mix; a dry plan needs its tokens.
	dryDec, err := rnn.NewDecoder(tc.dec, true)
	if err != nil {
		t.Fatal(err)
	}
	ddp, err := NewDecoderProgram(dryDec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ddp.Plan(encPlan, DecodeInput{Steps: 1, Tokens: []int64{0}}); !errors.Is(err, ErrDecoder) {
		t.Errorf("dry decoder after a real encoder: %v, want ErrDecoder", err)
	}
	dryEnc, err := rnn.NewNetwork(tc.enc, true)
	if err != nil {
		t.Fatal(err)
	}
	dryEncPlan, _ := encoderPlan(t, dryEnc, tc.s, tc.T, tc.B, r)
	for name, in := range map[string]DecodeInput{
		"no tokens":     {Steps: 2},
		"short tokens":  {Steps: 2, Tokens: []int64{0}},
		"token outside": {Steps: 1, Tokens: []int64{int64(tc.dec.Vocab)}},
	} {
		if _, err := ddp.Plan(dryEncPlan, in); !errors.Is(err, ErrInput) {
			t.Errorf("dry, %s: %v, want ErrInput", name, err)
		}
	}

	// Stacks the decoder cannot run.
	bi := randomDecoder(t, tc.dec, 4)
	bi.Stack.Bidirectional = true
	if _, err := NewDecoderProgram(bi); !errors.Is(err, ErrDecoder) {
		t.Errorf("bidirectional stack: %v, want ErrDecoder", err)
	}
	wrongQuery := randomDecoder(t, tc.dec, 5)
	wrongQuery.Attn.Query++
	if _, err := NewDecoderProgram(wrongQuery); !errors.Is(err, ErrDecoder) {
		t.Errorf("attention query width: %v, want ErrDecoder", err)
	}
}
