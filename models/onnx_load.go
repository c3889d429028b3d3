package models

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"rnnserve/models/onnx"
	"rnnserve/models/safetensors"
)

// onnxModel is an ONNX model's tensors under the default names of the
// spec its graph gives.
type onnxModel struct {
	spec    *Spec
	tensors map[string]*safetensors.Tensor
	names   []string
}

func (o *onnxModel) Names() []string { return slices.Clone(o.names) }

func (o *onnxModel) Tensor(name string) (*safetensors.Tensor, bool) {
	t, ok := o.tensors[name]
	return t, ok
}

// add names a weight of the model. On a little-endian host the tensor's
// bytes are the float32 slice's own memory, so the weights are held once
// until they are bound into the network.
func (o *onnxModel) add(name string, shape []int, v []float32) {
	var t safetensors.Tensor
	if littleEndian && len(v) > 0 {
		t = safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: slices.Clone(shape),
			Data: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))}
	} else {
		t = safetensors.FromFloat32(name, shape, v)
	}
	o.tensors[name] = &t
	o.names = append(o.names, name)
}

// littleEndian is true on hosts that store a float32 as safetensors does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// readONNX imports an ONNX model, reading external data through open
// relative to the model's own path (nil: refused).
func readONNX(data []byte, name string, open opener) (Tensors, error) {
	var ext func(string) ([]byte, error)
	if open != nil {
		dir := ""
		if i := lastSlash(name); i >= 0 {
			dir = name[:i+1]
		}
		ext = func(loc string) ([]byte, error) {
			return readFile(open, dir+loc, MaxWeightsBytes, "ONNX external data")
		}
	}
	m, err := onnx.Read(data, ext)
	if err != nil {
		return nil, err
	}
	return fromONNX(m)
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' || s[i] == '\\' {
			return i
		}
	}
	return -1
}

// fromONNX gives an imported ONNX model a spec (one module when every
// layer has the same shape, else a list of one-layer modules) and its
// tensors the spec's default names.
func fromONNX(m *onnx.Model) (*onnxModel, error) {
	s := &Spec{InputSize: m.Input}
	uniform := true
	for _, l := range m.Layers[1:] {
		if l.Cell != m.Layers[0].Cell || l.Hidden != m.Layers[0].Hidden || l.Bidirectional != m.Layers[0].Bidirectional {
			uniform = false
		}
	}
	if uniform {
		l := m.Layers[0]
		s.Cell, s.HiddenSize, s.NumLayers, s.Bidirectional = l.Cell, l.Hidden, len(m.Layers), l.Bidirectional
	} else {
		for _, l := range m.Layers {
			s.Layers = append(s.Layers, LayerSpec{Cell: l.Cell, HiddenSize: l.Hidden, NumLayers: 1, Bidirectional: l.Bidirectional})
		}
	}
	if m.Vocab > 0 {
		s.Embedding = &Embedding{VocabSize: m.Vocab}
	}
	if m.HeadOut > 0 {
		// The graph shows where the head reads.
		s.Head = &Head{OutFeatures: m.HeadOut, Input: m.HeadInput}
		if m.Activation != "none" {
			s.Head.Activation = m.Activation
		}
		if m.HeadB == nil {
			f := false
			s.Head.Bias = &f
		}
	}
	// The graph's own names, and its layout.
	s.IO = &IO{Input: m.InputName, TimeMajor: !m.BatchFirst}
	for _, o := range m.Outputs {
		s.IO.Outputs = append(s.IO.Outputs, Output{Name: o.Name, Value: o.Value, Rows: o.Rows, States: o.States, Join: o.Join})
	}
	s.EnsureDefaults()
	if _, err := s.Config(); err != nil {
		return nil, fmt.Errorf("onnx model: %w", err)
	}
	o := &onnxModel{spec: s, tensors: map[string]*safetensors.Tensor{}}
	pre := DefaultPrefixes(s)
	if m.Vocab > 0 {
		o.add(join(*pre.Embedding, "weight"), []int{m.Vocab, m.Input}, m.Embedding)
	}
	for k, l := range m.Layers {
		prefix, j := pre.RNN[0], k
		if !uniform {
			prefix, j = pre.RNN[k], 0
		}
		rows := len(l.Dirs[0].Bih)
		for d, w := range l.Dirs {
			sfx := fmt.Sprintf("_l%d", j)
			if d == 1 {
				sfx += "_reverse"
			}
			o.add(join(prefix, "weight_ih"+sfx), []int{rows, l.Input}, w.Wih)
			o.add(join(prefix, "weight_hh"+sfx), []int{rows, l.Hidden}, w.Whh)
			o.add(join(prefix, "bias_ih"+sfx), []int{rows}, w.Bih)
			o.add(join(prefix, "bias_hh"+sfx), []int{rows}, w.Bhh)
		}
	}
	if m.HeadOut > 0 {
		o.add(join(*pre.Head, "weight"), []int{m.HeadOut, len(m.HeadW) / m.HeadOut}, m.HeadW)
		if m.HeadB != nil {
			o.add(join(*pre.Head, "bias"), []int{m.HeadOut}, m.HeadB)
		}
	}
	return o, nil
}
