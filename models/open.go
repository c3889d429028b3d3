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

	"go.yaml.in/yaml/v3"

	"rnnserve/models/sniff"
	"rnnserve/rnn"
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
// Symlinks are followed, name's own included: a Hugging Face cache's
// snapshots/<rev>/model.safetensors, a link into ../../blobs, opens as
// the file it links to. Only regular files are read (see DirFS).
func Open(name string) (*Model, error) { return OpenWith(name, OpenOptions{}) }

// OpenWith is Open with options for a weights file whose spec is
// inferred (see OpenFSWith).
func OpenWith(name string, opt OpenOptions) (*Model, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	dir, file := filepath.Dir(name), filepath.Base(name)
	if fi.IsDir() {
		dir, file = name, "."
	}
	m, err := OpenFSWith(DirFS(dir), file, opt)
	if err != nil {
		return nil, fmt.Errorf("open model %s: %w", name, err)
	}
	if m.Source.Weights != "" && !filepath.IsAbs(m.Source.Weights) {
		m.Source.Weights = filepath.Join(dir, filepath.FromSlash(m.Source.Weights))
	}
	return m, nil
}

// OpenFS is Open on a file system: name is a folder ("." for the root),
// a spec file or a weights file in fsys. Every file it reads, ONNX
// external data included, is read through fsys.
func OpenFS(fsys fs.FS, name string) (*Model, error) { return OpenFSWith(fsys, name, OpenOptions{}) }

// OpenOptions state what a weights file cannot, for a model whose spec is
// inferred from one. A model read from a spec file takes none: its spec
// states them.
type OpenOptions struct {
	// HeadInput is where the head reads (see Head.Input): every_step,
	// last_step or h_n. Empty leaves it to the file: ONNX graphs show
	// it; a state_dict cannot, which is fine over a unidirectional RNN
	// and an *AmbiguousError over a bidirectional one.
	HeadInput string
	// Nonlinearity is that of the file's nn.RNN modules: tanh (nn.RNN's
	// default) or relu. Empty leaves it to the file: ONNX graphs show it;
	// a state_dict cannot, and its nn.RNN modules are an
	// *AmbiguousError until it is stated.
	Nonlinearity string
}

// apply sets the options on spec s, inferred from the weights file name.
func (o OpenOptions) apply(s *Spec, name string) error {
	if err := o.applyNonlinearity(s, name); err != nil {
		return err
	}
	if o.HeadInput == "" {
		return nil
	}
	if _, err := rnn.ParseHeadInput(o.HeadInput); err != nil {
		return fmt.Errorf("%w: head input: %w", ErrSpec, err)
	}
	switch {
	case s.Head == nil:
		return fmt.Errorf("%w: head input %s given, but %s has no head", ErrSpec, o.HeadInput, name)
	case s.Head.Input != "" && s.Head.Input != o.HeadInput:
		return fmt.Errorf("%w: head input %s given, but the graph of %s reads %s", ErrSpec, o.HeadInput, name, s.Head.Input)
	}
	s.Head.Input = o.HeadInput
	return nil
}

// applyNonlinearity makes the spec's nn.RNN cells rnn_tanh or rnn_relu.
func (o OpenOptions) applyNonlinearity(s *Spec, name string) error {
	if o.Nonlinearity == "" {
		return nil
	}
	if o.Nonlinearity != "tanh" && o.Nonlinearity != "relu" {
		return fmt.Errorf("%w: nonlinearity %q, want tanh or relu", ErrSpec, o.Nonlinearity)
	}
	want := "rnn_" + o.Nonlinearity
	found := false
	set := func(cell *string) error {
		switch *cell {
		case "rnn":
			*cell, found = want, true
		case "rnn_tanh", "rnn_relu":
			if *cell != want {
				return fmt.Errorf("%w: nonlinearity %s given, but the graph of %s says %s", ErrSpec, o.Nonlinearity, name, *cell)
			}
			found = true
		}
		return nil
	}
	if err := set(&s.Cell); err != nil {
		return err
	}
	for i := range s.Layers {
		if err := set(&s.Layers[i].Cell); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("%w: nonlinearity %s given, but %s has no nn.RNN module", ErrSpec, o.Nonlinearity, name)
	}
	return nil
}

