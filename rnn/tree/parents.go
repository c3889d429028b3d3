package tree

import (
	"fmt"
	"strconv"
	"strings"
)

// FromParents builds a tree from the parent-pointer form of the Stanford
// Sentiment Treebank: node i (1-based, as written) has parent parents[i-1],
// 0 marking the root. words[i-1] is node i's word ("" for none; words may
// be shorter than parents, leaving the rest without words) and labels, if
// not nil, holds one label per node (-1 for none). Children keep the order
// of their numbers. The result is renumbered in post-order.
//
// Errors, naming the 1-based node: a parent out of range, no root or
// several, a cycle (nodes that do not reach the root), a leaf without a
// word, a node of the wrong arity, unknown words, over opt's limits.
func FromParents(parents []int, words []string, labels []int, opt Options) (*Tree, error) {
	if err := opt.ensureDefaults(); err != nil {
		return nil, err
	}
	n := len(parents)
	switch {
	case n == 0:
		return nil, &Error{Err: ErrStructure, Msg: "empty tree"}
	case n > opt.MaxNodes:
		return nil, &Error{Err: ErrLimit, Msg: fmt.Sprintf("%d nodes, limit %d", n, opt.MaxNodes)}
	case len(words) > n:
		return nil, &Error{Err: ErrStructure, Msg: fmt.Sprintf("%d words for %d nodes", len(words), n)}
	case labels != nil && len(labels) != n:
		return nil, &Error{Err: ErrStructure, Msg: fmt.Sprintf("%d labels for %d nodes", len(labels), n)}
	}
	root := -1
	nkids := make([]int32, n+1) // nkids[i+1]: children of node i (0-based); prefix sums below
	for i, p := range parents {
		switch {
		case p < 0 || p > n:
			return nil, errNode(ErrStructure, i+1, "parent %d outside 0..%d", p, n)
		case p == i+1:
			return nil, errNode(ErrStructure, i+1, "the node is its own parent")
		case p == 0:
			if root >= 0 {
				return nil, errNode(ErrStructure, i+1, "a second root (the first is node %d)", root+1)
			}
			root = i
		default:
			nkids[p]++
		}
	}
	if root < 0 {
		return nil, &Error{Err: ErrStructure, Msg: "no root (no node has parent 0): the parents form a cycle"}
	}
	// Children lists in number order (CSR).
	for i := 1; i <= n; i++ {
		nkids[i] += nkids[i-1]
	}
	kids := make([]int32, n)
	fill := append([]int32(nil), nkids[:n]...)
	for i, p := range parents {
		if p > 0 {
			kids[fill[p-1]] = int32(i)
			fill[p-1]++
		}
	}
	// Iterative post-order walk from the root; it visits each node once,
	// since each node has one parent, so nodes left unvisited lie on a cycle.
	newID := make([]int32, n)
	for i := range newID {
		newID[i] = -1
	}
	type item struct {
		node  int32
		depth int32
		next  int32 // next child to visit
	}
	t := &Tree{Nodes: make([]Node, 0, n)}
	b := builder{t: t, opt: &opt}
	stack := []item{{node: int32(root), depth: 1}}
	var buf []int32
	for len(stack) > 0 {
		it := &stack[len(stack)-1]
		lo, hi := nkids[it.node], nkids[it.node+1]
		if lo+it.next < hi {
			k := kids[lo+it.next]
			it.next++
			if int(it.depth)+1 > opt.MaxDepth {
				return nil, errNode(ErrLimit, int(k)+1, "deeper than %d levels", opt.MaxDepth)
			}
			stack = append(stack, item{node: k, depth: it.depth + 1})
			continue
		}
		i := int(it.node)
		stack = stack[:len(stack)-1]
		word := int32(-1)
		if i < len(words) && words[i] != "" {
			id, ok := opt.Vocab.ID(Unescape(words[i]))
			if !ok {
				return nil, errNode(ErrUnknownWord, i+1, "%q", clip(words[i]))
			}
			word = id
		}
		label := int32(-1)
		if labels != nil {
			if l := labels[i]; l < -1 || l > 1<<30 || opt.Classes > 0 && l >= opt.Classes {
				return nil, errNode(ErrLabel, i+1, "label %d", l)
			} else {
				label = int32(l)
			}
		}
		buf = buf[:0]
		for _, k := range kids[lo:hi] {
			buf = append(buf, newID[k])
		}
		switch {
		case hi == lo && word < 0:
			return nil, errNode(ErrStructure, i+1, "leaf without a word")
		case hi > lo && opt.Arity > 0 && int(hi-lo) != opt.Arity:
			return nil, errNode(ErrStructure, i+1, "%d children, the cell takes %d", hi-lo, opt.Arity)
		}
		newID[i] = b.add(buf, word, label)
	}
	if len(t.Nodes) != n {
		for i, id := range newID {
			if id < 0 {
				return nil, errNode(ErrStructure, i+1, "on a cycle: it does not reach the root (node %d)", root+1)
			}
		}
	}
	return t, nil
}

// ParseParents parses the text of the parent-pointer form, numbers
// separated by '|' or white space ("6|6|5|5|7|7|0", as in the SST's
// STree.txt), and builds the tree with FromParents.
func ParseParents(text string, words []string, labels []int, opt Options) (*Tree, error) {
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == '|' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	if len(fields) == 0 {
		return nil, &Error{Err: ErrStructure, Msg: "empty tree"}
	}
	o := opt
	if err := o.ensureDefaults(); err != nil {
		return nil, err
	}
	if len(fields) > o.MaxNodes {
		return nil, &Error{Err: ErrLimit, Msg: fmt.Sprintf("%d nodes, limit %d", len(fields), o.MaxNodes)}
	}
	parents := make([]int, len(fields))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || len(f) > 9 {
			return nil, errNode(ErrSyntax, i+1, "parent %q is not an integer", clip(f))
		}
		parents[i] = v
	}
	return FromParents(parents, words, labels, opt)
}

// Parents returns t in the parent-pointer form: 1-based parents (0 at the
// root), in t's node order.
func (t *Tree) Parents() []int {
	p := make([]int, len(t.Nodes))
	for i := range t.Nodes {
		p[i] = int(t.Nodes[i].Parent) + 1
	}
	return p
}
