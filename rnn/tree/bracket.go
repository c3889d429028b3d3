package tree

import (
	"strconv"
	"strings"
)

// ptbEscapes are the Penn Treebank's bracket escapes, undone in words.
var ptbEscapes = map[string]string{
	"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
}

// Unescape undoes a PTB bracket escape (-LRB- is "(" and so on); other
// words are returned unchanged.
func Unescape(w string) string {
	if u, ok := ptbEscapes[w]; ok {
		return u
	}
	return w
}

// maxLabelDigits keeps a label in int32.
const maxLabelDigits = 9

// ParseBracketed parses one tree in the bracketed form of the Penn and
// Stanford Sentiment treebanks:
//
//	(3 (2 It) (4 (2 is) (3 good)))
//
// A node is "(" [label] content ")": the content is one word (the node is a
// leaf) or one or more children, each a node or a bare word (a leaf with no
// label). The first token is the label when it is a non-negative integer
// and more content follows it, so "(2 It)" is a leaf labelled 2 and "(It)"
// a leaf without a label. Words are separated by white space; PTB escapes
// (-LRB- and friends) are undone before the vocabulary lookup. A bare word
// alone is a one-leaf tree.
//
// The parser keeps an explicit stack, so deep input cannot exhaust the Go
// stack; it stops at the first node or level over opt's limits. Errors
// match ErrSyntax, ErrLimit, ErrStructure, ErrUnknownWord or ErrLabel and
// give the byte offset.
func ParseBracketed(text string, opt Options) (*Tree, error) {
	if err := opt.ensureDefaults(); err != nil {
		return nil, err
	}
	p := bracketParser{text: text, b: builder{t: &Tree{}, opt: &opt}, opt: &opt}
	return p.parse()
}

type atom struct {
	s   string
	off int
}

// frame is an open "(": its label, its resolved children, and at most one
// word whose role (label, leaf word or bare leaf) is not yet known.
type frame struct {
	off      int
	label    int32
	items    int // items seen: atoms and children
	kids     []int32
	pending  atom
	hasAtom  bool
	labelled bool
}

type bracketParser struct {
	text  string
	pos   int
	b     builder
	opt   *Options
	stack []frame
	root  int32
	done  bool
}

