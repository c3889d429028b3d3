package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"rnnserve/models/safetensors"
	"rnnserve/rnn"
)

// Param is one named parameter tensor of a network, aliasing its storage.
type Param struct {
	Name  string
	Shape []int
	Data  []float32
}

// Params lists the parameters of net under their PyTorch state_dict names,
// in state_dict order.
func Params(net *rnn.Network) []Param {
	var ps []Param
	if net.Vocab > 0 {
		ps = append(ps, Param{"embedding.weight", []int{net.Vocab, net.Input}, net.Embedding})
	}
	for k, dirs := range net.Layers {
		for d, l := range dirs {
			sfx := fmt.Sprintf("_l%d", k)
			if d == 1 {
				sfx += "_reverse"
			}
			rows := l.Rows()
			ps = append(ps,
				Param{"rnn.weight_ih" + sfx, []int{rows, l.Input}, l.Wih},
				Param{"rnn.weight_hh" + sfx, []int{rows, l.Out()}, l.Whh},
				Param{"rnn.bias_ih" + sfx, []int{rows}, l.Bih},
				Param{"rnn.bias_hh" + sfx, []int{rows}, l.Bhh})
			if l.Proj > 0 {
				ps = append(ps, Param{"rnn.weight_hr" + sfx, []int{l.Proj, l.Hidden}, l.Whr})
			}
		}
	}
	if net.HeadOut > 0 {
		ps = append(ps,
			Param{"head.weight", []int{net.HeadOut, net.OutputWidth()}, net.HeadW},
			Param{"head.bias", []int{net.HeadOut}, net.HeadB})
	}
	return ps
}

// ErrWeights is matched by every *WeightsError.
var ErrWeights = errors.New("models: weights do not match the spec")

// WeightsError lists every problem found binding a weights file to a spec:
// missing, extra, mistyped, misshapen or non-finite tensors.
type WeightsError struct {
	Problems []string
}

func (e *WeightsError) Error() string {
	return "models: weights do not match the spec: " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrWeights) true.
func (e *WeightsError) Is(target error) bool { return target == ErrWeights }

// bindWeights reads a safetensors file and copies its tensors into net,
// checking names, dtypes, shapes and values against the spec.
func bindWeights(net *rnn.Network, data []byte) error {
	f, err := safetensors.Read(data)
	if err != nil {
		return fmt.Errorf("read weights: %w", err)
	}
	var problems []string
	want := map[string]bool{}
	for _, p := range Params(net) {
		want[p.Name] = true
		t, ok := f.Tensor(p.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("tensor %q is missing (shape %v)", p.Name, p.Shape))
			continue
		}
		if t.DType != safetensors.F32 {
			problems = append(problems, fmt.Sprintf("tensor %q has dtype %s, want F32", p.Name, t.DType))
			continue
		}
		if !slices.Equal(t.Shape, p.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %q has shape %v, want %v", p.Name, t.Shape, p.Shape))
			continue
		}
		v, err := t.Float32s()
		if err != nil {
			problems = append(problems, fmt.Sprintf("tensor %q: %v", p.Name, err))
			continue
		}
		if i := firstNonFinite(v); i >= 0 {
			problems = append(problems, fmt.Sprintf("tensor %q has non-finite value %v at flat index %d", p.Name, v[i], i))
			continue
		}
		copy(p.Data, v)
	}
	for _, name := range f.Names() {
		if !want[name] {
			problems = append(problems, fmt.Sprintf("unexpected tensor %q", name))
		}
	}
	if problems != nil {
		return &WeightsError{Problems: problems}
	}
	return nil
}

func firstNonFinite(v []float32) int {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return i
		}
	}
	return -1
}

// WriteWeights writes net's parameters as a safetensors file.
func WriteWeights(w io.Writer, net *rnn.Network) error {
	if net.Dry() {
		return errors.New("models: a dry network has no weights to write")
	}
	var ts []safetensors.Tensor
	for _, p := range Params(net) {
		ts = append(ts, safetensors.FromFloat32(p.Name, p.Shape, p.Data))
	}
	return safetensors.Write(w, ts, map[string]string{"format": "pt", "writer": "rnnserve"})
}

// EncodeWeights is WriteWeights into a byte slice.
func EncodeWeights(net *rnn.Network) ([]byte, error) {
	var buf bytes.Buffer
	err := WriteWeights(&buf, net)
	return buf.Bytes(), err
}

// Randomize fills net's weights deterministically from seed, with the
// scales PyTorch's default initialisation uses: recurrent weights and
// biases uniform in ±1/sqrt(hidden), the head uniform in ±1/sqrt(fan_in),
// the embedding standard normal.
func Randomize(net *rnn.Network, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	uniform := func(v []float32, k float64) {
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * k)
		}
	}
	for i := range net.Embedding {
		net.Embedding[i] = float32(r.NormFloat64())
	}
	k := 1 / math.Sqrt(float64(net.Hidden))
	for _, dirs := range net.Layers {
		for _, l := range dirs {
			for _, v := range [][]float32{l.Wih, l.Whh, l.Bih, l.Bhh, l.Whr} {
				uniform(v, k)
			}
		}
	}
	kh := 1 / math.Sqrt(float64(net.OutputWidth()))
	uniform(net.HeadW, kh)
	uniform(net.HeadB, kh)
}
