package models

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// addFiles adds the files that glob matches as seeds.
func addFiles(f *testing.F, glob string) {
	f.Helper()
	paths, _ := filepath.Glob(glob)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzParseTreeSpec: a tree spec parses or is refused with ErrSpec, never
// panics, and keeps to the per-input bounds whatever its YAML holds
// (aliases, nesting, an inline vocabulary); IsTreeSpec, which sniffs the
// same bytes, keeps to them too and sees every spec that parses.
//
//	go test -run '^$' -fuzz '^FuzzParseTreeSpec$' -fuzztime 10m -parallel 1 ./models
func FuzzParseTreeSpec(f *testing.F) {
	addFiles(f, "bundled/treelstm/*.yaml")
	addFiles(f, "testdata/hostile/*.yaml")
	f.Add([]byte("kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\nvocab: [a, b, c]\nunk: a\nmax_nodes: 8\n"))
	f.Add([]byte("kind: tree\ncell: binary_treelstm\nembedding_size: 3\nhidden_size: 4\nclasses: 5\nvocab: &v [x, y]\nunk: x\ngenerate: {max_nodes: 9, max_children: 2, max_depth: 3}\n"))
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		tree := IsTreeSpec(data) // the repository's sniff, on the same bytes
		s, err := ParseTreeSpec(data)
		if err == nil && !tree {
			t.Fatal("a tree spec that IsTreeSpec does not see")
		}
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v does not match ErrSpec", err)
			}
			if len(err.Error()) > 4000 {
				t.Fatalf("an error of %d bytes", len(err.Error()))
			}
			return
		}
		if s.Kind != "tree" {
			t.Fatalf("kind %q accepted", s.Kind)
		}
	})
}

// FuzzVocabWords: a vocabulary file's words are its non-empty lines with
// any trailing carriage returns dropped, as a plain split gives them.
//
//	go test -run '^$' -fuzz '^FuzzVocabWords$' -fuzztime 5m -parallel 1 ./models
func FuzzVocabWords(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\n\r\nc"))
	f.Add([]byte("\n\n\r\r\n"))
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		words, err := vocabWords(data)
		if err != nil {
			t.Fatal(err) // the fuzzer's inputs are far below tree.MaxNodesLimit lines
		}
		var want []string
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimRight(l, "\r"); l != "" {
				want = append(want, l)
			}
		}
		if !slices.Equal(words, want) {
			t.Fatalf("%q, want %q", words, want)
		}
	})
}
