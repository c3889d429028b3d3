package models

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Limits on a spec file, checked on its YAML node tree before the spec is
// decoded from it. A spec is a few hundred bytes of two or three levels;
// a tree spec's inline vocabulary is its largest part (put a larger one
// in vocab_file).
const (
	// MaxSpecDepth bounds the nesting of mappings and sequences.
	MaxSpecDepth = 64
	// MaxSpecNodes bounds the nodes of a spec with its aliases expanded:
	// YAML aliases let a few hundred bytes stand for 10^9 nodes.
	MaxSpecNodes = 1 << 18
)

// maxYAMLMessage is how much of the YAML decoder's message an error keeps:
// the decoder quotes a tag or a value whole, and a spec may be
// MaxSpecBytes.
const maxYAMLMessage = 1000

// yamlError is an ErrSpec for the YAML decoder's error err, its message
// cut to maxYAMLMessage bytes.
func yamlError(err error) error {
	return fmt.Errorf("%w: %s", ErrSpec, clipMessage(err.Error()))
}

// clipMessage cuts msg to maxYAMLMessage bytes, between characters.
func clipMessage(msg string) string {
	if len(msg) > maxYAMLMessage {
		n := maxYAMLMessage
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = fmt.Sprintf("%s... (%d bytes)", msg[:n], len(msg))
	}
	return msg
}

// clippedError is an error whose message is cut (clipError).
type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

// clipError is err with its message cut to maxYAMLMessage bytes, still
// matching what err matches: the rnn and tree packages quote a value of
// the spec (a cell's name, a vocabulary's word) whole, and one may be as
// long as the spec or the vocabulary.
func clipError(err error) error {
	if msg := err.Error(); len(msg) > maxYAMLMessage {
		return &clippedError{clipMessage(msg), err}
	}
	return err
}

// checkYAML parses the first YAML document of data into nodes, without
// decoding it, and refuses one whose mappings and sequences nest more than
// MaxSpecDepth deep or of more than MaxSpecNodes nodes once its aliases
// are expanded. It walks the tree with an explicit stack and counts each
// anchored node once.
func checkYAML(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // the decoder says "empty document"
		}
		return yamlError(err)
	}
	// nest is 1 for a mapping or a sequence: the depth of a node is the
	// number of them on the path from the document to it, itself
	// included, an alias standing where its anchored node is expanded.
	nest := func(n *yaml.Node) int64 {
		if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
			return 1
		}
		return 0
	}
	type size struct{ nodes, depth int64 } // depth: of the deepest node below, itself counted
	sizes := map[*yaml.Node]size{}         // of the nodes done
	type frame struct {
		n     *yaml.Node
		next  int   // children pushed so far
		depth int64 // of n
	}
	stack := []frame{{n: &doc}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		n := top.n
		children := n.Content
		if n.Kind == yaml.AliasNode {
			children = []*yaml.Node{n.Alias}
		}
		if top.next < len(children) {
			c := children[top.next]
			top.next++
			if _, done := sizes[c]; !done && c != nil {
				for _, f := range stack {
					if f.n == c {
						return fmt.Errorf("%w: an alias refers to a node that holds it", ErrSpec)
					}
				}
				d := top.depth + nest(c)
				if d > MaxSpecDepth {
					return fmt.Errorf("%w: mappings and sequences nested more than %d deep (MaxSpecDepth)", ErrSpec, MaxSpecDepth)
				}
				stack = append(stack, frame{n: c, depth: d})
			}
			continue
		}
		s := size{nodes: 1}
		for _, c := range children {
			if c == nil {
				continue
			}
			cs := sizes[c]
			s.nodes += cs.nodes
			s.depth = max(s.depth, cs.depth)
		}
		s.depth += nest(n)
		if s.nodes > MaxSpecNodes {
			return fmt.Errorf("%w: more than %d nodes once its aliases expand (MaxSpecNodes)", ErrSpec, MaxSpecNodes)
		}
		if top.depth-nest(n)+s.depth > MaxSpecDepth {
			return fmt.Errorf("%w: mappings and sequences nested more than %d deep once its aliases expand (MaxSpecDepth)", ErrSpec, MaxSpecDepth)
		}
		sizes[n] = s
		stack = stack[:len(stack)-1]
	}
	return nil
}
