package tree

import (
	"errors"
	"strings"
	"testing"
)

func vocab(t testing.TB, unk string, words ...string) *Vocab {
	t.Helper()
	v, err := NewVocab(words, unk)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var sst = []string{"It", "is", "good", "(", ")", "not", "<unk>"}

// shape renders a tree as nested brackets of word/label for comparisons.
func shape(t *Tree, v *Vocab) string {
	s := make([]string, len(t.Nodes))
	for i, n := range t.Nodes {
		lab := ""
		if n.Label >= 0 {
			lab = string(rune('0'+n.Label)) + ":"
		}
		if len(n.Kids) == 0 {
			s[i] = lab + v.Word(n.Word)
			continue
		}
		var parts []string
		for _, k := range n.Kids {
			parts = append(parts, s[k])
		}
		s[i] = lab + "[" + strings.Join(parts, " ") + "]"
	}
	return s[len(s)-1]
}

func TestParseBracketed(t *testing.T) {
	v := vocab(t, "<unk>", sst...)
	for _, c := range []struct{ in, want string }{
		{"(3 (2 It) (4 (2 is) (3 good)))", "3:[2:It 4:[2:is 3:good]]"},
		{"((It) ((is) (good)))", "[It [is good]]"},
		{"(It (is good))", "[It [is good]]"},
		{"(3 It (4 is good))", "3:[It 4:[is good]]"},
		{"(2 -LRB-)", "2:("},
		{"(-LRB- (It -RRB-))", "[( [It )]]"},
		{"  It  ", "It"},
		{"(It)", "It"},
		{"(3 (2 zebra) good)", "3:[2:<unk> good]"},
		{"(1 2)", "1:<unk>"},
	} {
		tr, err := ParseBracketed(c.in, Options{Vocab: v})
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := shape(tr, v); got != c.want {
			t.Errorf("%q: %s, want %s", c.in, got, c.want)
		}
		if err := tr.Check(Options{Vocab: v}); err != nil {
			t.Errorf("%q: parsed tree fails Check: %v", c.in, err)
		}
		// Bracketed writes what ParseBracketed reads back.
		back, err := ParseBracketed(Bracketed(tr, v), Options{Vocab: v})
		if err != nil || shape(back, v) != c.want {
			t.Errorf("%q: round trip through %q: %v", c.in, Bracketed(tr, v), err)
		}
	}
}

func TestParseBracketedErrors(t *testing.T) {
	v := vocab(t, "", sst...)
	for _, c := range []struct {
		in   string
		opt  Options
		want error
		off  string
	}{
		{"(3 (2 It) (4 is)", Options{}, ErrSyntax, "offset 16"},
		{"(3 (2 It)))", Options{}, ErrSyntax, "offset 10"},
		{"(It) (is)", Options{}, ErrSyntax, "offset 5"},
		{"()", Options{}, ErrSyntax, "offset 0"},
		{"", Options{}, ErrStructure, "offset 0"},
		{"   ", Options{}, ErrStructure, ""},
		{"(It zebra)", Options{}, ErrUnknownWord, "offset 4"},
		{"(It is good)", Options{Arity: 2}, ErrStructure, "offset 0"},
		{"(7 It)", Options{Classes: 5}, ErrLabel, "offset 1"},
		{"((It is) (is good))", Options{MaxNodes: 5}, ErrLimit, ""},
		{"(((It)))", Options{MaxDepth: 2}, ErrLimit, "offset 2"},
		// A bare word is a leaf one level below its bracket.
		{"(It is)", Options{MaxDepth: 1}, ErrLimit, "offset 1"},
		{"(It (is good))", Options{MaxDepth: 2}, ErrLimit, "offset 5"},
	} {
		opt := c.opt
		opt.Vocab = v
		_, err := ParseBracketed(c.in, opt)
		if !errors.Is(err, c.want) {
			t.Errorf("%q: %v, want %v", c.in, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.off) {
			t.Errorf("%q: %v does not name %q", c.in, err, c.off)
		}
	}
}

// TestDeepInput parses 200,000 nested brackets (a unary chain of that
// many nodes) without recursion: the depth limit stops it at once, and
// limits as large as the input parse it.
func TestDeepInput(t *testing.T) {
	v := vocab(t, "", "a")
	deep := strings.Repeat("(", 200_000) + "a" + strings.Repeat(")", 200_000)
	if _, err := ParseBracketed(deep, Options{Vocab: v}); !errors.Is(err, ErrLimit) {
		t.Fatalf("deep brackets: %v, want ErrLimit", err)
	}
	tr, err := ParseBracketed(deep, Options{Vocab: v, MaxDepth: 400_000, MaxNodes: 400_000})
	if err != nil || tr.Len() != 200_000 || tr.Height() != 199_999 {
		t.Fatalf("deep brackets with a large limit: %v", err)
	}
	js := strings.Repeat(`{"children":[`, 100_000) + `{"word":"a"}` + strings.Repeat("]}", 100_000)
	if _, err := ParseJSON([]byte(js), Options{Vocab: v}); !errors.Is(err, ErrLimit) {
		t.Fatalf("deep JSON: %v, want ErrLimit", err)
	}
	// A linear chain of 200,000 parents.
	n := 200_000
	parents := make([]int, n)
	words := make([]string, n)
	for i := range parents {
		parents[i] = i + 2
	}
	parents[n-1] = 0
	words[0] = "a"
	_, err = FromParents(parents, words, nil, Options{Vocab: v, MaxNodes: n, MaxDepth: n})
	if err != nil {
		t.Fatalf("chain of %d parents: %v", n, err)
	}
}

func TestParseJSON(t *testing.T) {
	v := vocab(t, "<unk>", sst...)
	in := `{"label": 3, "children": [{"label": 2, "word": "It"}, {"word": "is", "children": [{"word": "good"}, {"word": "zebra"}]}]}`
	tr, err := ParseJSON([]byte(in), Options{Vocab: v})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shape(tr, v), "3:[2:It [good <unk>]]"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if tr.Nodes[3].Word != 1 {
		t.Errorf("inner node's word %d, want 1 (is)", tr.Nodes[3].Word)
	}
	for _, c := range []struct {
		in   string
		want error
	}{
		{`{"word": "It", "color": 1}`, ErrSyntax},
		{`{"word": "It", "word": "is"}`, ErrSyntax},
		{`{"children": []}`, ErrStructure},
		{`{"label": -1, "word": "It"}`, ErrLabel},
		{`{"label": 1.5, "word": "It"}`, ErrLabel},
		{`{"word": 3}`, ErrSyntax},
		{`{"word": "It"} {}`, ErrSyntax},
		{`{"children": [{"word": "It"}`, ErrSyntax},
		{`[]`, ErrSyntax},
		{``, ErrStructure},
		{`{"children": [1]}`, ErrSyntax},
	} {
		if _, err := ParseJSON([]byte(c.in), Options{Vocab: v}); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.in, err, c.want)
		}
	}
	strict := vocab(t, "", sst...)
	if _, err := ParseJSON([]byte(`{"word": "zebra"}`), Options{Vocab: strict}); !errors.Is(err, ErrUnknownWord) {
		t.Errorf("unknown word without UNK: %v", err)
	}
}

