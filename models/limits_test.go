package models

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"rnnserve/models/pytorch"
	"rnnserve/models/safetensors"
	"rnnserve/rnn/tree"
)

// TestSpecLimits reaches each limit of a spec that the hostile files
// (TestHostileFiles) do not: the sizes of a network, the io section and
// the spec's own size. Each refusal names the key and the limit; one step
// inside each limit is accepted.
func TestSpecLimits(t *testing.T) {
	const base = "cell: gru\ninput_size: 1\nhidden_size: 1\n"
	outputs := func(n int) string {
		s := "io:\n  input: x\n  outputs:\n"
		for i := range n {
			s += fmt.Sprintf("  - {name: o%d, value: output}\n", i)
		}
		return s
	}
	states := func(n int) string {
		return "io:\n  input: x\n  outputs:\n  - {name: h, value: h_n, states: [" + strings.TrimSuffix(strings.Repeat("0, ", n), ", ") + "]}\n"
	}
	layers := func(n int) string {
		return "input_size: 1\nlayers:\n" + strings.Repeat("- {cell: gru, hidden_size: 1}\n", n)
	}
	for _, c := range []struct {
		name, spec string
		says       string // "": accepted
	}{
		{"input_size 2^24", "cell: gru\ninput_size: 16777216\nhidden_size: 1\n", ""},
		{"input_size 2^24+1", "cell: gru\ninput_size: 16777217\nhidden_size: 1\n", "input_size = 16777217, want 1..16777216"},
		{"hidden_size 2^24+1", "cell: gru\ninput_size: 1\nhidden_size: 16777217\n", "hidden_size = 16777217, want 1..16777216"},
		{"vocab_size 2^24+1", base + "embedding: {vocab_size: 16777217}\n", "vocab_size = 16777217, want 0..16777216"},
		{"out_features 2^24+1", base + "head: {out_features: 16777217}\n", "out_features = 16777217, want 0..16777216"},
		{"num_layers 1024", base + "num_layers: 1024\n", ""},
		{"num_layers 1025", base + "num_layers: 1025\n", "num_layers = 1025, want 1..1024"},
		{"1024 modules", layers(1024), ""},
		{"1025 modules", layers(1025), "layers has 1025 entries, limit 1024"},
		{"256 io outputs", base + outputs(256), ""},
		{"257 io outputs", base + outputs(257), "outputs: 257 entries, limit 256"},
		{"4096 states", base + states(4096), ""},
		{"4097 states", base + states(4097), "states lists 4097 entries, limit 4096"},
		{"io name of 256 bytes", base + "io:\n  input: " + strings.Repeat("x", 256) + "\n  outputs: []\n", ""},
		{"io name of 257 bytes", base + "io:\n  input: " + strings.Repeat("x", 257) + "\n  outputs: []\n", "name of 257 bytes, want 1..256"},
		{"spec of MaxSpecBytes", base + "#" + strings.Repeat(" ", MaxSpecBytes-len(base)-2) + "\n", ""},
		{"spec of MaxSpecBytes+1", base + "#" + strings.Repeat(" ", MaxSpecBytes-len(base)-1) + "\n", "1048577 bytes, limit 1048576 (MaxSpecBytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseSpec([]byte(c.spec))
			if err == nil {
				_, err = Shape(s)
			}
			switch {
			case c.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.says != "" && (!errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.says)):
				t.Fatalf("error %v, want ErrSpec saying %q", err, c.says)
			}
		})
	}
}

