package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"rnnserve/rnn"
)

// Spec is a model spec file. Zero values mean the defaults noted.
type Spec struct {
	Cell          string     `yaml:"cell"`          // lstm | gru
	InputSize     int        `yaml:"input_size"`    // features per step, or embedding width
	HiddenSize    int        `yaml:"hidden_size"`   //
	NumLayers     int        `yaml:"num_layers"`    // default 1
	Bidirectional bool       `yaml:"bidirectional"` //
	ProjSize      int        `yaml:"proj_size"`     // LSTM only; 0 = none
	Embedding     *Embedding `yaml:"embedding"`     // nil: the model takes float features
	Head          *Head      `yaml:"head"`          // nil: no head
	Weights       string     `yaml:"weights"`       // safetensors file, relative to the spec; empty: random
	Seed          uint64     `yaml:"seed"`          // seed for random weights
}

// Embedding is the token embedding: ids in [0, VocabSize) map to rows of width InputSize.
type Embedding struct {
	VocabSize int `yaml:"vocab_size"`
}

// Head is a linear layer applied to every time step of the last layer's output.
type Head struct {
	OutFeatures int    `yaml:"out_features"`
	Activation  string `yaml:"activation"` // none | softmax | log_softmax
}

// ErrSpec is matched by every error about a spec file's content.
var ErrSpec = errors.New("models: invalid spec")

// MaxSpecBytes bounds a spec file; real ones are a few hundred bytes.
const MaxSpecBytes = 1 << 20

// ParseSpec decodes a spec from YAML or JSON, rejecting unknown keys, and validates it.
func ParseSpec(data []byte) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrSpec, len(data), MaxSpecBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrSpec)
		}
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrSpec)
	}
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// EnsureDefaults fills zero values with defaults.
func (s *Spec) EnsureDefaults() {
	if s.NumLayers == 0 {
		s.NumLayers = 1
	}
}

// Config converts the spec to the network shape it describes.
func (s *Spec) Config() (rnn.Config, error) {
	cell, err := rnn.ParseCell(s.Cell)
	if err != nil {
		return rnn.Config{}, fmt.Errorf("%w: cell: %w", ErrSpec, err)
	}
	c := rnn.Config{Cell: cell, Input: s.InputSize, Hidden: s.HiddenSize, Proj: s.ProjSize,
		Layers: s.NumLayers, Bidirectional: s.Bidirectional}
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
		if c.Activation, err = rnn.ParseActivation(s.Head.Activation); err != nil {
			return c, fmt.Errorf("%w: head.activation: %w", ErrSpec, err)
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	return c, nil
}

// Validate reports the first problem with the spec, naming the key.
func (s *Spec) Validate() error {
	_, err := s.Config()
	return err
}

// Model is a loaded network and the spec it came from.
type Model struct {
	Spec *Spec
	Net  *rnn.Network
}

// Load reads a spec file and its weights (or makes seeded random weights
// when the spec names none). A relative weights path is relative to the spec.
func Load(specPath string) (*Model, error) { return load(specPath, osReader(specPath)) }

// LoadFS is Load from a file system, such as an embedded one.
func LoadFS(fsys fs.FS, specPath string) (*Model, error) {
	return load(specPath, fsReader(fsys, specPath))
}

// reader reads a file named in a spec (or the spec itself), refusing more
// than limit bytes.
type reader func(name string, limit int64) ([]byte, error)

// osReader reads from the file system, relative paths relative to the spec.
func osReader(specPath string) reader {
	return func(name string, limit int64) ([]byte, error) {
		if !filepath.IsAbs(name) && name != specPath {
			name = filepath.Join(filepath.Dir(specPath), name)
		}
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		return readLimited(f, limit)
	}
}

// fsReader reads from fsys, paths relative to the spec's directory.
func fsReader(fsys fs.FS, specPath string) reader {
	return func(name string, limit int64) ([]byte, error) {
		if name != specPath {
			name = path.Join(path.Dir(specPath), name)
		}
		f, err := fsys.Open(name)
		if err != nil {
			return nil, err
		}
		return readLimited(f, limit)
	}
}

// MaxWeightsBytes bounds a weights file.
const MaxWeightsBytes = 1 << 34

func load(specPath string, read reader) (*Model, error) {
	data, err := read(specPath, MaxSpecBytes)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", specPath, err)
	}
	s, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", specPath, err)
	}
	var weights []byte
	if s.Weights != "" {
		if weights, err = read(s.Weights, MaxWeightsBytes); err != nil {
			return nil, fmt.Errorf("load weights %s: %w", s.Weights, err)
		}
	}
	m, err := Build(s, weights)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", specPath, err)
	}
	return m, nil
}

// Build makes the model of spec s: with weights (a safetensors file's
// bytes) bound and checked, or random from s.Seed when weights is nil.
func Build(s *Spec, weights []byte) (*Model, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	net, err := rnn.NewNetwork(cfg, false)
	if err != nil {
		return nil, err
	}
	if weights == nil {
		Randomize(net, s.Seed)
	} else if err := bindWeights(net, weights); err != nil {
		return nil, err
	}
	return &Model{Spec: s, Net: net}, nil
}

// Shape makes a dry network of spec s: shapes only, no weights, for
// traffic analysis of models too big to allocate.
func Shape(s *Spec) (*rnn.Network, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	return rnn.NewNetwork(cfg, true)
}

// ErrTooLarge is returned for a spec or weights file over its size limit.
var ErrTooLarge = errors.New("models: file too large")

// readLimited reads f whole and closes it, refusing more than limit bytes.
func readLimited(f io.ReadCloser, limit int64) ([]byte, error) {
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return data, nil
}
