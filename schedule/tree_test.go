package schedule_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"rnnserve/models"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
)

const treeGolden = "testdata/trees/golden"

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, -1
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if worst > tol || at >= 0 && math.IsNaN(worst) {
		t.Errorf("%s: max |diff| %.3g at %d (got %v, want %v), tolerance %g", what, worst, at, got[at], want[at], tol)
	}
}

// TestTreeGolden runs every static golden case (small random models of each
// cell, written by scripts/torch_tree.py) under both executors and checks
// every node's h, c and class probabilities against PyTorch within 1e-5.
func TestTreeGolden(t *testing.T) {
	for _, name := range []string{"tree_rnn", "rntn", "binary_treelstm", "childsum_treelstm"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(treeGolden, name)
			m, trees := schedule.GoldenTrees(t, dir)
			want := schedule.GoldenIO(t, dir)
			prog, err := schedule.NewTreeProgram(m.Net)
			if err != nil {
				t.Fatal(err)
			}
			for _, ex := range []schedule.TreeExecutor{schedule.Recursive, schedule.DepthBatched} {
				tp, err := prog.Plan(trees, schedule.TreeOptions{Executor: ex, AllNodes: true, Workers: 3})
				if err != nil {
					t.Fatal(err)
				}
				if err := tp.Run(); err != nil {
					t.Fatal(err)
				}
				h, c, pr := schedule.NodeOutputs(tp)
				closeTo(t, ex.String()+" h", h, want["h"], 1e-5)
				closeTo(t, ex.String()+" probs", pr, want["probs"], 1e-5)
				if m.Net.Cell.HasMemory() {
					closeTo(t, ex.String()+" c", c, want["c"], 1e-5)
				}
			}
		})
	}
}