func (p *bracketParser) parse() (*Tree, error) {
	for {
		tok, off, ok := p.next()
		if !ok {
			break
		}
		if p.done {
			return nil, errAt(ErrSyntax, off, "data after the tree: %q", clip(tok))
		}
		var err error
		switch tok {
		case "(":
			err = p.open(off)
		case ")":
			err = p.close(off)
		default:
			err = p.word(tok, off)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(p.stack) > 0 {
		return nil, errAt(ErrSyntax, len(p.text), "unbalanced brackets: %d left open, the innermost at offset %d", len(p.stack), p.stack[len(p.stack)-1].off)
	}
	if !p.done {
		return nil, errAt(ErrStructure, len(p.text), "empty tree")
	}
	return p.b.t, nil
}

// next returns the next token: "(", ")" or a word, and its offset.
func (p *bracketParser) next() (string, int, bool) {
	t := p.text
	for p.pos < len(t) && isSpace(t[p.pos]) {
		p.pos++
	}
	if p.pos >= len(t) {
		return "", p.pos, false
	}
	start := p.pos
	if c := t[p.pos]; c == '(' || c == ')' {
		p.pos++
		return t[start:p.pos], start, true
	}
	for p.pos < len(t) && !isSpace(t[p.pos]) && t[p.pos] != '(' && t[p.pos] != ')' {
		p.pos++
	}
	return t[start:p.pos], start, true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func (p *bracketParser) open(off int) error {
	if len(p.stack) == 0 && p.b.t.Len() > 0 {
		return errAt(ErrSyntax, off, "data after the tree")
	}
	if len(p.stack) >= p.opt.MaxDepth {
		return errAt(ErrLimit, off, "more than %d levels", p.opt.MaxDepth)
	}
	if len(p.stack) > 0 {
		if err := p.settle(&p.stack[len(p.stack)-1]); err != nil {
			return err
		}
		p.stack[len(p.stack)-1].items++
	}
	p.stack = append(p.stack, frame{off: off, label: -1})
	return nil
}

// settle decides the role of a frame's pending word now that another item
// follows it: the label if it is the first item and an integer, else a
// bare leaf.
func (p *bracketParser) settle(f *frame) error {
	if !f.hasAtom {
		return nil
	}
	f.hasAtom = false
	if f.items == 1 && !f.labelled {
		if lab, ok := parseLabel(f.pending.s); ok {
			if p.opt.Classes > 0 && lab >= int32(p.opt.Classes) {
				return errAt(ErrLabel, f.pending.off, "label %d, want 0..%d", lab, p.opt.Classes-1)
			}
			f.label, f.labelled = lab, true
			return nil
		}
	}
	if len(p.stack) >= p.opt.MaxDepth { // the leaf is a level below f
		return errAt(ErrLimit, f.pending.off, "more than %d levels", p.opt.MaxDepth)
	}
	id, err := p.lookup(f.pending)
	if err != nil {
		return err
	}
	k, err := p.leaf(id, -1, f.pending.off)
	if err != nil {
		return err
	}
	f.kids = append(f.kids, k)
	return nil
}

func (p *bracketParser) word(w string, off int) error {
	if len(p.stack) == 0 {
		if p.b.t.Len() > 0 {
			return errAt(ErrSyntax, off, "data after the tree: %q", clip(w))
		}
		id, err := p.lookup(atom{w, off})
		if err != nil {
			return err
		}
		if _, err := p.leaf(id, -1, off); err != nil {
			return err
		}
		p.done = true
		return nil
	}
	f := &p.stack[len(p.stack)-1]
	if err := p.settle(f); err != nil {
		return err
	}
	f.items++
	f.pending, f.hasAtom = atom{w, off}, true
	return nil
}

func (p *bracketParser) close(off int) error {
	if len(p.stack) == 0 {
		return errAt(ErrSyntax, off, "unbalanced brackets: ')' closes nothing")
	}
	f := &p.stack[len(p.stack)-1]
	var node int32
	switch {
	case f.items == 0:
		return errAt(ErrSyntax, f.off, "empty node ()")
	case f.hasAtom && len(f.kids) == 0:
		// "(word)" or "(label word)": a leaf. (A first word followed by
		// another item was settled as the label or as a bare leaf, so a
		// pending word with no children is the only word.)
		id, err := p.lookup(f.pending)
		if err != nil {
			return err
		}
		var err2 error
		if node, err2 = p.leaf(id, f.label, f.off); err2 != nil {
			return err2
		}
	default:
		if err := p.settle(f); err != nil {
			return err
		}
		if p.opt.Arity > 0 && len(f.kids) != p.opt.Arity {
			return errAt(ErrStructure, f.off, "node with %d children, the cell takes %d", len(f.kids), p.opt.Arity)
		}
		if p.b.t.Len() >= p.opt.MaxNodes {
			return errAt(ErrLimit, f.off, "more than %d nodes", p.opt.MaxNodes)
		}
		node = p.b.add(f.kids, -1, f.label)
	}
	p.stack = p.stack[:len(p.stack)-1]
	if len(p.stack) == 0 {
		p.root, p.done = node, true
		return nil
	}
	parent := &p.stack[len(p.stack)-1]
	parent.kids = append(parent.kids, node)
	return nil
}

func (p *bracketParser) leaf(word, label int32, off int) (int32, error) {
	if p.b.t.Len() >= p.opt.MaxNodes {
		return 0, errAt(ErrLimit, off, "more than %d nodes", p.opt.MaxNodes)
	}
	return p.b.add(nil, word, label), nil
}

func (p *bracketParser) lookup(a atom) (int32, error) {
	id, ok := p.opt.Vocab.ID(Unescape(a.s))
	if !ok {
		return 0, errAt(ErrUnknownWord, a.off, "%q", clip(a.s))
	}
	return id, nil
}

func parseLabel(s string) (int32, bool) {
	if len(s) == 0 || len(s) > maxLabelDigits {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 32)
	return int32(v), err == nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Bracketed writes t in the form ParseBracketed reads, with words from v
// escaped as in the PTB. Inner nodes' words are not representable and are
// dropped; labels are written where present.
func Bracketed(t *Tree, v *Vocab) string {
	var sb strings.Builder
	last := byte(0)
	put := func(s string) {
		sb.WriteString(s)
		last = s[len(s)-1]
	}
	// Iterative pre-order over the post-order array.
	type item struct {
		node  int32
		close bool
	}
	stack := []item{{node: int32(t.Root())}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.close {
			put(")")
			continue
		}
		n := &t.Nodes[it.node]
		if last != 0 && last != '(' {
			put(" ")
		}
		put("(")
		if n.Label >= 0 {
			put(strconv.Itoa(int(n.Label)))
		}
		if len(n.Kids) == 0 {
			if last != '(' {
				put(" ")
			}
			put(escape(v.Word(n.Word)) + ")")
			continue
		}
		stack = append(stack, item{node: it.node, close: true})
		for j := len(n.Kids) - 1; j >= 0; j-- {
			stack = append(stack, item{node: n.Kids[j]})
		}
	}
	return sb.String()
}

func escape(w string) string {
	switch w {
	case "(":
		return "-LRB-"
	case ")":
		return "-RRB-"
	}
	return w
}
