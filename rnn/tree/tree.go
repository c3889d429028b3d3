package tree

import (
	"errors"
	"fmt"
)

// Node is one node of a Tree.
type Node struct {
	Kids   []int32 // children, left to right; each index is smaller than this node's
	Parent int32   // -1 at the root
	Word   int32   // vocabulary id, -1 for none (inner nodes of constituency trees)
	Label  int32   // gold class, -1 for none
}

// Tree is a rooted, ordered tree whose nodes are numbered in post-order:
// each child comes before its parent and a node's subtree is a contiguous
// range ending at the node, so the root is the last node. Every parser of
// this package produces this order.
type Tree struct {
	Nodes []Node
}

// Len is the number of nodes.
func (t *Tree) Len() int { return len(t.Nodes) }

// Root is the index of the root: the last node.
func (t *Tree) Root() int { return len(t.Nodes) - 1 }

// Leaves counts the nodes without children.
func (t *Tree) Leaves() int {
	n := 0
	for i := range t.Nodes {
		if len(t.Nodes[i].Kids) == 0 {
			n++
		}
	}
	return n
}

// Heights returns each node's height: 0 for a leaf, else one more than its
// tallest child. Nodes of equal height across trees are what the
// depth-batched executor runs together.
func (t *Tree) Heights() []int32 {
	h := make([]int32, len(t.Nodes))
	for i := range t.Nodes {
		for _, k := range t.Nodes[i].Kids {
			h[i] = max(h[i], h[k]+1)
		}
	}
	return h
}

// Height is the root's height (0 for a single leaf).
func (t *Tree) Height() int {
	if len(t.Nodes) == 0 {
		return 0
	}
	return int(t.Heights()[t.Root()])
}

// Depths returns each node's depth: 0 at the root.
func (t *Tree) Depths() []int32 {
	d := make([]int32, len(t.Nodes))
	for i := len(t.Nodes) - 1; i >= 0; i-- {
		if p := t.Nodes[i].Parent; p >= 0 {
			d[i] = d[p] + 1
		}
	}
	return d
}

// Errors of this package; every error it returns matches one of them with
// errors.Is.
var (
	// ErrSyntax: the text is not a tree of the expected form.
	ErrSyntax = errors.New("tree: syntax error")
	// ErrLimit: the tree has more nodes or levels than allowed.
	ErrLimit = errors.New("tree: over limit")
	// ErrStructure: a well-formed input describes no valid tree for the
	// model: empty, several roots, a cycle, a node of the wrong arity, a
	// leaf without a word.
	ErrStructure = errors.New("tree: invalid structure")
	// ErrUnknownWord: a word is not in the vocabulary, which has no UNK.
	ErrUnknownWord = errors.New("tree: unknown word")
	// ErrLabel: a label is not a class of the model.
	ErrLabel = errors.New("tree: invalid label")
)

// Error locates a problem in an input: Where is "offset N" (a byte offset
// in text forms) or "node N" (the parent-pointer form, 1-based as written).
type Error struct {
	Err   error // one of the sentinels above
	Where string
	Msg   string
}