// TestTreeSpecLimits: a tree spec's max_nodes and max_depth are accepted
// up to tree.MaxNodesLimit and refused past it.
func TestTreeSpecLimits(t *testing.T) {
	const base = "kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\nvocab: [a, b]\n"
	for _, c := range []struct{ spec, says string }{
		{base + "max_nodes: 16777216\nmax_depth: 16777216\n", ""},
		{base + "max_nodes: 16777217\n", "max_nodes 16777217 / max_depth 0, want 0..16777216"},
		{base + "max_depth: 16777217\n", "max_nodes 0 / max_depth 16777217, want 0..16777216"},
	} {
		_, err := ParseTreeSpec([]byte(c.spec))
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%q refused: %v", c.spec, err)
		case c.says != "" && (!errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%q: %v, want ErrSpec saying %q", c.spec, err, c.says)
		}
	}
}

// TestOneDocument: a spec file, sequence or tree, holds exactly one
// YAML document: an empty file and a second document are refused.
func TestOneDocument(t *testing.T) {
	const tree = "kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\nvocab: [a, b]\n"
	const seq = "cell: lstm\ninput_size: 2\nhidden_size: 2\n"
	for name, c := range map[string]struct {
		parse func([]byte) error
		spec  string
	}{
		"spec":      {func(b []byte) error { _, err := ParseSpec(b); return err }, seq},
		"tree spec": {func(b []byte) error { _, err := ParseTreeSpec(b); return err }, tree},
	} {
		if err := c.parse([]byte(c.spec)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for data, says := range map[string]string{
			"":                               "empty document",
			c.spec + "---\n" + c.spec:        "more than one YAML document",
			c.spec + "---\nhidden_size: 3\n": "more than one YAML document",
		} {
			if err := c.parse([]byte(data)); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), says) {
				t.Errorf("%s %q: %v, want ErrSpec saying %q", name, data, err, says)
			}
		}
	}
}

// TestYAMLMessageBound: the YAML decoder quotes a tag whole; a spec that
// is one tag of MaxSpecBytes is refused with a message of about
// maxYAMLMessage bytes that still says what is wrong and where, cut
// between characters.
func TestYAMLMessageBound(t *testing.T) {
	tag := "!!" + strings.Repeat("a", MaxSpecBytes-2)
	for name, parse := range map[string]func([]byte) error{
		"spec":      func(b []byte) error { _, err := ParseSpec(b); return err },
		"tree spec": func(b []byte) error { _, err := ParseTreeSpec(b); return err },
	} {
		err := parse([]byte(tag))
		if !errors.Is(err, ErrSpec) || len(err.Error()) > maxYAMLMessage+100 || !strings.Contains(err.Error(), "line 1: cannot unmarshal !!aaaa") {
			t.Errorf("%s: a refusal of %d bytes: %.300q", name, len(err.Error()), err)
		}
	}
	err := yamlError(errors.New(strings.Repeat("\u00e9", maxYAMLMessage)))
	if msg := err.Error(); !utf8.ValidString(msg) || !strings.HasSuffix(msg, "\u00e9... (2000 bytes)") {
		t.Errorf("%.100q...%q", msg, msg[len(msg)-40:])
	}
}

// TestVocabLimit: a tree model's vocabulary file of more than
// MaxVocabBytes (sparse here) is refused by its size, naming it.
func TestVocabLimit(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "vocab.txt")
	if err := os.WriteFile(vocab, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(vocab, MaxVocabBytes+1); err != nil {
		t.Skipf("a sparse file: %v", err)
	}
	writeFile(t, filepath.Join(dir, SpecFile), "kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\nvocab_file: vocab.txt\nunk: x\n")
	_, err := LoadTree(filepath.Join(dir, SpecFile))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "vocabulary vocab.txt has 268435457 bytes, limit 268435456 (MaxVocabBytes)") {
		t.Fatalf("error %v, want ErrTooLarge naming vocab.txt", err)
	}
}

