package models

import (
	"fmt"
	"io"
	"slices"

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

// add names a weight of the model: a tensor whose elements are still in
// the ONNX file, read into the network when it is bound.
func (o *onnxModel) add(name string, t *safetensors.Tensor) {
	named := *t
	named.Name = name
	o.tensors[name] = &named
	o.names = append(o.names, name)
}

// readONNX imports the ONNX model in f, opening external data files with
// open relative to the model's own path (nil: refused). The weights stay
// in f and the external data files, which f's Close closes.
func readONNX(f *modelFile, open opener) (Tensors, error) {
	var ext onnx.Opener
	if open != nil {
		dir := ""
		if i := lastSlash(f.name); i >= 0 {
			dir = f.name[:i+1]
		}
		ext = func(loc string) (io.ReaderAt, int64, error) {
			ef, err := open(dir + loc)
			if err != nil {
				return nil, 0, err
			}
			f.also = append(f.also, ef)
			if ef.size > MaxWeightsBytes {
				return nil, 0, fmt.Errorf("%w: ONNX external data %s has %d bytes, limit %d", ErrTooLarge, ef.name, ef.size, int64(MaxWeightsBytes))
			}
			return ef, ef.size, nil
		}
	}
	m, err := onnx.ReadAt(f, f.size, ext)
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
		o.add(join(*pre.Embedding, "weight"), m.Embedding)
	}
	for k, l := range m.Layers {
		prefix, j := pre.RNN[0], k
		if !uniform {
			prefix, j = pre.RNN[k], 0
		}
		for d, w := range l.Dirs {
			sfx := fmt.Sprintf("_l%d", j)
			if d == 1 {
				sfx += "_reverse"
			}
			o.add(join(prefix, "weight_ih"+sfx), w.Wih)
			o.add(join(prefix, "weight_hh"+sfx), w.Whh)
			o.add(join(prefix, "bias_ih"+sfx), w.Bih)
			o.add(join(prefix, "bias_hh"+sfx), w.Bhh)
		}
	}
	if m.HeadOut > 0 {
		o.add(join(*pre.Head, "weight"), m.HeadW)
		if m.HeadB != nil {
			o.add(join(*pre.Head, "bias"), m.HeadB)
		}
	}
	return o, nil
}
