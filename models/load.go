package models

import (
	"errors"
	"fmt"
	"io/fs"

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
// ONNX model, whatever the file's name says. Symlinks are followed; only
// regular files are read (see DirFS).
func Load(specPath string) (*Model, error) { return load(specPath, osOpener(specPath)) }

// LoadFS is Load from a file system, such as an embedded one or DirFS.
func LoadFS(fsys fs.FS, specPath string) (*Model, error) {
	return load(specPath, fsOpener(fsys, specPath))
}

// MaxWeightsBytes bounds a weights file, and the float32 weights a model
// loads to (twice its F16 or BF16 tensors, and tensors that several names
// share, once per name): 16 GiB. Both are checked before anything is
// allocated for the weights.
const MaxWeightsBytes = 1 << 34

// checkWeightsSize refuses a weights file larger than MaxWeightsBytes.
func checkWeightsSize(f *modelFile) error {
	if f.size > MaxWeightsBytes {
		return fmt.Errorf("%w: %s has %d bytes, limit %d (MaxWeightsBytes)", ErrTooLarge, f.name, f.size, int64(MaxWeightsBytes))
	}
	return nil
}

// MaxRandomParams bounds a model with seeded random weights (a spec that
// names no weights file), whose size only the spec states: 2^28
// parameters, 1 GiB of float32. A model with a weights file is bounded by
// the file: its weights are allocated only once the file's tensors have
// matched every one of them (see bind).
const MaxRandomParams = 1 << 28

// ReadSpecFile reads and parses the spec file at path (a regular file of
// at most MaxSpecBytes, symlinks followed), without loading its weights.
func ReadSpecFile(path string) (*Spec, error) {
	data, err := readSpec(osOpener(path), path)
	if err != nil {
		return nil, fmt.Errorf("read spec %s: %w", path, err)
	}
	s, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("read spec %s: %w", path, err)
	}
	return s, nil
}

// readSpec reads a spec file whole, up to MaxSpecBytes.
func readSpec(open opener, specPath string) ([]byte, error) {
	f, err := open(specPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.readAll(MaxSpecBytes, "spec")
}

// readFile reads a file that a spec names whole, up to limit bytes.
func readFile(open opener, name string, limit int64, what string) ([]byte, error) {
	f, err := open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.readAll(limit, what)
}

func load(specPath string, open opener) (*Model, error) {
	data, err := readSpec(open, specPath)
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
	wf, err := open(s.Weights)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", clip(s.Weights), clipError(err))
	}
	defer wf.Close()
	ts, format, err := readWeights(wf, open)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", clip(s.Weights), clipError(err))
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

// readWeights reads the tensors of a weights file, which stays open while
// they are in use, by its content: its format is told from its first bytes
// before anything else is read (sniff.DetectAt). open resolves ONNX
// external data files (nil: none allowed).
func readWeights(f *modelFile, open opener) (Tensors, sniff.Format, error) {
	if err := checkWeightsSize(f); err != nil {
		return nil, sniff.Unknown, err
	}
	format := sniff.DetectAt(f, f.size)
	switch format {
	case sniff.Safetensors:
		st, err := safetensors.ReadAt(f, f.size)
		return st, format, err
	case sniff.TorchZip, sniff.TorchLegacy, sniff.Zip:
		pt, err := pytorch.ReadAt(f, f.size)
		if err != nil {
			return nil, format, err
		}
		return pt, pt.Format, nil
	case sniff.ONNX:
		ts, err := readONNX(f, open)
		return ts, format, err
	}
	return nil, format, fmt.Errorf("%w: this is %v (want safetensors, a PyTorch checkpoint written by torch.save, or ONNX)", ErrFormat, format)
}

// Build makes the model of spec s: with weights (the bytes of a
// safetensors file or a PyTorch checkpoint) bound and checked, or random
// from s.Seed when weights is nil.
func Build(s *Spec, weights []byte) (*Model, error) {
	if weights == nil {
		dry, err := network(s, true)
		if err != nil {
			return nil, err
		}
		if n := dry.WeightBytes() / 4; n > MaxRandomParams {
			return nil, fmt.Errorf("%w: the spec has %d parameters and names no weights file; random weights are made for at most %d (MaxRandomParams)",
				ErrSpec, n, int64(MaxRandomParams))
		}
		net, err := network(s, false)
		if err != nil {
			return nil, err
		}
		Randomize(net, s.Seed)
		return &Model{Spec: s, Net: net}, nil
	}
	ts, format, err := readWeights(memFile("weights", weights), nil)
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
	bound := *s
	bound.Prefixes = resolvePrefixes(s, ts)
	net, dtypes, err := bind(&bound, ts)
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