// TestVocabWords: a vocabulary file is its non-empty lines, and one of
// more than tree.MaxNodesLimit words is refused having allocated little
// more than the file (2^24 + 1 words of one letter: 3 GiB and 4 s before
// the words were counted first).
func TestVocabWords(t *testing.T) {
	words, err := vocabWords([]byte("a\r\n\nbb\n\r\nc"))
	if err != nil || strings.Join(words, ",") != "a,bb,c" {
		t.Fatalf("%q, %v", words, err)
	}
	dir := t.TempDir()
	data := strings.Repeat("a\n", tree.MaxNodesLimit+1)
	writeFile(t, filepath.Join(dir, "vocab.txt"), data)
	writeFile(t, filepath.Join(dir, SpecFile), "kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\nvocab_file: vocab.txt\nunk: a\n")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = LoadTree(filepath.Join(dir, SpecFile))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "load vocabulary vocab.txt: models: file too large: more than 16777216 words (tree.MaxNodesLimit)") {
		t.Fatalf("error %v, want ErrTooLarge naming vocab.txt and tree.MaxNodesLimit", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(len(data))+16<<20 {
		t.Errorf("allocated %d MiB refusing a vocabulary of %d MiB", got>>20, len(data)>>20)
	}
}

// TestYAMLLimits: a spec's YAML is accepted with its mappings and
// sequences nested MaxSpecDepth deep and with MaxSpecNodes nodes (the
// document's own node counted), aliases expanded, and refused one past
// either.
func TestYAMLLimits(t *testing.T) {
	seqs := func(n int, inner string) string { return strings.Repeat("[", n) + inner + strings.Repeat("]", n) }
	maps := func(n int) string { return strings.Repeat("{a: ", n) + "0" + strings.Repeat("}", n) }
	// x is a mapping holding n-1 sequences; y's sequence holds an alias
	// of x's value, expanded one level deeper than it stands.
	alias := func(n int) string { return "x: &v " + seqs(n-2, "0") + "\ny: [*v]\n" }
	// the document, a sequence and n-2 scalars
	nodes := func(n int) string { return "[" + strings.Repeat("0,", n-2) + "]" }
	for _, c := range []struct {
		name, yaml, says string // says "": accepted
	}{
		{"sequences nested MaxSpecDepth deep", seqs(MaxSpecDepth, "0"), ""},
		{"empty sequences nested MaxSpecDepth deep", seqs(MaxSpecDepth, ""), ""},
		{"mappings nested MaxSpecDepth deep", maps(MaxSpecDepth), ""},
		{"an alias expanding MaxSpecDepth deep", alias(MaxSpecDepth), ""},
		{"sequences nested MaxSpecDepth+1 deep", seqs(MaxSpecDepth+1, "0"), "nested more than 64 deep (MaxSpecDepth)"},
		{"empty sequences nested MaxSpecDepth+1 deep", seqs(MaxSpecDepth+1, ""), "nested more than 64 deep (MaxSpecDepth)"},
		{"mappings nested MaxSpecDepth+1 deep", maps(MaxSpecDepth + 1), "nested more than 64 deep (MaxSpecDepth)"},
		{"an alias expanding MaxSpecDepth+1 deep", alias(MaxSpecDepth + 1), "nested more than 64 deep once its aliases expand (MaxSpecDepth)"},
		{"MaxSpecNodes nodes", nodes(MaxSpecNodes), ""},
		{"MaxSpecNodes+1 nodes", nodes(MaxSpecNodes + 1), "more than 262144 nodes once its aliases expand (MaxSpecNodes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkYAML([]byte(c.yaml))
			switch {
			case c.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.says != "" && (!errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.says)):
				t.Fatalf("error %v, want ErrSpec saying %q", err, c.says)
			}
		})
	}
	// Aliases: a sequence of 2^17 nodes listed twice is 2^18 + 5 nodes
	// (the document, the mapping, its two keys and the alias).
	twice := "a: &v [" + strings.Repeat("0,", MaxSpecNodes/2-1) + "]\nb: *v\n"
	if err := checkYAML([]byte(twice)); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "(MaxSpecNodes)") {
		t.Errorf("a sequence of 2^17 nodes listed twice: %v", err)
	}
}