func TestFromParents(t *testing.T) {
	v := vocab(t, "", sst...)
	// SST style: leaves first, 1-based parents, 0 at the root.
	tr, err := ParseParents("4|5|5|0|4", []string{"It", "is", "good"}, []int{2, 2, 3, 3, 4}, Options{Vocab: v, Arity: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shape(tr, v), "3:[2:It 4:[2:is 3:good]]"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	back, err := FromParents(tr.Parents(), wordsOf(tr, v), nil, Options{Vocab: v})
	if err != nil || shape(back, v) != "[It [is good]]" {
		t.Errorf("round trip through Parents: %v", err)
	}
	for _, c := range []struct {
		parents string
		words   []string
		want    error
		where   string
	}{
		{"2|0|0", []string{"It", "", "is"}, ErrStructure, "node 3"},       // two roots
		{"2|3|1", []string{"It"}, ErrStructure, "no root"},                // a cycle, no root
		{"0|3|2", []string{"It", "is", "good"}, ErrStructure, "node 2"},   // a cycle beside the root
		{"2|9", []string{"It"}, ErrStructure, "node 2"},                   // out of range
		{"2|2", []string{"It"}, ErrStructure, "node 2"},                   // own parent
		{"2|0", nil, ErrStructure, "node 1"},                              // leaf without a word
		{"2|x", []string{"It"}, ErrSyntax, "node 2"},                      // not a number
		{"", nil, ErrStructure, "empty"},                                  // empty
		{"3|3|0", []string{"It", "zebra"}, ErrUnknownWord, "node 2"},      // unknown word
		{"4|4|4|0", []string{"It", "is", "good"}, ErrStructure, "node 4"}, // ternary for a binary cell
	} {
		_, err := ParseParents(c.parents, c.words, nil, Options{Vocab: v, Arity: 2})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.where) {
			t.Errorf("%q: %v, want %v naming %q", c.parents, err, c.want, c.where)
		}
	}
	if _, err := ParseParents("2|0", []string{"It"}, nil, Options{Vocab: v, MaxNodes: 1}); !errors.Is(err, ErrLimit) {
		t.Errorf("over MaxNodes: %v", err)
	}
}

func wordsOf(t *Tree, v *Vocab) []string {
	w := make([]string, t.Len())
	for i, n := range t.Nodes {
		if n.Word >= 0 {
			w[i] = v.Word(n.Word)
		}
	}
	return w
}

func TestShapes(t *testing.T) {
	for _, c := range []struct {
		shape  Shape
		leaves int
		height int
	}{{Balanced, 16, 4}, {Linear, 16, 15}, {Balanced, 1, 0}} {
		tr := Binary(c.shape, c.leaves, nil, func(int) int32 { return 0 })
		if tr.Leaves() != c.leaves || tr.Height() != c.height || tr.Len() != 2*c.leaves-1 {
			t.Errorf("%v %d: %d leaves, height %d, %d nodes", c.shape, c.leaves, tr.Leaves(), tr.Height(), tr.Len())
		}
		if err := tr.Check(Options{Vocab: vocab(t, "", "a"), Arity: 2, MaxDepth: 100}); err != nil {
			t.Errorf("%v: %v", c.shape, err)
		}
	}
}

func TestCheckRejectsBadOrder(t *testing.T) {
	v := vocab(t, "", "a")
	bad := &Tree{Nodes: []Node{{Kids: []int32{1}, Parent: -1, Word: -1, Label: -1}, {Parent: 0, Word: 0, Label: -1}}}
	if err := bad.Check(Options{Vocab: v}); !errors.Is(err, ErrStructure) {
		t.Errorf("child after parent: %v", err)
	}
}
