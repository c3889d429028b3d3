package models

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"rnnserve/models/safetensors"
	"rnnserve/rnn/tree"
)

// TreeSpec is the spec file of a tree model (kind: tree):
//
//	kind: tree
//	cell: binary_treelstm   # tree_rnn | rntn | binary_treelstm | childsum_treelstm | topdown_treelstm
//	embedding_size: 32
//	hidden_size: 64
//	classes: 10             # the vocabulary size for topdown_treelstm
//	vocab: ["0", "1", "+"]  # or vocab_file: vocab.txt (one word a line)
//	unk: "<unk>"            # optional: unknown words map to it; else they are errors
//	executor: depth_batched # optional serving default: recursive | depth_batched
//	max_nodes: 4096         # optional per-tree limits
//	max_depth: 256
//	generate: {max_nodes: 64, max_children: 4, max_depth: 8}   # topdown_treelstm
//	weights: model.safetensors   # empty: random weights from seed
//	seed: 1
//
// Tensor names are the state_dict names of the module in
// scripts/torch_tree.py: embedding.weight, cell.W.weight, cell.W.bias,
// cell.U.weight, cell.U.bias, cell.U_iou.weight, cell.U_f.weight, cell.V,
// cell.lstm.{weight_ih,weight_hh,bias_ih,bias_hh}, cell.grow.{weight,bias},
// classifier.weight, classifier.bias (those of the spec's cell).
type TreeSpec struct {
	Kind       string       `yaml:"kind"`
	Cell       string       `yaml:"cell"`
	EmbedSize  int          `yaml:"embedding_size"`
	HiddenSize int          `yaml:"hidden_size"`
	Classes    int          `yaml:"classes"`
	Vocab      []string     `yaml:"vocab"`
	VocabFile  string       `yaml:"vocab_file"`
	UNK        string       `yaml:"unk"`
	Executor   string       `yaml:"executor"`
	MaxNodes   int          `yaml:"max_nodes"`
	MaxDepth   int          `yaml:"max_depth"`
	Generate   *GenerateCap `yaml:"generate"`
	Weights    string       `yaml:"weights"`
	Seed       uint64       `yaml:"seed"`
}

// GenerateCap bounds a top-down generator's trees.
type GenerateCap struct {
	MaxNodes    int `yaml:"max_nodes"`
	MaxChildren int `yaml:"max_children"`
	MaxDepth    int `yaml:"max_depth"`
}

// TreeModel is a loaded tree model: its spec, vocabulary and weights.
type TreeModel struct {
	Spec  *TreeSpec
	Vocab *tree.Vocab
	Net   *tree.Model
}

// ParseOptions returns the tree-parser options of the model: its
// vocabulary, arity, classes and the spec's limits.
func (m *TreeModel) ParseOptions() tree.Options {
	o := m.Net.Options(m.Vocab)
	o.MaxNodes, o.MaxDepth = m.Spec.MaxNodes, m.Spec.MaxDepth
	return o
}

// IsTreeSpec reports whether a spec file's bytes declare kind: tree.
func IsTreeSpec(data []byte) bool {
	var k struct {
		Kind string `yaml:"kind"`
	}
	return yaml.Unmarshal(data, &k) == nil && k.Kind == "tree"
}

// ParseTreeSpec decodes a tree spec (YAML or JSON), rejecting unknown keys.
func ParseTreeSpec(data []byte) (*TreeSpec, error) {
	s, err := decodeSpec[TreeSpec](data)
	if err != nil {
		return nil, err
	}
	if s.Kind != "tree" {
		return nil, fmt.Errorf("%w: kind %.64q, want tree", ErrSpec, s.Kind)
	}
	if s.Vocab != nil && s.VocabFile != "" {
		return nil, fmt.Errorf("%w: give vocab or vocab_file, not both", ErrSpec)
	}
	if s.Vocab == nil && s.VocabFile == "" {
		return nil, fmt.Errorf("%w: no vocab or vocab_file", ErrSpec)
	}
	if s.Vocab != nil {
		if _, err := s.Config(len(s.Vocab)); err != nil {
			return nil, err
		}
	} else if _, err := tree.ParseCell(s.Cell); err != nil {
		return nil, fmt.Errorf("%w: cell: %w", ErrSpec, clipError(err))
	}
	if s.MaxNodes < 0 || s.MaxNodes > tree.MaxNodesLimit || s.MaxDepth < 0 || s.MaxDepth > tree.MaxNodesLimit {
		return nil, fmt.Errorf("%w: max_nodes %d / max_depth %d, want 0..%d", ErrSpec, s.MaxNodes, s.MaxDepth, tree.MaxNodesLimit)
	}
	switch s.Executor {
	case "", "recursive", "depth_batched":
	default:
		return nil, fmt.Errorf("%w: executor %.64q, want recursive or depth_batched", ErrSpec, s.Executor)
	}
	return s, nil
}