// TestLimitRefusalsNameTheFile: a file refused by a limit is named in the
// refusal, with the limit, whichever loader refuses it; a spec file of
// MaxSpecBytes loads.
func TestLimitRefusalsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	const spec = "cell: gru\ninput_size: 2\nhidden_size: 3\n"
	pad := func(n int) string { return spec + "#" + strings.Repeat(" ", n-len(spec)-2) + "\n" }
	outputs := "io:\n  input: x\n  outputs:\n" + strings.Repeat("  - {name: o, value: output}\n", maxIOOutputs+1)
	var header bytes.Buffer
	binary.Write(&header, binary.LittleEndian, uint64(safetensors.MaxHeaderSize+1))
	header.WriteString("{}")
	var pt bytes.Buffer
	w := zip.NewWriter(&pt)
	f, err := w.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	if err == nil {
		_, err = f.Write([]byte("\x80\x02N." + strings.Repeat(" ", pytorch.MaxPickleBytes-3)))
	}
	if err != nil || w.Close() != nil {
		t.Fatal(err)
	}
	// A weights file of MaxWeightsBytes (sparse, of zeros) passes the size
	// check and is refused by its first bytes.
	at := filepath.Join(dir, "at.safetensors")
	if err := os.WriteFile(at, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(at, MaxWeightsBytes); err != nil {
		t.Logf("a sparse file of 16 GiB: %v", err)
	} else if _, err := Open(at); err == nil || strings.Contains(err.Error(), "MaxWeightsBytes") || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("a weights file of MaxWeightsBytes of zeros: %v, want unknown format", err)
	}
	for _, c := range []struct {
		name, file, data, says string // says "": loads
	}{
		{"spec of MaxSpecBytes", "at.yaml", pad(MaxSpecBytes), ""},
		{"spec of MaxSpecBytes+1", "over.yaml", pad(MaxSpecBytes + 1), "spec over.yaml has 1048577 bytes, limit 1048576 (MaxSpecBytes)"},
		{"spec nested MaxSpecDepth+1 deep", "deep.yaml", spec + "head: " + strings.Repeat("[", MaxSpecDepth) + strings.Repeat("]", MaxSpecDepth) + "\n", "nested more than 64 deep (MaxSpecDepth)"},
		{"maxIOOutputs+1 io outputs", "outputs.yaml", spec + outputs, "outputs: 257 entries, limit 256"},
		{"safetensors header of MaxHeaderSize+1", "header.safetensors", header.String(), "100000001 bytes, limit 100000000 (MaxHeaderSize)"},
		{"data.pkl of MaxPickleBytes+1", "pickle.pt", pt.String(), "16777217 bytes, limit 16777216 (MaxPickleBytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.file)
			if err := os.WriteFile(p, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(p, ".safetensors") { // a header as long as it says (sparse)
				if err := os.Truncate(p, 8+safetensors.MaxHeaderSize+1); err != nil {
					t.Skipf("a sparse file of 100 MB: %v", err)
				}
			}
			_, err := Open(p)
			switch {
			case c.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), p)):
				t.Fatalf("error %v, want one naming %s and saying %q", err, p, c.says)
			}
		})
	}
}

// TestAmbiguousMessageBound: a spec of 1024 modules of cell rnn leaves
// each one's nonlinearity open; the *AmbiguousError lists every one in
// Open, and its message names the first few and counts the rest (it was
// 138 KB from a spec of 33 KB).
func TestAmbiguousMessageBound(t *testing.T) {
	spec := "input_size: 1\nlayers:\n" + strings.Repeat("  - {cell: rnn, hidden_size: 1}\n", 1024)
	_, err := ParseSpec([]byte(spec))
	var amb *AmbiguousError
	if !errors.As(err, &amb) || len(amb.Open) != 1024 {
		t.Fatalf("1024 modules of cell rnn: %v, want an *AmbiguousError with 1024 entries", err)
	}
	if msg := err.Error(); len(msg) > 4000 || !strings.Contains(msg, "layers[0].cell") || !strings.Contains(msg, "and 1016 more") {
		t.Errorf("a message of %d bytes: %.300s", len(msg), msg)
	}
}

