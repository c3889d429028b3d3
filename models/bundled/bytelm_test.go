package bundled

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"rnnserve/models"
)

// byteLMEval is PyTorch's evaluation of the bundled LM (bytelm/eval.json,
// written by scripts/train_bytelm.py).
type byteLMEval struct {
	Tokens        int       `json:"tokens"`
	NLLSum        float64   `json:"nll_sum"`
	Perplexity    float64   `json:"perplexity"`
	FirstLogprobs []float64 `json:"first_logprobs"`
}

// loadByteLM loads the bundled LM, its held-out text as token ids and
// PyTorch's evaluation of it.
func loadByteLM(t *testing.T) (*models.Model, []int64, byteLMEval) {
	t.Helper()
	m, err := models.LoadFS(FS, "bytelm/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("bytelm/heldout.bin")
	if err != nil {
		t.Fatal(err)
	}
	var ref byteLMEval
	data, err := os.ReadFile("bytelm/eval.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	tokens := make([]int64, len(text))
	for i, b := range text {
		tokens[i] = int64(b)
	}
	return m, tokens, ref
}

// perplexity is exp of the mean negative log-probability of each next
// byte, from head rows of 256 log-probabilities per position.
func perplexity(head []float32, tokens []int64) float64 {
	const V = 256
	var nll float64
	for i := 0; i+1 < len(tokens); i++ {
		nll -= float64(head[i*V+int(tokens[i+1])])
	}
	return math.Exp(nll / float64(len(tokens)-1))
}
