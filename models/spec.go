package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"rnnserve/rnn"
)

// Spec is a model spec file. Zero values mean the defaults noted.
//
// The recurrent stack is given either by the keys of one nn.LSTM/nn.GRU
// module (cell, hidden_size, num_layers, bidirectional, proj_size, bias)
// or, for several modules in sequence that differ in cell, size,
// direction or projection, by Layers, one entry per module.
type Spec struct {
	Cell          string      `yaml:"cell,omitempty"`          // lstm | gru | rnn_tanh | rnn_relu (nn.RNN)
	InputSize     int         `yaml:"input_size"`              // features per step, or embedding width
	HiddenSize    int         `yaml:"hidden_size,omitempty"`   //
	NumLayers     int         `yaml:"num_layers,omitempty"`    // default 1
	Bidirectional bool        `yaml:"bidirectional,omitempty"` //
	ProjSize      int         `yaml:"proj_size,omitempty"`     // LSTM only; 0 = none
	Bias          *bool       `yaml:"bias,omitempty"`          // default true; false: the file has no RNN biases (zeros are used)
	Layers        []LayerSpec `yaml:"layers,omitempty"`        // a stack of modules instead of the six keys above
	Embedding     *Embedding  `yaml:"embedding,omitempty"`     // nil: the model takes float features
	Head          *Head       `yaml:"head,omitempty"`          // nil: no head
	IO            *IO         `yaml:"io,omitempty"`            // input and output names and layout; nil: rnnserve's (see IO)
	Prefixes      *Prefixes   `yaml:"prefixes,omitempty"`      // tensor-name prefixes; nil: defaults, or found in the file
	Weights       string      `yaml:"weights,omitempty"`       // weights file relative to the spec; empty: random
	Seed          uint64      `yaml:"seed,omitempty"`          // seed for random weights
}

// LayerSpec is one RNN module of a stack (an nn.LSTM or nn.GRU): its
// input is the previous module's output, Dirs*Out wide.
type LayerSpec struct {
	Cell          string `yaml:"cell"`
	HiddenSize    int    `yaml:"hidden_size"`
	NumLayers     int    `yaml:"num_layers,omitempty"` // default 1
	Bidirectional bool   `yaml:"bidirectional,omitempty"`
	ProjSize      int    `yaml:"proj_size,omitempty"`
	Bias          *bool  `yaml:"bias,omitempty"` // default true
}

// Embedding is the token embedding: ids in [0, VocabSize) map to rows of width InputSize.
type Embedding struct {
	VocabSize int `yaml:"vocab_size"`
}

// Head is a linear layer (nn.Linear) on the last layer's results: on
// every time step of its output, on its last step, or on its final
// states (Input).
type Head struct {
	OutFeatures int    `yaml:"out_features"`
	Activation  string `yaml:"activation,omitempty"` // none (default) | softmax | log_softmax
	Bias        *bool  `yaml:"bias,omitempty"`       // default true; false: nn.Linear(bias=False)
	// Input is where the head reads (rnn.HeadInput): every_step
	// (fc(out)), last_step (fc(out[:, -1])) or h_n (fc(h_n[-1]), or
	// fc(cat(h_n[-2], h_n[-1])) for two directions). Empty means
	// every_step where the three agree, that is where the last layer
	// runs in one direction (last_step and h_n are then every_step's
	// last row); over a bidirectional layer it must be stated (see
	// AmbiguousError).
	Input string `yaml:"input,omitempty"`
}

// Prefixes maps each part of the model to the name of its module in the
// weights file, as the state_dict names it: tensor "lstm.weight_ih_l0"
// has prefix "lstm"; "" means names without a prefix (a bare module's
// own state_dict). Unset parts take the defaults "embedding", "rnn" (or
// "rnn.0", "rnn.1", ... for a list of layers) and "head" when the spec
// comes with weights that use them, else are found in the file by shape
// (see Infer).
type Prefixes struct {
	Embedding *string    `yaml:"embedding,omitempty"`
	RNN       PrefixList `yaml:"rnn,omitempty"` // one per module: a string, or a list for layers
	Head      *string    `yaml:"head,omitempty"`
}