func (e *Error) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("%v: %s", e.Err, e.Msg)
	}
	return fmt.Sprintf("%v at %s: %s", e.Err, e.Where, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

func errAt(kind error, off int, format string, a ...any) error {
	return &Error{Err: kind, Where: fmt.Sprintf("offset %d", off), Msg: fmt.Sprintf(format, a...)}
}

func errNode(kind error, node int, format string, a ...any) error {
	return &Error{Err: kind, Where: fmt.Sprintf("node %d", node), Msg: fmt.Sprintf(format, a...)}
}

// Defaults of Options.
const (
	DefaultMaxNodes = 4096
	DefaultMaxDepth = 256
	// MaxNodesLimit bounds Options.MaxNodes so node indices fit in int32.
	MaxNodesLimit = 1 << 24
)

// Options configure the parsers. Zero values mean the defaults.
type Options struct {
	// Vocab maps words to ids. Required.
	Vocab *Vocab
	// MaxNodes bounds the nodes of one tree (default DefaultMaxNodes).
	MaxNodes int
	// MaxDepth bounds the levels of one tree: a single leaf has one
	// (default DefaultMaxDepth).
	MaxDepth int
	// Arity, when positive, requires every inner node to have exactly that
	// many children (2 for the binary cells).
	Arity int
	// Classes, when positive, requires every label to be below it.
	Classes int
}

func (o *Options) ensureDefaults() error {
	if o.Vocab == nil {
		return errors.New("tree: Options.Vocab is nil")
	}
	if o.MaxNodes == 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxNodes < 1 || o.MaxNodes > MaxNodesLimit || o.MaxDepth < 1 || o.Arity < 0 || o.Classes < 0 {
		return fmt.Errorf("tree: invalid options: MaxNodes %d (1..%d), MaxDepth %d, Arity %d, Classes %d",
			o.MaxNodes, MaxNodesLimit, o.MaxDepth, o.Arity, o.Classes)
	}
	return nil
}

// Check verifies t against opt's limits and rules and the post-order
// invariants (for trees built by hand; parsed trees already hold them).
// Errors name the node by its index.
func (t *Tree) Check(opt Options) error {
	if err := opt.ensureDefaults(); err != nil {
		return err
	}
	n := len(t.Nodes)
	if n == 0 {
		return &Error{Err: ErrStructure, Msg: "empty tree"}
	}
	if n > opt.MaxNodes {
		return &Error{Err: ErrLimit, Msg: fmt.Sprintf("%d nodes, limit %d", n, opt.MaxNodes)}
	}
	if t.Nodes[n-1].Parent != -1 {
		return errNode(ErrStructure, n-1, "the last node is not the root")
	}
	// Each node's subtree is a contiguous range [start, i]; walking kids
	// from the last, each must end right before the previous one's start.
	start := make([]int32, n)
	for i := range t.Nodes {
		nd := &t.Nodes[i]
		if i < n-1 && (nd.Parent <= int32(i) || nd.Parent >= int32(n)) {
			return errNode(ErrStructure, i, "parent %d is not after the node", nd.Parent)
		}
		if nd.Word >= int32(opt.Vocab.Len()) || nd.Word < -1 {
			return errNode(ErrStructure, i, "word id %d outside the vocabulary of %d", nd.Word, opt.Vocab.Len())
		}
		if nd.Label < -1 || opt.Classes > 0 && nd.Label >= int32(opt.Classes) {
			return errNode(ErrLabel, i, "label %d, want 0..%d", nd.Label, opt.Classes-1)
		}
		if len(nd.Kids) == 0 {
			if nd.Word < 0 {
				return errNode(ErrStructure, i, "leaf without a word")
			}
			start[i] = int32(i)
			continue
		}
		if opt.Arity > 0 && len(nd.Kids) != opt.Arity {
			return errNode(ErrStructure, i, "%d children, the cell takes %d", len(nd.Kids), opt.Arity)
		}
		end := int32(i) - 1
		for j := len(nd.Kids) - 1; j >= 0; j-- {
			k := nd.Kids[j]
			if k != end || t.Nodes[k].Parent != int32(i) {
				return errNode(ErrStructure, i, "children are not in post-order")
			}
			end = start[k] - 1
		}
		start[i] = end + 1
	}
	if start[n-1] != 0 {
		return errNode(ErrStructure, n-1, "nodes before %d are not in the root's subtree", start[n-1])
	}
	if d := t.depthMax(); d > opt.MaxDepth {
		return &Error{Err: ErrLimit, Msg: fmt.Sprintf("%d levels, limit %d", d, opt.MaxDepth)}
	}
	return nil
}

func (t *Tree) depthMax() int {
	m := int32(0)
	for _, d := range t.Depths() {
		m = max(m, d)
	}
	return int(m) + 1
}

// builder accumulates nodes in post-order with one backing array for kids.
type builder struct {
	t    *Tree
	kids []int32
	opt  *Options
}

func (b *builder) add(kids []int32, word, label int32) int32 {
	i := int32(len(b.t.Nodes))
	var ks []int32
	if len(kids) > 0 {
		at := len(b.kids)
		b.kids = append(b.kids, kids...)
		ks = b.kids[at:len(b.kids):len(b.kids)]
		for _, k := range kids {
			b.t.Nodes[k].Parent = i
		}
	}
	b.t.Nodes = append(b.t.Nodes, Node{Kids: ks, Parent: -1, Word: word, Label: label})
	return i
}
