package models

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"rnnserve/models/safetensors"
)

// ErrInfer is matched by every *InferError.
var ErrInfer = errors.New("models: cannot infer the model from the weights")

// InferError says why the tensors of a weights file fit no model, or fit
// several, listing the candidates and the spec key that settles it.
type InferError struct {
	Problems []string
}

func (e *InferError) Error() string {
	return "models: cannot infer the model from the weights: " + joinProblems(e.Problems)
}

// Is makes errors.Is(err, ErrInfer) true.
func (e *InferError) Is(target error) bool { return target == ErrInfer }

// rnnName matches PyTorch's names of RNN parameters, with any prefix.
var rnnName = regexp.MustCompile(`^(?:(.*)\.)?(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$`)

// module is an RNN module found in a weights file.
type module struct {
	prefix string
	spec   LayerSpec
	input  int // width of its input
	names  []string
}

func (m *module) out() int {
	o := m.spec.HiddenSize
	if m.spec.ProjSize > 0 {
		o = m.spec.ProjSize
	}
	if m.spec.Bidirectional {
		o *= 2
	}
	return o
}

func (m *module) String() string {
	name := m.prefix
	if name == "" {
		name = `""`
	}
	dir := ""
	if m.spec.Bidirectional {
		dir = " bidirectional"
	}
	return fmt.Sprintf("%s (%s%s, %d -> %d)", clip(name), m.spec.Cell, dir, m.input, m.out())
}

// Infer finds the model in a set of tensors named however the user's
// module named them: the RNN modules by PyTorch's parameter names
// (<prefix>.weight_ih_l<k>[_reverse] and the rest, any prefix), their
// cell, sizes, layers, direction, projection and biases from the shapes;
// the embedding (<prefix>.weight [vocab][input], no bias) and the head
// (<prefix>.weight [out][width] and optional <prefix>.bias) from their
// widths. Several RNN modules are chained by their widths into a stack.
// Every tensor must find a place.
//
// The head's activation cannot be seen in the weights: the inferred
// spec's head has none (raw scores, what nn.Linear returns); set
// head.activation in a spec to change it. Nor can where the head reads
// (head.input): the inferred spec leaves it unset, which means
// every_step over a unidirectional RNN, where every_step, last_step and
// h_n agree; over a bidirectional one the spec's Config is an
// *AmbiguousError until head.input is set. An nn.RNN's nonlinearity is
// not in its state_dict either: its modules get cell "rnn", an
// *AmbiguousError until it is rnn_tanh or rnn_relu. Where the tensors fit more than
// one model, the *InferError lists the candidates and the prefixes key
// that settles it. The returned spec sets Prefixes only where they differ
// from DefaultPrefixes.
func Infer(ts Tensors) (*Spec, error) { return infer(ts, nil) }