// PrefixList is one prefix per RNN module; in YAML a single string or a list.
type PrefixList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (p *PrefixList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*p = PrefixList{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*p = list
	return nil
}

// MarshalYAML writes a single prefix as a string.
func (p PrefixList) MarshalYAML() (any, error) {
	if len(p) == 1 {
		return p[0], nil
	}
	return []string(p), nil
}

// ErrSpec is matched by every error about a spec file's content.
var ErrSpec = errors.New("models: invalid spec")

// ErrAmbiguous is matched by every *AmbiguousError.
var ErrAmbiguous = errors.New("models: the spec leaves open what the model computes")

// AmbiguousError is a spec that leaves unstated a key whose possible
// values give different results and that no state_dict records: where
// the head reads, over an RNN that runs in both directions (head.input),
// and the nonlinearity of an nn.RNN (cell: rnn, for rnn_tanh or
// rnn_relu).
// The model is not built: rnnserve never serves a guessed meaning. Each
// entry of Open names the key, the values and the line to add. It
// matches ErrAmbiguous and ErrSpec.
type AmbiguousError struct {
	// Spec is the spec, complete but for the keys in Open: FormatSpec
	// of a Model holding it prints it for the user to finish.
	Spec *Spec
	// Source says where the weights came from when the spec was
	// inferred from them (Source.Inferred), as Open fills it in.
	Source Source
	Open   []string
}

func (e *AmbiguousError) Error() string {
	what := "the spec does not say"
	if e.Source.Inferred {
		what = "the weights file cannot say"
	}
	// A spec of 1024 modules may leave each open: name the first few.
	open := e.Open
	if len(open) > 8 {
		open = append(open[:8:8], fmt.Sprintf("and %d more", len(e.Open)-8))
	}
	return fmt.Sprintf("models: %s what the model computes: %s", what, strings.Join(open, "; "))
}

// Is makes errors.Is(err, ErrAmbiguous) and errors.Is(err, ErrSpec) true.
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous || target == ErrSpec }

// moduleOf names the PyTorch module of a spec's cell.
func moduleOf(cell string) string {
	switch cell {
	case "lstm":
		return "nn.LSTM"
	case "gru":
		return "nn.GRU"
	}
	return "nn.RNN"
}

// parseCell is rnn.ParseCell, with "rnn" (an nn.RNN whose nonlinearity
// is not stated) taken as rnn_tanh for the shape: unstated refuses it.
func parseCell(name string) (rnn.CellKind, error) {
	if name == "rnn" {
		return rnn.RNNTanh, nil
	}
	return rnn.ParseCell(name)
}

// unstated lists the keys the spec must state but does not, each with
// the line that states it.
func (s *Spec) unstated() []string {
	var open []string
	for i, l := range s.Layers {
		if l.Cell == "rnn" {
			open = append(open, fmt.Sprintf("layers[%d].cell: rnn does not say the nn.RNN's nonlinearity: "+
				"write \"cell: rnn_tanh\" (its default) or \"cell: rnn_relu\" in layers[%d]", i, i))
		}
	}
	if s.Cell == "rnn" {
		open = append(open, "cell: rnn does not say the nn.RNN's nonlinearity: write \"cell: rnn_tanh\" (its default) or \"cell: rnn_relu\"")
	}
	mods := s.Modules()
	top := mods[len(mods)-1]
	if s.Head != nil && s.Head.Input == "" && top.Bidirectional {
		open = append(open, fmt.Sprintf("head.input is not set, and over a bidirectional %s every_step (fc(out)), "+
			"last_step (fc(out[:, -1])) and h_n (fc(cat(h_n[-2], h_n[-1]))) differ: "+
			"add \"input: h_n\" under \"head:\" (or every_step, last_step)", moduleOf(top.Cell)))
	}
	return open
}

// MaxSpecBytes bounds a spec file; real ones are a few hundred bytes.
const MaxSpecBytes = 1 << 20

// ParseSpec decodes a spec from YAML or JSON, rejecting unknown keys, and validates it.
func ParseSpec(data []byte) (*Spec, error) {
	s, err := decodeSpec[Spec](data)
	if err != nil {
		return nil, err
	}
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeSpec decodes the one YAML (or JSON) document of a spec file into
// a T, bounded (MaxSpecBytes, checkYAML) and strict: unknown keys, an
// empty file and a second document are errors.
func decodeSpec[T any](data []byte) (*T, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d (MaxSpecBytes)", ErrSpec, len(data), MaxSpecBytes)
	}
	if err := checkYAML(data); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s T
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrSpec)
		}
		return nil, yamlError(err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrSpec)
	}
	return &s, nil
}

// EnsureDefaults fills zero values with defaults.
func (s *Spec) EnsureDefaults() {
	if s.NumLayers == 0 && len(s.Layers) == 0 {
		s.NumLayers = 1
	}
	for i := range s.Layers {
		if s.Layers[i].NumLayers == 0 {
			s.Layers[i].NumLayers = 1
		}
	}
}

// HasBias reports whether the RNN module (index m of Layers, or the one
// module) has biases in its weights file.
func (s *Spec) HasBias(m int) bool {
	if len(s.Layers) > 0 {
		return s.Layers[m].Bias == nil || *s.Layers[m].Bias
	}
	return s.Bias == nil || *s.Bias
}

