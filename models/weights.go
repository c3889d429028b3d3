package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
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

// Params lists the parameters of net under the default state_dict names,
// in state_dict order: embedding.weight; rnn.weight_ih_l{k}[_reverse] and
// the rest for a uniform stack (one module), or rnn.{k}.weight_ih_l0 and
// the rest, one module per layer, for a mixed one; head.weight, head.bias.
func Params(net *rnn.Network) []Param { return ParamsOf(net, nil) }

// Params lists the model's parameters under the names its weights file
// uses (ParamsOf with the model's spec).
func (m *Model) Params() []Param { return ParamsOf(m.Net, m.Spec) }

// DefaultPrefixes are the prefixes of a spec that sets none: "embedding",
// "rnn" for one module or "rnn.0", "rnn.1", ... for a list of layers, and
// "head".
func DefaultPrefixes(s *Spec) Prefixes {
	emb, head := "embedding", "head"
	p := Prefixes{Embedding: &emb, Head: &head, RNN: PrefixList{"rnn"}}
	if len(s.Layers) > 0 {
		p.RNN = make(PrefixList, len(s.Layers))
		for i := range p.RNN {
			p.RNN[i] = fmt.Sprintf("rnn.%d", i)
		}
	}
	return p
}

// prefixesOf is s's prefixes with the defaults filled in.
func prefixesOf(s *Spec) Prefixes {
	p := DefaultPrefixes(s)
	if s.Prefixes != nil {
		if s.Prefixes.Embedding != nil {
			p.Embedding = s.Prefixes.Embedding
		}
		if s.Prefixes.Head != nil {
			p.Head = s.Prefixes.Head
		}
		if s.Prefixes.RNN != nil {
			p.RNN = s.Prefixes.RNN
		}
	}
	return p
}

// join makes a state_dict name: prefix.name, or name alone for prefix "".
func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// ParamsOf lists the parameters of net under the names spec s gives them
// (its module split and prefixes), in state_dict order. Biases of modules
// with bias: false are not listed (the network keeps them zero), nor the
// head's bias with head.bias: false. A nil s names a network as Params
// does. s must describe net.
func ParamsOf(net *rnn.Network, s *Spec) []Param {
	if s == nil {
		s = defaultSpec(net)
	}
	pre := prefixesOf(s)
	var ps []Param
	if net.Vocab > 0 {
		ps = append(ps, Param{join(*pre.Embedding, "weight"), []int{net.Vocab, net.Input}, net.Embedding})
	}
	k := 0
	for m, mod := range s.Modules() {
		for j := range mod.NumLayers {
			for d, l := range net.Layers[k] {
				sfx := fmt.Sprintf("_l%d", j)
				if d == 1 {
					sfx += "_reverse"
				}
				name := func(kind string) string { return join(pre.RNN[m], kind+sfx) }
				rows := l.Rows()
				ps = append(ps,
					Param{name("weight_ih"), []int{rows, l.Input}, l.Wih},
					Param{name("weight_hh"), []int{rows, l.Out()}, l.Whh})
				if s.HasBias(m) {
					ps = append(ps,
						Param{name("bias_ih"), []int{rows}, l.Bih},
						Param{name("bias_hh"), []int{rows}, l.Bhh})
				}
				if l.Proj > 0 {
					ps = append(ps, Param{name("weight_hr"), []int{l.Proj, l.Hidden}, l.Whr})
				}
			}
			k++
		}
	}
	if net.HeadOut > 0 {
		ps = append(ps, Param{join(*pre.Head, "weight"), []int{net.HeadOut, net.OutputWidth()}, net.HeadW})
		if s.Head == nil || s.Head.Bias == nil || *s.Head.Bias {
			ps = append(ps, Param{join(*pre.Head, "bias"), []int{net.HeadOut}, net.HeadB})
		}
	}
	return ps
}

// defaultSpec describes net's modules as Params names them: one module
// for a uniform stack, one per layer otherwise.
func defaultSpec(net *rnn.Network) *Spec {
	s := &Spec{InputSize: net.Input}
	if net.Uniform() {
		l := net.Layers[0][0]
		s.Cell, s.HiddenSize, s.ProjSize, s.NumLayers, s.Bidirectional = l.Cell.String(), l.Hidden, l.Proj, len(net.Layers), len(net.Layers[0]) == 2
	} else {
		for _, dirs := range net.Layers {
			l := dirs[0]
			s.Layers = append(s.Layers, LayerSpec{Cell: l.Cell.String(), HiddenSize: l.Hidden, NumLayers: 1,
				Bidirectional: len(dirs) == 2, ProjSize: l.Proj})
		}
	}
	return s
}

// Tensors is a set of named tensors: a safetensors file, a PyTorch
// checkpoint (pytorch.File), or tensors made from an ONNX model.
type Tensors interface {
	Names() []string
	Tensor(name string) (*safetensors.Tensor, bool)
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

// floatDTypes are the dtypes bind converts to float32.
var floatDTypes = []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64}

// bind copies the tensors of ts into net under the names spec s gives
// them, checking names, dtypes, shapes and values, and returns the sorted
// dtypes it found.
func bind(net *rnn.Network, s *Spec, ts Tensors) ([]string, error) {
	var problems []string
	want := map[string]bool{}
	dtypes := map[string]bool{}
	for _, p := range ParamsOf(net, s) {
		want[p.Name] = true
		t, ok := ts.Tensor(p.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("tensor %q is missing (shape %v)", p.Name, p.Shape))
			continue
		}
		if !slices.Contains(floatDTypes, t.DType) {
			problems = append(problems, fmt.Sprintf("tensor %q has dtype %s, want F32, F16, BF16 or F64", p.Name, t.DType))
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
			problems = append(problems, fmt.Sprintf("tensor %q has non-finite value %v at flat index %d (as float32)", p.Name, v[i], i))
			continue
		}
		copy(p.Data, v)
		dtypes[string(t.DType)] = true
	}
	for _, name := range ts.Names() {
		if !want[name] {
			problems = append(problems, fmt.Sprintf("unexpected tensor %q", name))
		}
	}
	if problems != nil {
		return nil, &WeightsError{Problems: problems}
	}
	return slices.Sorted(maps.Keys(dtypes)), nil
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
	for _, dirs := range net.Layers {
		for _, l := range dirs {
			k := 1 / math.Sqrt(float64(l.Hidden))
			for _, v := range [][]float32{l.Wih, l.Whh, l.Bih, l.Bhh, l.Whr} {
				uniform(v, k)
			}
		}
	}
	kh := 1 / math.Sqrt(float64(net.OutputWidth()))
	uniform(net.HeadW, kh)
	uniform(net.HeadB, kh)
}