// Config converts the spec to the model shape for a vocabulary of n words.
func (s *TreeSpec) Config(n int) (tree.Config, error) {
	cell, err := tree.ParseCell(s.Cell)
	if err != nil {
		return tree.Config{}, fmt.Errorf("%w: cell: %w", ErrSpec, clipError(err))
	}
	c := tree.Config{Cell: cell, Vocab: n, Embed: s.EmbedSize, Hidden: s.HiddenSize, Classes: s.Classes}
	if cell == tree.TopDownLSTM && c.Classes == 0 {
		c.Classes = n
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	return c, nil
}

// MaxVocabBytes bounds a tree model's vocabulary file: a word a line, at
// most tree.MaxNodesLimit (2^24) words of 16 bytes on average.
const MaxVocabBytes = 256 << 20

// LoadTree reads a tree spec file, its vocabulary and its weights (or
// seeded random weights when it names none), relative to the spec.
func LoadTree(specPath string) (*TreeModel, error) { return loadTree(specPath, osOpener(specPath)) }

// LoadTreeFS is LoadTree from a file system, such as an embedded one.
func LoadTreeFS(fsys fs.FS, specPath string) (*TreeModel, error) {
	return loadTree(specPath, fsOpener(fsys, specPath))
}

func loadTree(specPath string, open opener) (*TreeModel, error) {
	data, err := readSpec(open, specPath)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", specPath, err)
	}
	s, err := ParseTreeSpec(data)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", specPath, err)
	}
	words := s.Vocab
	if s.VocabFile != "" {
		vb, err := readFile(open, s.VocabFile, MaxVocabBytes, "vocabulary")
		if err != nil {
			return nil, fmt.Errorf("load vocabulary %s: %w", clip(s.VocabFile), clipError(err))
		}
		if words, err = vocabWords(vb); err != nil {
			return nil, fmt.Errorf("load vocabulary %s: %w", clip(s.VocabFile), clipError(err))
		}
	}
	var weights *modelFile
	if s.Weights != "" {
		if weights, err = open(s.Weights); err != nil {
			return nil, fmt.Errorf("load weights %s: %w", clip(s.Weights), clipError(err))
		}
		defer weights.Close()
		if err := checkWeightsSize(weights); err != nil {
			return nil, fmt.Errorf("load weights %s: %w", clip(s.Weights), clipError(err))
		}
	}
	m, err := buildTree(s, words, weights)
	if err != nil {
		return nil, fmt.Errorf("load tree model %s: %w", specPath, err)
	}
	return m, nil
}

// vocabWords is the non-empty lines of a vocabulary file (a trailing \r
// dropped). It counts them before it allocates anything and refuses more
// than tree.MaxNodesLimit, and the words are substrings of one copy of
// the file: a file of MaxVocabBytes of short lines would otherwise cost
// gigabytes in slice headers and small strings before any check.
func vocabWords(b []byte) ([]string, error) {
	n := 0
	for rest := b; len(rest) > 0; {
		line, tail, _ := bytes.Cut(rest, []byte("\n"))
		if len(bytes.TrimRight(line, "\r")) > 0 {
			if n++; n > tree.MaxNodesLimit {
				return nil, fmt.Errorf("%w: more than %d words (tree.MaxNodesLimit)", ErrTooLarge, tree.MaxNodesLimit)
			}
		}
		rest = tail
	}
	text := string(b)
	out := make([]string, 0, n)
	for rest := text; len(rest) > 0; {
		line, tail, _ := strings.Cut(rest, "\n")
		if line = strings.TrimRight(line, "\r"); len(line) > 0 {
			out = append(out, line)
		}
		rest = tail
	}
	return out, nil
}

// BuildTree makes the tree model of spec s with vocabulary words: with
// weights (a safetensors file's bytes) bound and checked, or random from
// s.Seed when weights is nil.
func BuildTree(s *TreeSpec, words []string, weights []byte) (*TreeModel, error) {
	var f *modelFile
	if weights != nil {
		f = memFile("weights", weights)
	}
	return buildTree(s, words, f)
}