// Modules lists the RNN modules as layer specs: Layers, or the one module
// the uniform keys describe.
func (s *Spec) Modules() []LayerSpec {
	if len(s.Layers) > 0 {
		return s.Layers
	}
	return []LayerSpec{{Cell: s.Cell, HiddenSize: s.HiddenSize, NumLayers: s.NumLayers,
		Bidirectional: s.Bidirectional, ProjSize: s.ProjSize, Bias: s.Bias}}
}

// Config converts the spec to the network shape it describes. A spec
// that leaves open what the model computes gets an *AmbiguousError.
func (s *Spec) Config() (rnn.Config, error) {
	c, err := s.shape()
	if err != nil {
		return c, err
	}
	if open := s.unstated(); len(open) > 0 {
		return c, &AmbiguousError{Spec: s, Open: open}
	}
	return c, nil
}

// shape is Config without the check that the spec states every key
// whose values give different results.
func (s *Spec) shape() (rnn.Config, error) {
	c := rnn.Config{Input: s.InputSize}
	if len(s.Layers) == 0 {
		cell, err := parseCell(s.Cell)
		if err != nil {
			return rnn.Config{}, fmt.Errorf("%w: cell: %w", ErrSpec, clipError(err))
		}
		c.Cell, c.Hidden, c.Proj, c.Layers, c.Bidirectional = cell, s.HiddenSize, s.ProjSize, s.NumLayers, s.Bidirectional
	} else {
		if s.Cell != "" || s.HiddenSize != 0 || s.NumLayers != 0 || s.Bidirectional || s.ProjSize != 0 || s.Bias != nil {
			return c, fmt.Errorf("%w: layers lists the modules; cell, hidden_size, num_layers, bidirectional, proj_size and bias go in its entries", ErrSpec)
		}
		if len(s.Layers) > 1024 {
			return c, fmt.Errorf("%w: layers has %d entries, limit 1024", ErrSpec, len(s.Layers))
		}
		for i, l := range s.Layers {
			cell, err := parseCell(l.Cell)
			if err != nil {
				return c, fmt.Errorf("%w: layers[%d].cell: %w", ErrSpec, i, clipError(err))
			}
			bad := func(key string, v int, want string) error {
				return fmt.Errorf("%w: layers[%d].%s = %d, want %s", ErrSpec, i, key, v, want)
			}
			switch {
			case l.NumLayers < 1 || l.NumLayers > 1024 || len(c.Stack)+l.NumLayers > 1024:
				return c, bad("num_layers", l.NumLayers, "1..1024 (and 1024 layers in all)")
			case l.HiddenSize < 1 || l.HiddenSize > 1<<24:
				return c, bad("hidden_size", l.HiddenSize, "1..16777216")
			case l.ProjSize < 0 || l.ProjSize >= l.HiddenSize && l.ProjSize != 0:
				return c, bad("proj_size", l.ProjSize, "0 or 1..hidden_size-1")
			case l.ProjSize > 0 && cell != rnn.LSTM:
				return c, bad("proj_size", l.ProjSize, "0 (projection is LSTM only)")
			}
			for range l.NumLayers {
				c.Stack = append(c.Stack, rnn.LayerConfig{Cell: cell, Hidden: l.HiddenSize, Proj: l.ProjSize, Bidirectional: l.Bidirectional})
			}
		}
	}
	if s.Embedding != nil {
		if s.Embedding.VocabSize < 1 {
			return c, fmt.Errorf("%w: embedding.vocab_size = %d, want at least 1", ErrSpec, s.Embedding.VocabSize)
		}
		c.Vocab = s.Embedding.VocabSize
	}
	if s.Head != nil {
		if s.Head.OutFeatures < 1 {
			return c, fmt.Errorf("%w: head.out_features = %d, want at least 1", ErrSpec, s.Head.OutFeatures)
		}
		c.HeadOut = s.Head.OutFeatures
		var err error
		if c.Activation, err = rnn.ParseActivation(s.Head.Activation); err != nil {
			return c, fmt.Errorf("%w: head.activation: %w", ErrSpec, clipError(err))
		}
		if c.HeadInput, err = rnn.ParseHeadInput(s.Head.Input); err != nil {
			return c, fmt.Errorf("%w: head.input: %w", ErrSpec, clipError(err))
		}
	}
	if p := s.Prefixes; p != nil && p.RNN != nil && len(p.RNN) != len(s.Modules()) {
		return c, fmt.Errorf("%w: prefixes.rnn lists %d prefixes for %d RNN modules", ErrSpec, len(p.RNN), len(s.Modules()))
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	if err := s.validateIO(c); err != nil {
		return c, err
	}
	return c, nil
}

// Validate reports the first problem with the spec, naming the key.
func (s *Spec) Validate() error {
	_, err := s.Config()
	return err
}

// ErrTooLarge is returned for a spec or weights file over its size limit.
var ErrTooLarge = errors.New("models: file too large")