func infer(ts Tensors, given *Prefixes) (*Spec, error) {
	var problems []string
	shapes := map[string][]int{}
	for _, n := range ts.Names() {
		t, _ := ts.Tensor(n)
		shapes[n] = t.Shape
	}
	mods, used, errs := findModules(shapes)
	problems = append(problems, errs...)
	if len(mods) == 0 && len(errs) == 0 {
		problems = append(problems, "no RNN module: no tensor is named like PyTorch's <prefix>.weight_ih_l0 of an nn.LSTM or nn.GRU")
	}
	if problems != nil {
		return nil, &InferError{problems}
	}
	stack, err := orderModules(mods, given)
	if err != nil {
		return nil, err
	}
	s := &Spec{InputSize: stack[0].input}
	if len(stack) == 1 {
		l := stack[0].spec
		s.Cell, s.HiddenSize, s.NumLayers, s.Bidirectional, s.ProjSize, s.Bias = l.Cell, l.HiddenSize, l.NumLayers, l.Bidirectional, l.ProjSize, l.Bias
	} else {
		for _, m := range stack {
			s.Layers = append(s.Layers, m.spec)
		}
	}
	width := stack[len(stack)-1].out()

	// The rest: an embedding and a head, told apart by their widths and
	// by the head's bias.
	type linear struct {
		prefix  string
		rows    int
		cols    int
		hasBias bool
	}
	var rest []string
	var cands []linear
	for _, n := range slices.Sorted(mapKeys(shapes)) {
		if used[n] {
			continue
		}
		rest = append(rest, n)
	}
	restSet := map[string]bool{}
	for _, n := range rest {
		restSet[n] = true
	}
	for _, n := range rest {
		prefix, ok := strings.CutSuffix(n, ".weight")
		if !ok && n == "weight" {
			prefix, ok = "", true
		}
		if !ok || len(shapes[n]) != 2 {
			continue
		}
		l := linear{prefix: prefix, rows: shapes[n][0], cols: shapes[n][1]}
		if b, ok := shapes[join(prefix, "bias")]; ok && restSet[join(prefix, "bias")] {
			if !slices.Equal(b, []int{l.rows}) {
				continue
			}
			l.hasBias = true
		}
		cands = append(cands, l)
	}
	var embs, heads []linear
	for _, c := range cands {
		if !c.hasBias && c.cols == s.InputSize && (given == nil || given.Embedding == nil || *given.Embedding == c.prefix) {
			embs = append(embs, c)
		}
		if c.cols == width && (given == nil || given.Head == nil || *given.Head == c.prefix) {
			heads = append(heads, c)
		}
	}
	describe := func(ls []linear) string {
		return listSome(len(ls), func(i int) string {
			return fmt.Sprintf("%q [%d %d]", clip(join(ls[i].prefix, "weight")), ls[i].rows, ls[i].cols)
		})
	}
	// A lone bias-free tensor that fits both roles is a head only if
	// something else is the embedding.
	if len(embs) == 1 && len(heads) == 1 && embs[0] == heads[0] {
		return nil, &InferError{[]string{fmt.Sprintf(
			"%s could be the embedding (token ids in) or a head without bias (scores out); set prefixes.embedding or prefixes.head in a spec to say which",
			describe(embs))}}
	}
	if len(heads) > 1 {
		heads = slices.DeleteFunc(heads, func(h linear) bool { return len(embs) == 1 && h == embs[0] })
	}
	if len(embs) > 1 {
		embs = slices.DeleteFunc(embs, func(e linear) bool { return len(heads) == 1 && e == heads[0] })
	}
	if len(embs) > 1 {
		problems = append(problems, fmt.Sprintf("several tensors could be the embedding (width %d, no bias): %s; set prefixes.embedding in a spec", s.InputSize, describe(embs)))
	}
	if len(heads) > 1 {
		problems = append(problems, fmt.Sprintf("several tensors could be the head (input width %d): %s; set prefixes.head in a spec", width, describe(heads)))
	}
	if problems != nil {
		return nil, &InferError{problems}
	}
	p := Prefixes{RNN: PrefixList{}}
	for _, m := range stack {
		p.RNN = append(p.RNN, m.prefix)
	}
	if len(embs) == 1 {
		s.Embedding = &Embedding{VocabSize: embs[0].rows}
		p.Embedding = &embs[0].prefix
		used[join(embs[0].prefix, "weight")] = true
	}
	if len(heads) == 1 {
		s.Head = &Head{OutFeatures: heads[0].rows}
		if !heads[0].hasBias {
			f := false
			s.Head.Bias = &f
		} else {
			used[join(heads[0].prefix, "bias")] = true
		}
		p.Head = &heads[0].prefix
		used[join(heads[0].prefix, "weight")] = true
	}
	for _, n := range rest {
		if !used[n] {
			problems = append(problems, fmt.Sprintf("tensor %q %s fits no part of an embedding + LSTM/GRU stack + linear head model (stack input %d, output %d)",
				clip(n), safetensors.ShapeString(shapes[n]), s.InputSize, width))
		}
	}
	if problems != nil {
		return nil, &InferError{problems}
	}
	s.EnsureDefaults()
	s.Prefixes = trimDefaults(s, p)
	if _, err := s.shape(); err != nil {
		return nil, &InferError{[]string{err.Error()}}
	}
	return s, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// trimDefaults keeps only the prefixes that differ from the defaults;
// nil if none do.
func trimDefaults(s *Spec, p Prefixes) *Prefixes {
	def := DefaultPrefixes(s)
	var out Prefixes
	keep := false
	if p.Embedding != nil && s.Embedding != nil && *p.Embedding != *def.Embedding {
		out.Embedding, keep = p.Embedding, true
	}
	if p.Head != nil && s.Head != nil && *p.Head != *def.Head {
		out.Head, keep = p.Head, true
	}
	if !slices.Equal(p.RNN, def.RNN) {
		out.RNN, keep = p.RNN, true
	}
	if !keep {
		return nil
	}
	return &out
}

// findModules groups the RNN parameters by prefix and reads each module's
// shape from them. used marks the tensors that belong to a module.
func findModules(shapes map[string][]int) (mods []*module, used map[string]bool, problems []string) {
	type key struct {
		layer int
		rev   bool
	}
	byPrefix := map[string]map[key]map[string][]int{}
	used = map[string]bool{}
	for n, shape := range shapes {
		m := rnnName.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		k, err := strconv.Atoi(m[3])
		if err != nil || k > 1024 {
			continue
		}
		if byPrefix[m[1]] == nil {
			byPrefix[m[1]] = map[key]map[string][]int{}
		}
		kk := key{k, m[4] != ""}
		if byPrefix[m[1]][kk] == nil {
			byPrefix[m[1]][kk] = map[string][]int{}
		}
		byPrefix[m[1]][kk][m[2]] = shape
		used[n] = true
	}
	for _, prefix := range slices.Sorted(mapKeys(byPrefix)) {
		layers := byPrefix[prefix]
		name := prefix
		if name == "" {
			name = "(no prefix)"
		}
		bad := func(format string, a ...any) {
			problems = append(problems, fmt.Sprintf("RNN module %s: ", clip(name))+fmt.Sprintf(format, a...))
		}
		n := 0
		for layers[key{n, false}] != nil {
			n++
		}
		beyond := false
		for k := range layers {
			beyond = beyond || k.layer >= n
		}
		if n == 0 || beyond || len(layers) != n && len(layers) != 2*n {
			bad("layers are not numbered 0..L-1 with both or no directions in each")
			continue
		}
		bidir := len(layers) == 2*n
		mod := &module{prefix: prefix}
		ok := true
		for k := 0; k < n && ok; k++ {
			for _, rev := range []bool{false, true}[:1+btoi(bidir)] {
				p := layers[key{k, rev}]
				if p == nil {
					bad("layer %d has no reverse direction", k)
					ok = false
					break
				}
				wih, whh := p["weight_ih"], p["weight_hh"]
				if len(wih) != 2 || len(whh) != 2 {
					bad("layer %d lacks 2-D weight_ih and weight_hh", k)
					ok = false
					break
				}
				rows, out := wih[0], whh[1]
				hidden := out
				proj := 0
				if whr, has := p["weight_hr"]; has {
					if len(whr) != 2 || whr[0] != out {
						bad("layer %d: weight_hr %s does not match weight_hh %s", k, safetensors.ShapeString(whr), safetensors.ShapeString(whh))
						ok = false
						break
					}
					hidden, proj = whr[1], out
				}
				if hidden < 1 || whh[0] != rows || rows%hidden != 0 {
					bad("layer %d: weight_ih %s and weight_hh %s fit no LSTM, GRU or nn.RNN", k, safetensors.ShapeString(wih), safetensors.ShapeString(whh))
					ok = false
					break
				}
				var cell string
				switch rows / hidden {
				case 4:
					cell = "lstm"
				case 3:
					cell = "gru"
				case 1:
					// nn.RNN: its state_dict does not say tanh or relu.
					cell = "rnn"
				default:
					bad("layer %d: %d rows for hidden size %d is %d gate blocks, want 4 (LSTM), 3 (GRU) or 1 (nn.RNN)", k, rows, hidden, rows/hidden)
					ok = false
				}
				if !ok {
					break
				}
				if proj > 0 && cell != "lstm" {
					bad("layer %d: weight_hr on a %s (projection is LSTM only)", k, map[string]string{"gru": "GRU", "rnn": "nn.RNN"}[cell])
					ok = false
					break
				}
				_, bih := p["bias_ih"]
				_, bhh := p["bias_hh"]
				if bih != bhh || bih && (!slices.Equal(p["bias_ih"], []int{rows}) || !slices.Equal(p["bias_hh"], []int{rows})) {
					bad("layer %d: biases %s and %s do not fit %d rows (both or neither must be present)", k,
						safetensors.ShapeString(p["bias_ih"]), safetensors.ShapeString(p["bias_hh"]), rows)
					ok = false
					break
				}
				this := LayerSpec{Cell: cell, HiddenSize: hidden, NumLayers: n, Bidirectional: bidir, ProjSize: proj}
				if !bih {
					f := false
					this.Bias = &f
				}
				if k == 0 && !rev {
					mod.spec, mod.input = this, wih[1]
					continue
				}
				want := mod.input
				if k > 0 {
					want = mod.out()
				}
				if this.Cell != mod.spec.Cell || this.HiddenSize != mod.spec.HiddenSize || this.ProjSize != mod.spec.ProjSize ||
					(this.Bias == nil) != (mod.spec.Bias == nil) || wih[1] != want {
					bad("layer %d %s does not match layer 0 (one nn.LSTM/nn.GRU has one cell, size, projection and bias setting; input %d, want %d)",
						k, map[bool]string{false: "forward", true: "reverse"}[rev], wih[1], want)
					ok = false
					break
				}
			}
		}
		if ok {
			mods = append(mods, mod)
		}
	}
	return mods, used, problems
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// trailingNumber splits "rnns.10" or "lstm2" into its stem and number.
func trailingNumber(s string) (string, int, bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) {
		return s, 0, false
	}
	n, err := strconv.Atoi(s[i:])
	return s[:i], n, err == nil
}

// orderModules chains modules into a stack: each module's input width
// is the previous module's output width. given (prefixes.rnn) fixes the
// order; otherwise the order must follow from the widths, or from the
// modules' names when they differ only by a trailing number (lstm1,
// lstm2 or rnns.0, rnns.1) and that order fits.
func orderModules(mods []*module, given *Prefixes) ([]*module, error) {
	byPrefix := map[string]*module{}
	for _, m := range mods {
		byPrefix[m.prefix] = m
	}
	fits := func(order []*module) bool {
		for i := 1; i < len(order); i++ {
			if order[i].input != order[i-1].out() {
				return false
			}
		}
		return true
	}
	list := func(ms []*module) string {
		return listSome(len(ms), func(i int) string { return ms[i].String() })
	}
	if given != nil && given.RNN != nil {
		var order []*module
		for _, p := range given.RNN {
			m, ok := byPrefix[p]
			if !ok {
				return nil, &InferError{[]string{fmt.Sprintf("prefixes.rnn names %q, but the file's RNN modules are %s", clip(p), list(mods))}}
			}
			order = append(order, m)
		}
		if len(order) != len(mods) {
			return nil, &InferError{[]string{fmt.Sprintf("prefixes.rnn lists %d modules, the file has %d: %s", len(order), len(mods), list(mods))}}
		}
		if !fits(order) {
			return nil, &InferError{[]string{fmt.Sprintf("prefixes.rnn orders the modules %s, whose widths do not chain", list(order))}}
		}
		return order, nil
	}
	if len(mods) == 1 {
		return mods, nil
	}
	if len(mods) > 8 {
		return nil, &InferError{[]string{fmt.Sprintf("%d RNN modules: list their order in prefixes.rnn", len(mods))}}
	}
	// Find at most two chains: a second one is all it takes to ask for
	// prefixes.rnn (eight modules of one width chain in 8! orders).
	var chains [][]*module
	var walk func(order []*module, left []*module)
	walk = func(order []*module, left []*module) {
		if len(left) == 0 {
			chains = append(chains, slices.Clone(order))
			return
		}
		for i, m := range left {
			if len(chains) == 2 {
				return
			}
			if len(order) > 0 && m.input != order[len(order)-1].out() {
				continue
			}
			rest := append(slices.Clone(left[:i]), left[i+1:]...)
			walk(append(order, m), rest)
		}
	}
	walk(nil, mods)
	switch {
	case len(chains) == 1:
		return chains[0], nil
	case len(chains) == 0:
		return nil, &InferError{[]string{fmt.Sprintf(
			"RNN modules %s do not chain into one stack (each module's input width must be the previous one's output width): this is not a stack of RNN modules in sequence", list(mods))}}
	}
	// Several orders fit: take the one the names number, if they do.
	byName := slices.Clone(mods)
	stem0, _, numbered := trailingNumber(mods[0].prefix)
	for _, m := range mods {
		stem, _, ok := trailingNumber(m.prefix)
		numbered = numbered && ok && stem == stem0
	}
	if numbered {
		slices.SortFunc(byName, func(a, b *module) int {
			_, x, _ := trailingNumber(a.prefix)
			_, y, _ := trailingNumber(b.prefix)
			return cmp.Compare(x, y)
		})
		if fits(byName) {
			return byName, nil
		}
	}
	var cands []string
	for _, c := range chains {
		var names []string
		for _, m := range c {
			name := m.prefix
			if len(name) > 40 { // named in full (to 200 bytes) in the list before
				name = name[:40] + "..."
			}
			names = append(names, strconv.Quote(name))
		}
		cands = append(cands, "["+strings.Join(names, ", ")+"]")
	}
	return nil, &InferError{[]string{fmt.Sprintf("RNN modules %s chain in more than one order (%s, or another); set prefixes.rnn in a spec to the order of the stack",
		list(mods), strings.Join(cands, " or "))}}
}

// listSome joins the first eight of n items for a message and counts the
// rest: a file may hold thousands of candidates for one role.
func listSome(n int, item func(i int) string) string {
	var out []string
	for i := range min(n, 8) {
		out = append(out, item(i))
	}
	if n > 8 {
		out = append(out, fmt.Sprintf("and %d more", n-8))
	}
	return strings.Join(out, ", ")
}

// resolvePrefixes fills the prefixes s leaves unset: the defaults where
// the file uses them, else what Infer finds in the file (constrained by
// the prefixes s does set). If inference fails, the defaults stay, and
// binding reports what is missing.
func resolvePrefixes(s *Spec, ts Tensors) *Prefixes {
	def := DefaultPrefixes(s)
	have := prefixesOf(s)
	given := s.Prefixes
	if given == nil {
		given = &Prefixes{}
	}
	has := func(name string) bool { _, ok := ts.Tensor(name); return ok }
	need := (given.Embedding == nil && s.Embedding != nil && !has(join(*def.Embedding, "weight"))) ||
		(given.Head == nil && s.Head != nil && !has(join(*def.Head, "weight"))) ||
		(given.RNN == nil && !has(join(def.RNN[0], "weight_ih_l0")))
	if !need {
		return &have
	}
	found, err := infer(ts, given)
	if err != nil {
		return &have
	}
	fp := prefixesOf(found)
	if given.Embedding == nil && s.Embedding != nil && found.Embedding != nil {
		have.Embedding = fp.Embedding
	}
	if given.Head == nil && s.Head != nil && found.Head != nil {
		have.Head = fp.Head
	}
	if given.RNN == nil && len(fp.RNN) == len(have.RNN) {
		have.RNN = fp.RNN
	}
	return &have
}