// TestSpecValueMessageBound: a refusal that quotes a value of the spec
// (a cell, an activation, a head input, a kind, an executor) or of its
// vocabulary (a word twice) quotes at most maxYAMLMessage bytes of it, as
// a refusal of the YAML decoder's does (TestYAMLMessageBound): a value
// may be as long as the spec (MaxSpecBytes) or the vocabulary.
func TestSpecValueMessageBound(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	const gru = "cell: gru\ninput_size: 1\nhidden_size: 1\n"
	const tree = "embedding_size: 2\nhidden_size: 2\nclasses: 2\n"
	for name, spec := range map[string]string{
		"cell":            "cell: " + long + "\ninput_size: 1\nhidden_size: 1\n",
		"layers[0].cell":  "input_size: 1\nlayers:\n- {cell: " + long + ", hidden_size: 1}\n",
		"head.activation": gru + "head: {out_features: 1, activation: " + long + "}\n",
		"head.input":      gru + "head: {out_features: 1, input: " + long + "}\n",
	} {
		if _, err := ParseSpec([]byte(spec)); !errors.Is(err, ErrSpec) || len(err.Error()) > maxYAMLMessage+200 {
			t.Errorf("%s of %d bytes: a refusal of %d bytes: %.200v", name, len(long), len(fmt.Sprint(err)), err)
		}
	}
	for name, spec := range map[string]string{
		"kind":                  "kind: " + long + "\ncell: childsum_treelstm\n" + tree + "vocab: [a, b]\n",
		"cell":                  "kind: tree\ncell: " + long + "\n" + tree + "vocab: [a, b]\n",
		"cell, vocabulary file": "kind: tree\ncell: " + long + "\n" + tree + "vocab_file: v.txt\n",
		"executor":              "kind: tree\ncell: childsum_treelstm\nexecutor: " + long + "\n" + tree + "vocab: [a, b]\n",
		"word twice":            "kind: tree\ncell: childsum_treelstm\n" + tree + "vocab: [a, " + long + ", " + long + "]\n",
	} {
		s, err := ParseTreeSpec([]byte(spec))
		if err == nil {
			_, err = BuildTree(s, s.Vocab, nil)
		}
		if !errors.Is(err, ErrSpec) || len(err.Error()) > maxYAMLMessage+200 {
			t.Errorf("tree %s of %d bytes: a refusal of %d bytes: %.200v", name, len(long), len(fmt.Sprint(err)), err)
		}
	}
}

// TestSpecPathMessageBound: a spec's weights or vocab_file of 100 KB (no
// such file: the name is too long for one) is named clipped in the
// refusal, and so is the error opening it, which names it again.
func TestSpecPathMessageBound(t *testing.T) {
	long := strings.Repeat("w", 100_000)
	dir := t.TempDir()
	const tree = "kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\n"
	for name, c := range map[string]struct {
		spec string
		load func(string) error
	}{
		"weights":         {"cell: gru\ninput_size: 1\nhidden_size: 1\nweights: " + long + "\n", func(p string) error { _, err := Load(p); return err }},
		"tree weights":    {tree + "vocab: [a, b]\nweights: " + long + "\n", func(p string) error { _, err := LoadTree(p); return err }},
		"tree vocab_file": {tree + "vocab_file: " + long + "\n", func(p string) error { _, err := LoadTree(p); return err }},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		writeFile(t, p, c.spec)
		if err := c.load(p); err == nil || len(err.Error()) > 2*maxYAMLMessage {
			t.Errorf("%s of %d bytes: a refusal of %d bytes: %.300v", name, len(long), len(fmt.Sprint(err)), err)
		}
	}
}
