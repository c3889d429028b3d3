package tree

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
)

// ParseJSON parses one tree in the nested JSON form
//
//	{"label": 3, "children": [{"label": 2, "word": "It"}, {"word": "is"}]}
//
// Every key is optional, but a node needs a word or children (or both: the
// Child-Sum TreeLSTM reads a word at every node). Unknown keys are errors.
// Words are looked up as they are, without PTB unescaping. The parser reads
// JSON tokens with an explicit stack, so deep input cannot exhaust the Go
// stack, and stops at the first node or level over opt's limits; errors
// give the byte offset.
func ParseJSON(data []byte, opt Options) (*Tree, error) {
	if err := opt.ensureDefaults(); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errAt(ErrStructure, 0, "empty tree")
	}
	p := jsonParser{dec: json.NewDecoder(bytes.NewReader(data)), b: builder{t: &Tree{}, opt: &opt}, opt: &opt}
	p.dec.UseNumber()
	return p.parse()
}

type jsonFrame struct {
	off         int
	label, word int32
	kids        []int32
	seen        uint8 // keys seen: 1 label, 2 word, 4 children
}

type jsonParser struct {
	dec   *json.Decoder
	b     builder
	opt   *Options
	stack []jsonFrame
}

func (p *jsonParser) off() int { return int(p.dec.InputOffset()) }

func (p *jsonParser) token() (json.Token, int, error) {
	off := p.off()
	tok, err := p.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, off, errAt(ErrSyntax, off, "unexpected end of input")
		}
		return nil, off, errAt(ErrSyntax, off, "%v", err)
	}
	return tok, off, nil
}

func (p *jsonParser) parse() (*Tree, error) {
	tok, off, err := p.token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errAt(ErrSyntax, off, "a tree is a JSON object, found %v", tok)
	}
	if err := p.push(off); err != nil {
		return nil, err
	}
	// Loop invariant: inside the innermost object, expecting a key or '}'.
	for len(p.stack) > 0 {
		tok, off, err := p.token()
		if err != nil {
			return nil, err
		}
		f := &p.stack[len(p.stack)-1]
		if d, ok := tok.(json.Delim); ok && d == '}' {
			if err := p.pop(); err != nil {
				return nil, err
			}
			if err := p.afterNode(); err != nil {
				return nil, err
			}
			continue
		}
		key, _ := tok.(string)
		bit := map[string]uint8{"label": 1, "word": 2, "children": 4}[key]
		if bit == 0 {
			return nil, errAt(ErrSyntax, off, "unknown key %q (want label, word, children)", clip(key))
		}
		if f.seen&bit != 0 {
			return nil, errAt(ErrSyntax, off, "key %q twice", key)
		}
		f.seen |= bit
		val, voff, err := p.token()
		if err != nil {
			return nil, err
		}
		switch key {
		case "label":
			n, ok := val.(json.Number)
			lab, err := n.Int64()
			if !ok || err != nil || lab < 0 || lab > math.MaxInt32 {
				return nil, errAt(ErrLabel, voff, "label %v is not a non-negative integer", val)
			}
			if p.opt.Classes > 0 && lab >= int64(p.opt.Classes) {
				return nil, errAt(ErrLabel, voff, "label %d, want 0..%d", lab, p.opt.Classes-1)
			}
			f.label = int32(lab)
		case "word":
			w, ok := val.(string)
			if !ok {
				return nil, errAt(ErrSyntax, voff, "word must be a string, found %v", val)
			}
			id, known := p.opt.Vocab.ID(w)
			if !known {
				return nil, errAt(ErrUnknownWord, voff, "%q", clip(w))
			}
			f.word = id
		case "children":
			if d, ok := val.(json.Delim); !ok || d != '[' {
				return nil, errAt(ErrSyntax, voff, "children must be an array, found %v", val)
			}
			if err := p.child(); err != nil {
				return nil, err
			}
		}
	}
	if p.dec.More() {
		return nil, errAt(ErrSyntax, p.off(), "data after the tree")
	}
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errAt(ErrSyntax, p.off(), "data after the tree")
	}
	return p.b.t, nil
}

// child reads the next element of a children array: an object (pushed) or
// ']' (the array ends; the parent object continues).
func (p *jsonParser) child() error {
	tok, off, err := p.token()
	if err != nil {
		return err
	}
	switch d, _ := tok.(json.Delim); d {
	case '{':
		return p.push(off)
	case ']':
		return nil
	}
	return errAt(ErrSyntax, off, "children must hold objects, found %v", tok)
}

// afterNode continues the parent's children array after a child closed.
func (p *jsonParser) afterNode() error {
	if len(p.stack) == 0 {
		return nil
	}
	return p.child()
}

func (p *jsonParser) push(off int) error {
	if len(p.stack) >= p.opt.MaxDepth {
		return errAt(ErrLimit, off, "more than %d levels", p.opt.MaxDepth)
	}
	p.stack = append(p.stack, jsonFrame{off: off, label: -1, word: -1})
	return nil
}

func (p *jsonParser) pop() error {
	f := &p.stack[len(p.stack)-1]
	switch {
	case len(f.kids) == 0 && f.word < 0:
		return errAt(ErrStructure, f.off, "node without word or children")
	case p.opt.Arity > 0 && len(f.kids) > 0 && len(f.kids) != p.opt.Arity:
		return errAt(ErrStructure, f.off, "node with %d children, the cell takes %d", len(f.kids), p.opt.Arity)
	case p.b.t.Len() >= p.opt.MaxNodes:
		return errAt(ErrLimit, f.off, "more than %d nodes", p.opt.MaxNodes)
	}
	node := p.b.add(f.kids, f.word, f.label)
	p.stack = p.stack[:len(p.stack)-1]
	if len(p.stack) > 0 {
		parent := &p.stack[len(p.stack)-1]
		parent.kids = append(parent.kids, node)
	}
	return nil
}
