package treetraffic

import (
	"testing"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
)

// TestSweepShapes sweeps the three shapes with a cache smaller than the
// inner weights U (5H×2H floats = 40 KiB at H = 32): the recursive executor
// reads U once per inner node, the depth-batched one once per height, so
// depth batching must move fewer bytes wherever a height holds several
// nodes, and the same (one node per height) for linear trees at batch 1.
// With a cache that holds everything, steady runs move nothing and DRE is
// near zero.
func TestSweepShapes(t *testing.T) {
	small := SweepOptions{Hidden: 32, Embed: 32, Vocab: 100, Leaves: 8, Batches: []int{1, 4},
		DRE: dre.Options{Cache: cachesim.Config{Size: 16 << 10}}}
	rows, err := Sweep(small)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3*2*2 {
		t.Fatalf("%d rows, want 12", len(rows))
	}
	by := map[[3]any]Row{}
	for _, r := range rows {
		by[[3]any{r.Shape, r.Batch, r.Executor}] = r
		if r.DRE <= 0 || r.WorkingSet.Total <= 0 || r.AvgRW <= 0 {
			t.Errorf("%s b%d %s: DRE %v, working set %d, AvgRW %v", r.Shape, r.Batch, r.Executor, r.DRE, r.WorkingSet.Total, r.AvgRW)
		}
		t.Logf("%-8s b%-2d %-13s height %4.1f  nodes %3d  AvgRW %9.0f  WS %7d  DRE %.2f", r.Shape, r.Batch, r.Executor, r.Height, r.Nodes, r.AvgRW, r.WorkingSet.Total, r.DRE)
	}
	for _, shape := range []string{"balanced", "moderate", "linear"} {
		rec, dep := by[[3]any{shape, 4, "recursive"}], by[[3]any{shape, 4, "depth_batched"}]
		if !(dep.AvgRW < rec.AvgRW) {
			t.Errorf("%s batch 4: depth-batched moves %v bytes, recursive %v: want fewer", shape, dep.AvgRW, rec.AvgRW)
		}
	}
	if b, l := by[[3]any{"balanced", 1, "depth_batched"}], by[[3]any{"linear", 1, "depth_batched"}]; !(b.AvgRW < l.AvgRW) {
		t.Errorf("batch 1 depth-batched: balanced %v bytes, linear %v: want fewer for balanced (4 heights against 8)", b.AvgRW, l.AvgRW)
	}
	big := small
	big.DRE = dre.Options{Cache: cachesim.Config{Size: 64 << 20}}
	rows, err = Sweep(big)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Steady.Read != 0 || r.DRE > 0.05 {
			t.Errorf("%s b%d %s with a 64 MiB cache: steady reads %d, DRE %v", r.Shape, r.Batch, r.Executor, r.Steady.Read, r.DRE)
		}
	}
}

// TestAnalyzeGenerated analyses the steps a top-down generation recorded.
func TestAnalyzeGenerated(t *testing.T) {
	m, err := tree.NewModel(tree.Config{Cell: tree.TopDownLSTM, Vocab: 20, Embed: 16, Hidden: 16, Classes: 20}, false)
	if err != nil {
		t.Fatal(err)
	}
	models.RandomizeTree(m, 5)
	m.GrowB[1] = 5 // grow eagerly
	prog, err := schedule.NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	g, err := prog.Generate(3, schedule.GenerateOptions{MaxNodes: 20, MaxChildren: 3, MaxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(m, g.Plan, Batch{Executor: "recursive", Trees: 1, Nodes: len(g.Words), Words: len(g.Words)}, dre.Options{Runs: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Steps != len(g.Plan.Steps) || r.Cold.Read < r.WorkingSet.Weights {
		t.Errorf("%d steps (plan %d); cold reads %d bytes, weights %d", r.Steps, len(g.Plan.Steps), r.Cold.Read, r.WorkingSet.Weights)
	}
}

// TestWordTableWorkingSet checks the working set of a Binary TreeLSTM plan
// that reads its leaves' states from the word tables: the tables instead
// of the embedding, the weights without W and its bias, and nothing per
// word beside the nodes' states.
func TestWordTableWorkingSet(t *testing.T) {
	const V, E, H, C = 50, 12, 10, 3
	m, err := tree.NewModel(tree.Config{Cell: tree.BinaryLSTM, Vocab: V, Embed: E, Hidden: H, Classes: C}, true)
	if err != nil {
		t.Fatal(err)
	}
	trees := []*tree.Tree{tree.Binary(tree.Balanced, 4, nil, func(i int) int32 { return int32(i) })}
	for _, table := range []bool{true, false} {
		max := int64(0)
		if !table {
			max = -1
		}
		prog, err := schedule.NewTreeProgramWith(m, schedule.TreeProgramOptions{MaxWordTable: max})
		if err != nil {
			t.Fatal(err)
		}
		tp, err := prog.Plan(trees, schedule.TreeOptions{Executor: schedule.DepthBatched, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		r, err := AnalyzePlan(m, tp, dre.Options{Runs: 2})
		if err != nil {
			t.Fatal(err)
		}
		emb, weights, word := int64(4*V*E), m.WeightBytes()-4*V*E, int64(E)
		if table { // the leaves' h and c; neither W nor its bias
			emb, weights, word = 4*V*2*H, m.WeightBytes()-4*V*E-4*3*H*E-4*3*H, 0
		}
		inter := 4 * (4*word + 7*H*2 + 1*C)
		ws := r.WorkingSet
		if r.WordTable != table || ws.Embedding != emb || ws.Weights != weights || ws.Intermediate != inter {
			t.Errorf("word table %v: report's %v, embedding %d, weights %d, intermediate %d; want %d, %d, %d",
				table, r.WordTable, ws.Embedding, ws.Weights, ws.Intermediate, emb, weights, inter)
		}
	}
}
