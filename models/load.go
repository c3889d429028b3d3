package models

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"rnnserve/models/pytorch"
	"rnnserve/models/safetensors"
	"rnnserve/models/sniff"
	"rnnserve/rnn"
)

// Model is a loaded network, the spec it came from (read or inferred) and
// where its weights came from.
type Model struct {
	Spec   *Spec
	Net    *rnn.Network
	Source Source
}

// Source says where a model's weights came from, for metadata.
type Source struct {
	// Weights is the weights file as the spec or the caller named it; ""
	// for seeded random weights.
	Weights string
	// Format is the weights file's format as its content shows
	// (sniff.Safetensors, sniff.TorchZip, sniff.TorchLegacy, sniff.ONNX);
	// sniff.Unknown for random weights.
	Format sniff.Format
	// DTypes lists the dtypes of the file's weights ("BF16", "F32", ...),
	// all converted to float32 on loading.
	DTypes []string
	// Inferred is true when the spec was inferred from the weights file
	// rather than read from a spec file.
	Inferred bool
}

// Load reads a spec file and its weights (or makes seeded random weights
// when the spec names none). A relative weights path is relative to the
// spec; the weights may be a safetensors file, a PyTorch checkpoint or an
// ONNX model, whatever the file's name says.
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
	if s.Weights == "" {
		m, err := Build(s, nil)
		if err != nil {
			return nil, fmt.Errorf("load model %s: %w", specPath, err)
		}
		return m, nil
	}
	weights, err := read(s.Weights, MaxWeightsBytes)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", s.Weights, err)
	}
	ts, format, err := readWeights(weights, s.Weights, read)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", s.Weights, err)
	}
	m, err := buildFrom(s, ts)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", specPath, err)
	}
	m.Source.Weights, m.Source.Format = s.Weights, format
	return m, nil
}

// ErrFormat is returned for a weights file of a format no reader takes
// (a TorchScript archive, an unknown file); the message says what it is.
var ErrFormat = errors.New("models: unsupported weights file")

// readWeights reads the tensors of a weights file by its content. read
// resolves ONNX external data files (nil: none allowed).
func readWeights(data []byte, name string, read reader) (Tensors, sniff.Format, error) {
	f := sniff.Detect(data)
	switch f {
	case sniff.Safetensors:
		st, err := safetensors.Read(data)
		return st, f, err
	case sniff.TorchZip, sniff.TorchLegacy, sniff.Zip:
		pt, err := pytorch.Read(data)
		if err != nil {
			return nil, f, err
		}
		return pt, pt.Format, nil
	case sniff.ONNX:
		ts, err := readONNX(data, name, read)
		return ts, f, err
	}
	return nil, f, fmt.Errorf("%w: this is %v (want safetensors, a PyTorch checkpoint written by torch.save, or ONNX)", ErrFormat, f)
}

// Build makes the model of spec s: with weights (the bytes of a
// safetensors file or a PyTorch checkpoint) bound and checked, or random
// from s.Seed when weights is nil.
func Build(s *Spec, weights []byte) (*Model, error) {
	if weights == nil {
		net, err := network(s, false)
		if err != nil {
			return nil, err
		}
		Randomize(net, s.Seed)
		return &Model{Spec: s, Net: net}, nil
	}
	ts, format, err := readWeights(weights, "", nil)
	if err != nil {
		return nil, fmt.Errorf("read weights: %w", err)
	}
	m, err := buildFrom(s, ts)
	if err != nil {
		return nil, err
	}
	m.Source.Format = format
	return m, nil
}

// buildFrom binds ts to spec s, finding the prefixes s leaves unset.
func buildFrom(s *Spec, ts Tensors) (*Model, error) {
	net, err := network(s, false)
	if err != nil {
		return nil, err
	}
	bound := *s
	bound.Prefixes = resolvePrefixes(s, ts)
	dtypes, err := bind(net, &bound, ts)
	if err != nil {
		return nil, err
	}
	s.Prefixes = trimDefaults(s, *bound.Prefixes)
	return &Model{Spec: s, Net: net, Source: Source{DTypes: dtypes}}, nil
}

// Shape makes a dry network of spec s: shapes only, no weights, for
// traffic analysis of models too big to allocate.
func Shape(s *Spec) (*rnn.Network, error) { return network(s, true) }

// network makes the network of spec s, dry or with zero weights.
func network(s *Spec, dry bool) (*rnn.Network, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	return rnn.NewNetwork(cfg, dry)
}
