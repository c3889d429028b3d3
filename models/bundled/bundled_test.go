package bundled

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"rnnserve/models"
	"rnnserve/schedule"
)

// TestByteLMPerplexity runs the bundled language model over its held-out
// text as one sequence from a zero state, and checks that its perplexity
// and first per-position log-probabilities equal PyTorch's (eval.json,
// written by scripts/train_bytelm.py) within 1e-4 relative, under both
// schedules.
func TestByteLMPerplexity(t *testing.T) {
	m, err := models.LoadFS(FS, "bytelm/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("bytelm/heldout.bin")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Tokens        int       `json:"tokens"`
		NLLSum        float64   `json:"nll_sum"`
		Perplexity    float64   `json:"perplexity"`
		FirstLogprobs []float64 `json:"first_logprobs"`
	}
	data, err := os.ReadFile("bytelm/eval.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if ref.Tokens != len(text) || len(ref.FirstLogprobs) == 0 {
		t.Fatalf("eval.json covers %d tokens with %d log-probabilities, held-out text has %d", ref.Tokens, len(ref.FirstLogprobs), len(text))
	}
	tokens := make([]int64, len(text))
	for i, b := range text {
		tokens[i] = int64(b)
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
		var nll float64
		for i := 0; i+1 < len(tokens); i++ {
			lp := float64(res.Head[i*V+int(tokens[i+1])])
			nll -= lp
			if i < len(ref.FirstLogprobs) && math.Abs(lp-ref.FirstLogprobs[i]) > 1e-4*math.Max(1, math.Abs(ref.FirstLogprobs[i])) {
				t.Errorf("%v: log p(byte %d) = %v, PyTorch %v", s, i+1, lp, ref.FirstLogprobs[i])
			}
		}
		ppl := math.Exp(nll / float64(len(tokens)-1))
		if math.Abs(ppl-ref.Perplexity) > 1e-4*ref.Perplexity {
			t.Errorf("%v: perplexity %.6f, PyTorch %.6f", s, ppl, ref.Perplexity)
		}
		t.Logf("%v: held-out perplexity %.5f (PyTorch %.5f) over %d bytes", s, ppl, ref.Perplexity, len(tokens))
	}
}
