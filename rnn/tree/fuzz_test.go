package tree

import (
	"errors"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// fuzzVocab has an UNK so that any word parses; the limits are small so
// that the fuzzer reaches them.
func fuzzOptions(t testing.TB) Options {
	return Options{Vocab: vocab(t, "<unk>", sst...), MaxNodes: 64, MaxDepth: 16, Classes: 5}
}

// checkParsed verifies what any parser returns: an error of the package,
// or a tree that passes Check with the same options.
func checkParsed(t *testing.T, tr *Tree, err error, opt Options) {
	t.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || tr != nil {
			t.Fatalf("error %v is not a *tree.Error, or a tree came with it", err)
		}
		return
	}
	if err := tr.Check(opt); err != nil {
		t.Fatalf("parsed tree fails Check: %v", err)
	}
}

func FuzzParseBracketed(f *testing.F) {
	for _, s := range []string{"(3 (2 It) (4 (2 is) (3 good)))", "(It (is good))", "((", "())", "(-LRB- 3)", "It", "(1 2 3)"} {
		f.Add(s)
	}
	fuzzbound.String(f, fuzzbound.Limits{}, func(t *testing.T, s string) {
		opt := fuzzOptions(t)
		tr, err := ParseBracketed(s, opt)
		checkParsed(t, tr, err, opt)
		if err == nil {
			back, err := ParseBracketed(Bracketed(tr, opt.Vocab), opt)
			if err != nil || shape(back, opt.Vocab) != shape(tr, opt.Vocab) {
				t.Fatalf("round trip of %q through %q: %v", s, Bracketed(tr, opt.Vocab), err)
			}
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"label":3,"children":[{"word":"It"},{"word":"is"}]}`, `{"word":"x"}`, `{"children":[{`, `{}`} {
		f.Add([]byte(s))
	}
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, b []byte) {
		opt := fuzzOptions(t)
		tr, err := ParseJSON(b, opt)
		checkParsed(t, tr, err, opt)
	})
}

func FuzzParseParents(f *testing.F) {
	for _, s := range []string{"4|5|5|0|4", "2|3|1", "0", "2|0|0", "1"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, nwords uint8) {
		fuzzbound.Run(t, len(s)+1, func() {
			opt := fuzzOptions(t)
			words := make([]string, int(nwords)%70)
			for i := range words {
				words[i] = sst[i%len(sst)]
			}
			tr, err := ParseParents(s, words, nil, opt)
			checkParsed(t, tr, err, opt)
		})
	})
}
