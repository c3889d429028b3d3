package bundled

import (
	"math"
	"testing"

	"rnnserve/schedule"
)

// TestByteLMPartitionedBF16 runs the bundled language model over its
// held-out text under the partitioned schedule with bf16 weights (one
// worker: the split does not change the arithmetic, and the schedule's
// float32 results are checked against PyTorch in package schedule). The
// perplexity is logged beside PyTorch's float32 one and must stay within
// 1% of it, and differ from it: bf16 rounding must show.
func TestByteLMPartitionedBF16(t *testing.T) {
	m, tokens, ref := loadByteLM(t)
	prog, err := schedule.NewPartitioned(m.Net, schedule.PartitionOptions{Workers: 1, Precision: schedule.BF16})
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
	ppl := perplexity(res.Head, tokens)
	change := ppl/ref.Perplexity - 1
	t.Logf("P with bf16 weights: held-out perplexity %.5f (PyTorch float32 %.5f, change %+.4f%%)", ppl, ref.Perplexity, 100*change)
	if math.Abs(change) > 1e-2 || change == 0 {
		t.Errorf("perplexity %.6f, PyTorch %.6f: change %.3g, want nonzero and within 1%%", ppl, ref.Perplexity, change)
	}
}
