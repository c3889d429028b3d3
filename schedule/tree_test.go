package schedule_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
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
// number of parts, run in turn or on a pool of two (where the host has
// two cores), and records every step it ran, each wave's parts on their
// workers.
func TestGenerateCap(t *testing.T) {
	m := randomModel(t, tree.TopDownLSTM, 6, 5, 7, 7, 3)
	clear(m.Grow)
	m.GrowB[0], m.GrowB[1] = 0, 1 // always another child
	prog, err := schedule.NewTreeProgram(m)
	if err != nil {
		t.Fatal(err)
	}
	opts := []schedule.GenerateOptions{{Workers: 1}, {Workers: 2}, {Workers: 5}}
	if runtime.GOMAXPROCS(0) >= 2 {
		pool, err := schedule.NewPool(schedule.PoolOptions{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		opts = append(opts, schedule.GenerateOptions{Workers: 2, Pool: pool})
	}
	var first *schedule.Generated
	for _, o := range opts {
		o.MaxNodes, o.MaxChildren, o.MaxDepth = 11, 3, 6
		w := o.Workers
		g, err := prog.Generate(2, o)
		if err != nil {
			t.Fatal(err)
		}
		// Waves of one chain (the root's) and of three (its children's;
		// MaxNodes stops the grandchildren's): the second on up to three
		// parts, each wave a phase.
		if got, want := g.Plan.Workers(), min(w, 3); got != want {
			t.Errorf("%d parts: steps on %d workers, want %d", w, got, want)
		}
		if last := g.Plan.Steps[len(g.Plan.Steps)-1].Phase; last != 2 {
			t.Errorf("%d parts: the last step in phase %d, want 2 (root, its chain, its children's)", w, last)
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

// sameBits reports the first element where got and want differ in their
// bits (so -0 and +0 differ too).
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: element %d is %v (%#08x), want %v (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			return
		}
	}
}

// TestTreeWordTable checks the word tables of Binary and Child-Sum
// TreeLSTMs (TreeProgram.WordTable): plans that read a Binary leaf's state
// or a Child-Sum node's W·e from them give the bits of plans that compute
// them, under both executors, one and several workers, at widths with
// scalar tails and at the benchmark's (E 300, H 150); the tables are built
// only up to MaxWordTable bytes; and the steps of a plan with tables say
// what runs (checkWordTableSteps), in the run and in the dry plan's walk.
func TestTreeWordTable(t *testing.T) {
	for _, cell := range []tree.Cell{tree.BinaryLSTM, tree.ChildSumLSTM} {
		for _, size := range [][2]int{{9, 19}, {19, 70}, {300, 150}} {
			E, H := size[0], size[1]
			t.Run(fmt.Sprintf("%v/E=%d/H=%d", cell, E, H), func(t *testing.T) {
				const V = 23
				m := randomModel(t, cell, E, H, 5, V, uint64(E*H))
				bytes := int64(V * 2 * H * 4) // h and c
				if cell == tree.ChildSumLSTM {
					bytes = int64(V * 4 * H * 4) // W·e
				}
				with, err := schedule.NewTreeProgramWith(m, schedule.TreeProgramOptions{MaxWordTable: bytes})
				if err != nil {
					t.Fatal(err)
				}
				without, err := schedule.NewTreeProgramWith(m, schedule.TreeProgramOptions{MaxWordTable: bytes - 1})
				if err != nil {
					t.Fatal(err)
				}
				never, _ := schedule.NewTreeProgramWith(m, schedule.TreeProgramOptions{MaxWordTable: -1})
				def, _ := schedule.NewTreeProgram(m)
				if !with.WordTable() || without.WordTable() || never.WordTable() || !def.WordTable() {
					t.Fatalf("word tables of %d bytes: at most %d bytes %v, %d %v, never %v, default %v; want true, false, false, true",
						bytes, bytes, with.WordTable(), bytes-1, without.WordTable(), never.WordTable(), def.WordTable())
				}
				dryM, _ := tree.NewModel(m.Config, true)
				dry, _ := schedule.NewTreeProgramWith(dryM, schedule.TreeProgramOptions{MaxWordTable: bytes})
				rng := rand.New(rand.NewPCG(uint64(E), uint64(H)))
				for round := range 3 {
					trees := schedule.RandomTrees(rng, cell, 1+rng.IntN(10), 12, V)
					for _, o := range []schedule.TreeOptions{
						{Executor: schedule.Recursive, Workers: 1, AllNodes: round != 1},
						{Executor: schedule.Recursive, Workers: 3, AllNodes: round != 1},
						{Executor: schedule.DepthBatched, Workers: 1, AllNodes: round != 1},
						{Executor: schedule.DepthBatched, Workers: 3, AllNodes: round != 1},
					} {
						what := fmt.Sprintf("round %d %v workers %d", round, o.Executor, o.Workers)
						ref, err := without.Plan(trees, o)
						if err != nil {
							t.Fatal(err)
						}
						tp, err := with.Plan(trees, o)
						if err != nil {
							t.Fatal(err)
						}
						if ref.WordTable || !tp.WordTable {
							t.Fatalf("%s: plans' WordTable %v without, %v with", what, ref.WordTable, tp.WordTable)
						}
						if err := ref.Run(); err != nil {
							t.Fatal(err)
						}
						if err := tp.Run(); err != nil {
							t.Fatal(err)
						}
						h0, c0, p0 := schedule.NodeOutputs(ref)
						h1, c1, p1 := schedule.NodeOutputs(tp)
						sameBits(t, what+" h", h1, h0)
						sameBits(t, what+" c", c1, c0)
						sameBits(t, what+" probs", p1, p0)
						dp, err := dry.Plan(trees, o)
						if err != nil {
							t.Fatal(err)
						}
						checkWordTableSteps(t, what, tp, trees, H)
						checkWordTableSteps(t, what+" (dry)", dp, trees, H)
					}
				}
			})
		}
	}
}

// checkWordTableSteps checks the steps of a plan with word tables: none
// reads the embedding, W or (Binary TreeLSTM) W's bias; every read of a
// table is whole rows (a Child-Sum leaf's in place: but its forget gate); a gather from "cell.leaf.h" or "cell.leaf.c" writes
// as many rows of h or c, a gather from "cell.W·embedding" rows of the
// gates (at least as many) that the next cell step reads (a cell step may read a single row
// in place); and each table is read at the rows of exactly the words of
// the batch's nodes that read one (Binary: the leaves; Child-Sum: every
// node with a word).
func checkWordTableSteps(t *testing.T, what string, tp *schedule.TreePlan, trees []*tree.Tree, H int) {
	t.Helper()
	binary := hasBuffer(tp.Plan, "cell.leaf.h")
	width := map[string]int64{"cell.W·embedding": int64(4 * H), "cell.leaf.h": int64(H), "cell.leaf.c": int64(H)}
	into := map[string]string{"cell.W·embedding": "gates", "cell.leaf.h": "h", "cell.leaf.c": "c"}
	want := map[int64]bool{}
	for _, tr := range trees {
		for _, n := range tr.Nodes {
			if n.Word >= 0 {
				want[int64(n.Word)] = true
			}
		}
	}
	read := map[string]map[int64]bool{}
	steps := tp.Plan.Steps
	for i := range steps {
		s := &steps[i]
		table, rows := "", 0
		for _, r := range s.Reads() {
			name := r.Buf.Name
			switch {
			case name == "cell.W.weight" || name == "embedding.weight" || binary && name == "cell.W.bias":
				t.Fatalf("%s: step %d (%v) reads %s", what, i, s.Kernel, name)
			case width[name] > 0:
				w := 4 * width[name]
				// A Child-Sum leaf reads its row in place but for the
				// forget gate (the last quarter), which only children use.
				leaf := s.Kernel == schedule.KTreeCell && name == "cell.W·embedding" && r.Len == 3*w/4
				if r.Len != w && !leaf || r.Count != 1 || r.Off%w != 0 {
					t.Fatalf("%s: step %d reads %+v of %s, want whole rows", what, i, r, name)
				}
				if read[name] == nil {
					read[name] = map[int64]bool{}
				}
				read[name][r.Off/w] = true
				table, rows = name, rows+1
			}
		}
		if table == "" || s.Kernel == schedule.KTreeCell && table == "cell.W·embedding" && rows == 1 {
			continue
		}
		if s.Kernel != schedule.KEmbed {
			t.Fatalf("%s: step %d (%v) reads %s", what, i, s.Kernel, table)
		}
		// Child-Sum nodes without a word get a zero row, read from nowhere.
		w := s.Writes()
		if len(w) != 1 || w[0].Buf.Name != into[table] || w[0].Bytes()%(4*width[table]) != 0 ||
			w[0].Bytes() < int64(rows)*4*width[table] || binary && w[0].Bytes() != int64(rows)*4*width[table] {
			t.Fatalf("%s: step %d gathers %d rows of %s into %+v", what, i, rows, table, w)
		}
		if table != "cell.W·embedding" {
			continue
		}
		cell := i + 1
		for cell < len(steps) && steps[cell].Kernel != schedule.KTreeCell {
			cell++
		}
		if cell == len(steps) {
			t.Fatalf("%s: step %d's gather is not followed by a cell", what, i)
		}
		found := false
		for _, r := range steps[cell].Reads() {
			// All of it, or for leaves the three gates before the forget
			// gate of every row.
			found = found || r.Buf == w[0].Buf && r.Off == w[0].Off && (r.Bytes() == w[0].Bytes() || 4*r.Bytes() == 3*w[0].Bytes())
		}
		if !found {
			t.Errorf("%s: step %d writes %+v, which its cell does not read", what, i, w[0])
		}
	}
	tables := []string{"cell.W·embedding"}
	if binary {
		tables = []string{"cell.leaf.h", "cell.leaf.c"}
	}
	for _, name := range tables {
		if len(read[name]) != len(want) {
			t.Errorf("%s: the plan reads %d rows of %s, the batch has %d words", what, len(read[name]), name, len(want))
		}
		for w := range read[name] {
			if !want[w] {
				t.Errorf("%s: the plan reads the row of word %d of %s, which no node has", what, w, name)
			}
		}
	}
}

func hasBuffer(p *schedule.Plan, name string) bool {
	for _, b := range p.Buffers {
		if b.Name == name {
			return true
		}
	}
	return false
}
