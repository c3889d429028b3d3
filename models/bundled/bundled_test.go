package bundled

import (
	"math"
	"testing"

	"rnnserve/schedule"
)

// TestByteLMPerplexity runs the bundled language model over its held-out
// text as one sequence from a zero state, and checks that its perplexity
// and first per-position log-probabilities equal PyTorch's (eval.json,
// written by scripts/train_bytelm.py) within 1e-4 relative, under both
// schedules.
func TestByteLMPerplexity(t *testing.T) {
	m, tokens, ref := loadByteLM(t)
	if ref.Tokens != len(tokens) || len(ref.FirstLogprobs) == 0 {
		t.Fatalf("eval.json covers %d tokens with %d log-probabilities, held-out text has %d", ref.Tokens, len(ref.FirstLogprobs), len(tokens))
	}
	for _, s := range []schedule.Schedule{schedule.A, schedule.APlus} {
		prog, err := schedule.NewProgram(m.Net, s)
		if err != nil {
			t.Fatal(err)
		}
		p, err := prog.Plan(schedule.Input{T: len(tokens), B: 1, Tokens: tokens}, schedule.PlanOptions{Head: true})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Run()
		if err != nil {
			t.Fatal(err)
		}
		const V = 256
		for i, want := range ref.FirstLogprobs {
			lp := float64(res.Head[i*V+int(tokens[i+1])])
			if math.Abs(lp-want) > 1e-4*math.Max(1, math.Abs(want)) {
				t.Errorf("%v: log p(byte %d) = %v, PyTorch %v", s, i+1, lp, want)
			}
		}
		ppl := perplexity(res.Head, tokens)
		if math.Abs(ppl-ref.Perplexity) > 1e-4*ref.Perplexity {
			t.Errorf("%v: perplexity %.6f, PyTorch %.6f", s, ppl, ref.Perplexity)
		}
		t.Logf("%v: held-out perplexity %.5f (PyTorch %.5f) over %d bytes", s, ppl, ref.Perplexity, len(tokens))
	}
}