// OpenFSWith is OpenFS with options for a weights file whose spec is
// inferred.
func OpenFSWith(fsys fs.FS, name string, opt OpenOptions) (*Model, error) {
	m, err := openFS(fsys, name, opt)
	if err == nil && !m.Source.Inferred && opt != (OpenOptions{}) {
		return nil, fmt.Errorf("%w: %s is a spec: it states the head input (head.input) and the nn.RNN nonlinearity (cell) itself; the options are for a weights file alone", ErrSpec, name)
	}
	return m, err
}

func openFS(fsys fs.FS, name string, opt OpenOptions) (*Model, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	if fi.IsDir() {
		if _, err := fs.Stat(fsys, path.Join(name, SpecFile)); err == nil {
			return LoadFS(fsys, path.Join(name, SpecFile))
		}
		found, err := weightFiles(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("open model %s: %w", name, err)
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
	open := fsOpener(fsys, name)
	wf, err := open(name)
	if err != nil {
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	defer wf.Close()
	ts, format, err := readWeights(wf, open)
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
	if err := opt.apply(s, name); err != nil {
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	src := Source{Weights: name, Format: format, Inferred: true}
	m, err := buildFrom(s, ts)
	if err != nil {
		var amb *AmbiguousError
		if errors.As(err, &amb) {
			amb.Source = src
		}
		return nil, fmt.Errorf("load weights %s: %w", name, err)
	}
	m.Source.Weights, m.Source.Format, m.Source.Inferred = src.Weights, src.Format, true
	return m, nil
}

// writeComment writes text as YAML comment lines of at most about 76
// characters, broken between words.
func writeComment(buf *bytes.Buffer, text string) {
	line := "#"
	for _, w := range strings.Fields(text) {
		if len(line) > 1 && len(line)+1+len(w) > 76 {
			buf.WriteString(line + "\n")
			line = "#"
		}
		line += " " + w
	}
	buf.WriteString(line + "\n")
}

// weightFiles lists the files of folder dir whose names end like a
// weights file's.
func weightFiles(fsys fs.FS, dir string) ([]string, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(weightExts, strings.ToLower(path.Ext(e.Name()))) {
			found = append(found, e.Name())
		}
	}
	return found, nil
}

// IsModelFolder reports whether OpenFS would take folder dir of fsys as a
// model without reading it: it holds a spec file, or exactly one weights
// file.
func IsModelFolder(fsys fs.FS, dir string) bool {
	if _, err := fs.Stat(fsys, path.Join(dir, SpecFile)); err == nil {
		return true
	}
	found, err := weightFiles(fsys, dir)
	return err == nil && len(found) == 1
}

// FormatSpec renders s as a spec file (YAML, keys in the order of Spec,
// defaults left out) that ParseSpec reads back to the same spec, under a
// comment saying where it came from when m's spec was inferred.
func FormatSpec(m *Model) ([]byte, error) {
	var buf bytes.Buffer
	if m.Source.Inferred {
		fmt.Fprintf(&buf, "# Inferred by rnnserve from %s (%s).\n", path.Base(filepath.ToSlash(m.Source.Weights)), m.Source.Format.Name())
		// An ONNX graph holds the activation, if the model has one.
		if m.Spec.Head != nil && m.Spec.Head.Activation == "" && m.Source.Format != sniff.ONNX {
			buf.WriteString("# No weights file records the head's activation: set head.activation\n# to softmax or log_softmax if the model applies one after its head.\n")
		}
	}
	for _, o := range m.Spec.unstated() {
		writeComment(&buf, "Not servable until stated: "+o)
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