// buildTree is BuildTree from a weights file (nil: random weights), read
// straight into the model.
func buildTree(s *TreeSpec, words []string, weights *modelFile) (*TreeModel, error) {
	v, err := tree.NewVocab(words, s.UNK)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, clipError(err))
	}
	cfg, err := s.Config(v.Len())
	if err != nil {
		return nil, err
	}
	// The weights are allocated only when something bounds them: the
	// file, whose F32 tensors must hold every one, or MaxRandomParams.
	dry, err := tree.NewModel(cfg, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	params := dry.WeightBytes() / 4
	switch {
	case weights == nil && params > MaxRandomParams:
		return nil, fmt.Errorf("%w: the spec has %d parameters and names no weights file; random weights are made for at most %d (MaxRandomParams)",
			ErrSpec, params, int64(MaxRandomParams))
	case weights != nil && 4*params > weights.size:
		return nil, fmt.Errorf("%w: the spec has %d parameters, more than the weights file of %d bytes holds as F32",
			ErrWeights, params, weights.size)
	}
	net, err := tree.NewModel(cfg, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	if weights == nil {
		RandomizeTree(net, s.Seed)
	} else if err := bindTreeWeights(net, weights); err != nil {
		return nil, err
	}
	return &TreeModel{Spec: s, Vocab: v, Net: net}, nil
}

// bindTreeWeights reads a safetensors file into net, checking every
// tensor's name, dtype, shape and values, each read straight into its
// weights; the top-down cell's bias_ih and bias_hh are summed into net.B.
func bindTreeWeights(net *tree.Model, wf *modelFile) error {
	f, err := safetensors.ReadAt(wf, wf.size)
	if err != nil {
		return fmt.Errorf("read weights: %w", err)
	}
	want := net.Tensors()
	var problems problemList
	// read checks tensor name against shape and reads it into dst.
	read := func(name string, shape []int, dst []float32) bool {
		t, ok := f.Tensor(name)
		switch {
		case !ok:
			problems.add("tensor %q is missing (shape %v)", name, shape)
			return false
		case t.DType != safetensors.F32:
			problems.add("tensor %q has dtype %s, want F32", name, clip(string(t.DType)))
			return false
		case !slices.Equal(t.Shape, shape):
			problems.add("tensor %q has shape %s, want %v", name, safetensors.ShapeString(t.Shape), shape)
			return false
		}
		if err := t.Float32sInto(dst); err != nil {
			problems.add("tensor %q: %v", name, err)
			return false
		}
		if i := firstNonFinite(dst); i >= 0 {
			problems.add("tensor %q has non-finite value %v at flat index %d", name, dst[i], i)
			return false
		}
		return true
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	expected := map[string]bool{}
	for _, name := range names {
		t := want[name]
		read(name, t.Shape, *t.Data)
		expected[name] = true
	}
	if net.Cell == tree.TopDownLSTM {
		H := net.Hidden
		bi, bh := make([]float32, 4*H), make([]float32, 4*H)
		if read("cell.lstm.bias_ih", []int{4 * H}, bi) && read("cell.lstm.bias_hh", []int{4 * H}, bh) {
			for j := range net.B {
				net.B[j] = bi[j] + bh[j]
			}
			// Two finite halves may sum past float32's range.
			if i := firstNonFinite(net.B); i >= 0 {
				problems.add("tensors \"cell.lstm.bias_ih\" and \"cell.lstm.bias_hh\" sum to non-finite value %v at flat index %d", net.B[i], i)
			}
		}
		expected["cell.lstm.bias_ih"], expected["cell.lstm.bias_hh"] = true, true
	}
	for _, name := range f.Names() {
		if !expected[name] {
			problems.add("unexpected tensor %q", clip(name))
		}
	}
	return problems.err()
}

// RandomizeTree fills a tree model's weights deterministically from seed:
// uniform in ±1/sqrt(fan-in) (PyTorch's Linear default), the embedding
// standard normal.
func RandomizeTree(m *tree.Model, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x7ee5eed))
	names := make([]string, 0)
	ts := m.Tensors()
	for name := range ts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := ts[name]
		v := *t.Data
		if name == "embedding.weight" {
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			continue
		}
		fan := t.Shape[len(t.Shape)-1]
		if len(t.Shape) == 1 {
			fan = m.Hidden
		}
		k := 1 / math.Sqrt(float64(fan))
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * k)
		}
	}
	k := 1 / math.Sqrt(float64(m.Hidden))
	for i := range m.B {
		if m.Cell == tree.TopDownLSTM {
			m.B[i] = float32((2*r.Float64() - 1) * k)
		}
	}
}