// TestTopDownGolden generates from the golden top-down model's roots and
// checks the structure, words and states against PyTorch's generation.
func TestTopDownGolden(t *testing.T) {
	dir := filepath.Join(treeGolden, "topdown_treelstm")
	m, err := models.LoadTree(filepath.Join(dir, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := schedule.NewTreeProgram(m.Net)
	if err != nil {
		t.Fatal(err)
	}
	want := schedule.GoldenIO(t, dir)
	cap := m.Spec.Generate
	var h, c []float32
	for _, line := range schedule.ReadLines(t, filepath.Join(dir, "trees.txt")) {
		var ref struct {
			Root      string   `json:"root"`
			Parents   []int32  `json:"parents"`
			Words     []string `json:"words"`
			Truncated bool     `json:"truncated"`
		}
		if err := json.Unmarshal([]byte(line), &ref); err != nil {
			t.Fatal(err)
		}
		root, _ := m.Vocab.ID(ref.Root)
		for _, workers := range []int{1, 3} {
			g, err := prog.Generate(root, schedule.GenerateOptions{MaxNodes: cap.MaxNodes, MaxChildren: cap.MaxChildren, MaxDepth: cap.MaxDepth, Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			words := make([]string, len(g.Words))
			for i, w := range g.Words {
				words[i] = m.Vocab.Word(w)
			}
			if !equalInts(g.Parents, ref.Parents) || strings.Join(words, " ") != strings.Join(ref.Words, " ") || g.Truncated != ref.Truncated {
				t.Fatalf("root %s, %d workers: parents %v words %v truncated %v; PyTorch %v %v %v",
					ref.Root, workers, g.Parents, words, g.Truncated, ref.Parents, ref.Words, ref.Truncated)
			}
			if workers == 1 {
				h, c = append(h, g.H...), append(c, g.C...)
			}
		}
	}
	closeTo(t, "h", h, want["h"], 1e-5)
	closeTo(t, "c", c, want["c"], 1e-5)
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func randomModel(t testing.TB, cell tree.Cell, E, H, C, V int, seed uint64) *tree.Model {
	t.Helper()
	m, err := tree.NewModel(tree.Config{Cell: cell, Vocab: V, Embed: E, Hidden: H, Classes: C}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.RandomizeTree(m, seed)
	return m
}

// TestTreeExecutorsAgree runs random batches of random trees of every cell
// through the recursive executor (1 and 4 workers) and the depth-batched
// one. internal/f32's GemmNT computes an element the same way whatever the
// number of rows, so all three agree bit for bit.
func TestTreeExecutorsAgree(t *testing.T) {
	for _, impl := range []string{"f32"} {
		for _, cell := range []tree.Cell{tree.TreeRNN, tree.RNTN, tree.BinaryLSTM, tree.ChildSumLSTM} {
			t.Run(impl+"/"+cell.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(cell), 7))
				// Widths that leave a scalar tail after the kernels' eight
				// lanes (and, for Child-Sum, more than one chunk of units).
				E, H := 21, 21
				switch cell {
				case tree.RNTN:
					E, H = 13, 13
				case tree.BinaryLSTM:
					E = 19
				case tree.ChildSumLSTM:
					E, H = 19, 70
				}
				m := randomModel(t, cell, E, H, 5, 20, uint64(cell))
				prog, err := schedule.NewTreeProgram(m)
				if err != nil {
					t.Fatal(err)
				}
				for round := 0; round < 4; round++ {
					trees := schedule.RandomTrees(rng, cell, 1+rng.IntN(12), 20, 20)
					all := round%2 == 0
					var ref *schedule.TreePlan
					for _, o := range []schedule.TreeOptions{
						{Executor: schedule.Recursive, Workers: 1, AllNodes: all},
						{Executor: schedule.Recursive, Workers: 4, AllNodes: all},
						{Executor: schedule.DepthBatched, AllNodes: all},
					} {
						tp, err := prog.Plan(trees, o)
						if err != nil {
							t.Fatal(err)
						}
						if err := tp.Run(); err != nil {
							t.Fatal(err)
						}
						if ref == nil {
							ref = tp
							continue
						}
						tol := 0.0
						for i, tr := range trees {
							for j := range tr.Nodes {
								what := func(s string) string {
									return o.Executor.String() + " " + s
								}
								closeTo(t, what("h"), tp.H(i, j), ref.H(i, j), tol)
								closeTo(t, what("c"), tp.C(i, j), ref.C(i, j), tol)
								closeTo(t, what("probs"), tp.Probs(i, j), ref.Probs(i, j), tol)
							}
						}
					}
				}
			})
		}
	}
}

// TestTreePlanErrors checks the errors of plans: a dynamic model, a tree
// the cell cannot read, a dry run.
func TestTreePlanErrors(t *testing.T) {
	td := randomModel(t, tree.TopDownLSTM, 8, 8, 10, 10, 1)
	prog, err := schedule.NewTreeProgram(td)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &tree.Tree{Nodes: []tree.Node{{Parent: -1, Word: 1, Label: -1}}}
	if _, err := prog.Plan([]*tree.Tree{leaf}, schedule.TreeOptions{}); !errors.Is(err, schedule.ErrDynamicTree) {
		t.Errorf("Plan of a top-down model: %v, want ErrDynamicTree", err)
	}
	bin := randomModel(t, tree.BinaryLSTM, 8, 8, 3, 10, 1)
	bp, _ := schedule.NewTreeProgram(bin)
	ternary := &tree.Tree{Nodes: []tree.Node{
		{Parent: 3, Word: 1, Label: -1}, {Parent: 3, Word: 2, Label: -1}, {Parent: 3, Word: 3, Label: -1},
		{Kids: []int32{0, 1, 2}, Parent: -1, Word: -1, Label: -1}}}
	if _, err := bp.Plan([]*tree.Tree{ternary}, schedule.TreeOptions{}); !errors.Is(err, tree.ErrStructure) {
		t.Errorf("ternary node for a binary cell: %v, want ErrStructure", err)
	}
	if _, err := bp.Plan(nil, schedule.TreeOptions{}); !errors.Is(err, schedule.ErrInput) {
		t.Errorf("no trees: %v, want ErrInput", err)
	}
	if _, err := prog.Generate(99, schedule.GenerateOptions{}); !errors.Is(err, schedule.ErrInput) {
		t.Errorf("root outside the vocabulary: %v, want ErrInput", err)
	}
	dry, _ := tree.NewModel(bin.Config, true)
	dp, _ := schedule.NewTreeProgram(dry)
	tp, err := dp.Plan([]*tree.Tree{leaf}, schedule.TreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Run(); !errors.Is(err, schedule.ErrDryPlan) {
		t.Errorf("Run of a dry plan: %v, want ErrDryPlan", err)
	}
}

// TestGenerateCap checks the node cap: a generator that always grows stops
// at exactly MaxNodes nodes, in breadth-first order, the same with any
// number of workers, and records every step it ran.
func TestGenerateCap(t *testing.T) {
	m := randomModel(t, tree.TopDownLSTM, 6, 5, 7, 7, 3)
	clear(m.Grow)
	m.GrowB[0], m.GrowB[1] = 0, 1 // always another child
	prog, err := schedule.NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	var first *schedule.Generated
	for _, w := range []int{1, 2, 5} {
		g, err := prog.Generate(2, schedule.GenerateOptions{MaxNodes: 11, MaxChildren: 3, MaxDepth: 6, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Words) != 11 || !g.Truncated {
			t.Fatalf("%d workers: %d nodes, truncated %v; want 11, true", w, len(g.Words), g.Truncated)
		}
		// Breadth-first with 3 children each: 1 root, 3, then 7 of the next 9.
		want := []int32{-1, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3}
		if !equalInts(g.Parents, want) {
			t.Fatalf("%d workers: parents %v, want %v", w, g.Parents, want)
		}
		if len(g.Plan.Steps) == 0 {
			t.Fatal("no steps recorded")
		}
		if first == nil {
			first = g
			continue
		}
		closeTo(t, "h", g.H, first.H, 0)
		if !equalInts(g.Words, first.Words) {
			t.Errorf("%d workers: words %v, 1 worker %v", w, g.Words, first.Words)
		}
	}
	// Depth cap: a chain model stops at MaxDepth levels.
	g, err := prog.Generate(1, schedule.GenerateOptions{MaxNodes: 1000, MaxChildren: 1, MaxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Words) != 4 || g.Truncated {
		t.Errorf("chain to depth 4: %d nodes, truncated %v", len(g.Words), g.Truncated)
	}
}
