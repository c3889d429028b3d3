package bundled

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
)

// TestTreeLSTMHeldOut classifies the bundled TreeLSTM's held-out
// expression trees (up to 16 operators, longer than any it was trained on)
// and checks that every root prediction, and so the accuracy, equals
// PyTorch's (eval.json, written by scripts/torch_tree.py).
func TestTreeLSTMHeldOut(t *testing.T) {
	m, err := models.LoadTreeFS(FS, "treelstm/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("treelstm/eval.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Trees       int     `json:"heldout_trees"`
		Accuracy    float64 `json:"root_accuracy"`
		Correct     int     `json:"root_correct"`
		Predictions []int   `json:"predictions"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("treelstm/heldout.txt")
	if err != nil {
		t.Fatal(err)
	}
	var trees []*tree.Tree
	for _, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		tr, err := tree.ParseBracketed(line, m.ParseOptions())
		if err != nil {
			t.Fatal(err)
		}
		trees = append(trees, tr)
	}
	if len(trees) != ref.Trees || len(ref.Predictions) != ref.Trees {
		t.Fatalf("%d trees, eval.json has %d and %d predictions", len(trees), ref.Trees, len(ref.Predictions))
	}
	prog, err := schedule.NewTreeProgram(m.Net)
	if err != nil {
		t.Fatal(err)
	}
	// The depth-batched executor classifies all trees; the recursive one,
	// which schedule's tests show gives the same bits, the first 400.
	for _, ex := range []schedule.TreeExecutor{schedule.DepthBatched, schedule.Recursive} {
		correct, differ, n := 0, 0, len(trees)
		if ex == schedule.Recursive {
			n = 400
		}
		for lo := 0; lo < n; lo += 200 {
			batch := trees[lo:min(lo+200, n)]
			tp, err := prog.Plan(batch, schedule.TreeOptions{Executor: ex})
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.Run(); err != nil {
				t.Fatal(err)
			}
			for i, tr := range batch {
				pred := rnn.Argmax(tp.Probs(i, tr.Root()))
				if pred != ref.Predictions[lo+i] {
					differ++
					if differ <= 5 {
						t.Errorf("%v: tree %d: predicted %d, PyTorch %d", ex, lo+i, pred, ref.Predictions[lo+i])
					}
				}
				if int32(pred) == tr.Nodes[tr.Root()].Label {
					correct++
				}
			}
		}
		if differ > 0 || n == len(trees) && correct != ref.Correct {
			t.Errorf("%v: %d predictions differ from PyTorch's; %d correct, PyTorch %d", ex, differ, correct, ref.Correct)
		}
		t.Logf("%v: held-out root accuracy %d/%d = %.4f (PyTorch over all %d: %.4f)", ex, correct, n, float64(correct)/float64(n), len(trees), ref.Accuracy)
	}
}
