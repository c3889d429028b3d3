package models

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// SpecFile is the name of a model folder's spec.
const SpecFile = "model.yaml"

// weightExts are the file name endings Open takes for a weights file in a
// folder without a spec.
var weightExts = []string{".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".onnx"}

// ErrNoModel is returned by Open for a folder that holds neither a spec
// nor exactly one weights file.
var ErrNoModel = errors.New("models: no model in the folder")

// Open loads the model at name, which is one of
//
//   - a model folder: its model.yaml if it has one (see Load), else its
//     one weights file, as below;
//   - a spec file (ending .yaml, .yml or .json), as Load;
//   - a weights file: a safetensors file or a PyTorch checkpoint (any
//     tensor names; the spec is inferred from them, see Infer), or an
//     ONNX model (whose graph gives the spec).
//
// The returned model's Spec is the spec read or inferred, and
// Source.Inferred says which; FormatSpec renders it as YAML for the user
// to save beside the weights as model.yaml and edit (the head's
// activation, which no weights file records, is the usual edit). ONNX
// external data files are read only from inside the ONNX file's folder.
func Open(name string) (*Model, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	dir, file := filepath.Dir(name), filepath.Base(name)
	if fi.IsDir() {
		dir, file = name, "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	defer root.Close()
	m, err := OpenFS(root.FS(), file)
	if err != nil {
		return nil, err
	}
	if m.Source.Weights != "" && !filepath.IsAbs(m.Source.Weights) {
		m.Source.Weights = filepath.Join(dir, filepath.FromSlash(m.Source.Weights))
	}
	return m, nil
}

// OpenFS is Open on a file system: name is a folder ("." for the root),
// a spec file or a weights file in fsys. Every file it reads, ONNX
// external data included, is read through fsys.
func OpenFS(fsys fs.FS, name string) (*Model, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	if fi.IsDir() {
		if _, err := fs.Stat(fsys, path.Join(name, SpecFile)); err == nil {
			return LoadFS(fsys, path.Join(name, SpecFile))
		}
		entries, err := fs.ReadDir(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("open model %s: %w", name, err)
		}
		var found []string
		for _, e := range entries {
			if !e.IsDir() && slices.Contains(weightExts, strings.ToLower(path.Ext(e.Name()))) {
				found = append(found, e.Name())
			}
		}
		if len(found) != 1 {
			return nil, fmt.Errorf("%w: %s holds no %s and %d weights files %q (want one, ending %s)",
				ErrNoModel, name, SpecFile, len(found), found, strings.Join(weightExts, ", "))
		}
		name = path.Join(name, found[0])
	}
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return LoadFS(fsys, name)
	}
	read := fsReader(fsys, name)
	data, err := read(name, MaxWeightsBytes)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	ts, format, err := readWeights(data, name, read)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	var s *Spec
	if o, ok := ts.(*onnxModel); ok {
		s = o.spec
	} else if s, err = Infer(ts); err != nil {
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	s.Weights = path.Base(name)
	m, err := buildFrom(s, ts)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	m.Source.Weights, m.Source.Format, m.Source.Inferred = name, format, true
	return m, nil
}

// FormatSpec renders s as a spec file (YAML, keys in the order of Spec,
// defaults left out) that ParseSpec reads back to the same spec, under a
// comment saying where it came from when m's spec was inferred.
func FormatSpec(m *Model) ([]byte, error) {
	var buf bytes.Buffer
	if m.Source.Inferred {
		fmt.Fprintf(&buf, "# Inferred by rnnserve from %s (%s).\n", path.Base(filepath.ToSlash(m.Source.Weights)), m.Source.Format.Name())
		if m.Spec.Head != nil && m.Spec.Head.Activation == "" {
			buf.WriteString("# No weights file records the head's activation: set head.activation\n# to softmax or log_softmax if the model applies one after its head.\n")
		}
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(m.Spec); err != nil {
		return nil, fmt.Errorf("models: format spec: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("models: format spec: %w", err)
	}
	return buf.Bytes(), nil
}
