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
	return "models: weights do not match the spec: " + joinProblems(e.Problems)
}

// Is makes errors.Is(err, ErrWeights) true.
func (e *WeightsError) Is(target error) bool { return target == ErrWeights }

// floatDTypes are the dtypes bind converts to float32.
var floatDTypes = []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64}

// bind makes the network of spec s from the tensors of ts under the names
// s gives them, and returns it with the sorted dtypes it found. Names,
// dtypes and shapes are checked on a dry network first, so the network's
// weights are allocated only once every one of them has a tensor of its
// shape in the file: a spec cannot make the loader allocate more than
// the file's tensors hold. Each tensor is then read straight into its
// weights (safetensors.Tensor.Float32sInto) and checked for non-finite
// values.
func bind(s *Spec, ts Tensors) (*rnn.Network, []string, error) {
	dry, err := network(s, true)
	if err != nil {
		return nil, nil, err
	}
	var problems problemList
	want := map[string]bool{}
	for _, p := range ParamsOf(dry, s) {
		want[p.Name] = true
		t, ok := ts.Tensor(p.Name)
		switch {
		case !ok:
			problems.add("tensor %q is missing (shape %v)", clip(p.Name), p.Shape)
		case !slices.Contains(floatDTypes, t.DType):
			problems.add("tensor %q has dtype %s, want F32, F16, BF16 or F64", clip(p.Name), clip(string(t.DType)))
		case !slices.Equal(t.Shape, p.Shape):
			problems.add("tensor %q has shape %s, want %v", clip(p.Name), safetensors.ShapeString(t.Shape), p.Shape)
		}
	}
	for _, name := range ts.Names() {
		if !want[name] {
			problems.add("unexpected tensor %q", clip(name))
		}
	}
	if err := problems.err(); err != nil {
		return nil, nil, err
	}
	if n := dry.WeightBytes(); n > MaxWeightsBytes {
		return nil, nil, fmt.Errorf("%w: the model's weights take %d bytes as float32, limit %d (MaxWeightsBytes)", ErrTooLarge, n, int64(MaxWeightsBytes))
	}
	net, err := network(s, false)
	if err != nil {
		return nil, nil, err
	}
	dtypes := map[string]bool{}
	for _, p := range ParamsOf(net, s) {
		t, _ := ts.Tensor(p.Name)
		if err := t.Float32sInto(p.Data); err != nil {
			problems.add("tensor %q: %v", clip(p.Name), err)
			continue
		}
		if i := firstNonFinite(p.Data); i >= 0 {
			problems.add("tensor %q has non-finite value %v at flat index %d (as float32)", clip(p.Name), p.Data[i], i)
			continue
		}
		dtypes[string(t.DType)] = true
	}
	// LSTM and Elman layers run on b_ih + b_hh, summed once; two finite
	// halves past 1.7e38 sum to infinity.
	for k, dirs := range net.Layers {
		for d, l := range dirs {
			if l.Bih == nil || l.Bhh == nil || l.Cell == rnn.GRU {
				continue
			}
			for i := range l.Bih {
				if v := l.Bih[i] + l.Bhh[i]; math.IsInf(float64(v), 0) {
					problems.add("layer %d direction %d: bias_ih and bias_hh sum to non-finite value %v at flat index %d", k, d, v, i)
					break
				}
			}
		}
	}
	if err := problems.err(); err != nil {
		return nil, nil, err
	}
	return net, slices.Sorted(maps.Keys(dtypes)), nil
}

// maxProblems is how many problems a WeightsError lists; it counts the
// rest.
const maxProblems = 32

// problemList collects the problems of binding, keeping the first
// maxProblems.
type problemList struct {
	list []string
	more int
}

func (p *problemList) add(format string, a ...any) {
	if len(p.list) == maxProblems {
		p.more++
		return
	}
	p.list = append(p.list, fmt.Sprintf(format, a...))
}

// joinProblems joins the first maxProblems problems for a message and
// counts the rest.
func joinProblems(list []string) string {
	if len(list) > maxProblems {
		return strings.Join(list[:maxProblems], "; ") + fmt.Sprintf("; and %d more", len(list)-maxProblems)
	}
	return strings.Join(list, "; ")
}

func (p *problemList) err() error {
	if p.list == nil {
		return nil
	}
	list := p.list
	if p.more > 0 {
		list = append(list, fmt.Sprintf("and %d more", p.more))
	}
	return &WeightsError{Problems: list}
}

// maxName is how much of a name a message prints.
const maxName = 200

// clip shortens a name from a file for a message.
func clip(s string) string {
	if len(s) <= maxName {
		return s
	}
	return s[:maxName] + fmt.Sprintf("... (%d bytes)", len(s))
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
