package schedule_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"rnnserve/internal/benchcpu"
	"rnnserve/rnn/tree"
	"rnnserve/schedule"
)

// sstLike loads the SST-like benchmark trees (binary, 14..24 leaves, mean
// height ~9; written by scripts/torch_tree.py bench, which times PyTorch on
// the same trees) over a vocabulary of 5000 words.
func sstLike(tb testing.TB) ([]*tree.Tree, *tree.Vocab) {
	words := make([]string, 5000)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	v, err := tree.NewVocab(words, "")
	if err != nil {
		tb.Fatal(err)
	}
	var trees []*tree.Tree
	for _, line := range schedule.ReadLines(tb, "testdata/trees/sstlike.txt") {
		t, err := tree.ParseBracketed(line, tree.Options{Vocab: v, Arity: 2})
		if err != nil {
			tb.Fatal(err)
		}
		trees = append(trees, t)
	}
	return trees, v
}

// benchPool is a pool of GOMAXPROCS workers (set with one -cpu value a
// process: benchcpu) for the tree plans of a benchmark, closed when it
// ends, or nil on one core.
func benchPool(b *testing.B) *schedule.Pool {
	benchcpu.One(b)
	n := runtime.GOMAXPROCS(0)
	if n == 1 {
		return nil
	}
	// Unpinned, as cmd/serve makes the pools of tree plans.
	pool, err := schedule.NewPool(schedule.PoolOptions{Workers: n, NoPin: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// BenchmarkTreeLSTM runs a Binary TreeLSTM (embeddings 300, hidden 150,
// 5 classes at every node, vocabulary 5000) on SST-like trees at batch 1,
// 10 and 25 under both executors, on GOMAXPROCS workers (a pool of them
// beyond one), plan construction included, and reports trees/s.
// scripts/torch_tree.py bench times PyTorch on the same trees:
//
//	go test ./schedule -run '^$' -bench BenchmarkTreeLSTM -benchtime 2s -cpu 1   # and -cpu 2
//	/usr/bin/python3 scripts/torch_tree.py bench --threads 1   # and --threads 2
func BenchmarkTreeLSTM(b *testing.B) {
	trees, _ := sstLike(b)
	m := randomModel(b, tree.BinaryLSTM, 300, 150, 5, 5000, 1)
	prog, err := schedule.NewTreeProgram(m)
	if err != nil {
		b.Fatal(err)
	}
	pool := benchPool(b)
	for _, ex := range []schedule.TreeExecutor{schedule.Recursive, schedule.DepthBatched} {
		for _, B := range []int{1, 10, 25} {
			b.Run(fmt.Sprintf("executor=%v/batch=%d", ex, B), func(b *testing.B) {
				b.ReportAllocs()
				cpu := cpuMetric(b)
				k := 0
				for b.Loop() {
					if (k+1)*B > len(trees) {
						k = 0
					}
					tp, err := prog.Acquire(trees[k*B:(k+1)*B], schedule.TreeOptions{Executor: ex, AllNodes: true, Pool: pool})
					if err != nil {
						b.Fatal(err)
					}
					if err := tp.Run(); err != nil {
						b.Fatal(err)
					}
					tp.Release()
					k++
				}
				cpu()
				b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "trees/s")
			})
		}
	}
}

// BenchmarkTreeShapes times the recursive executor on the three shapes of
// Jeong et al.'s Table 1 (19 leaves) for a TreeRNN of hidden 150, on
// GOMAXPROCS workers, a new plan (Plan) for every batch, its buffers left
// to the garbage collector:
//
//	go test ./schedule -run '^$' -bench BenchmarkTreeShapes -benchtime 1s
func BenchmarkTreeShapes(b *testing.B) { treeShapes(b, false) }

// BenchmarkTreeShapesReused is BenchmarkTreeShapes with every batch's
// plan built by Acquire into the memory of one released before, as the
// server builds them: no fresh buffers to zero, no collections.
func BenchmarkTreeShapesReused(b *testing.B) { treeShapes(b, true) }

func treeShapes(b *testing.B, reuse bool) {
	m := randomModel(b, tree.TreeRNN, 150, 150, 5, 5000, 2)
	prog, err := schedule.NewTreeProgram(m)
	if err != nil {
		b.Fatal(err)
	}
	pool := benchPool(b)
	for _, shape := range []tree.Shape{tree.Balanced, tree.Moderate, tree.Linear} {
		for _, B := range []int{1, 25} {
			rng := rand.New(rand.NewPCG(1, 2))
			trees := make([]*tree.Tree, B)
			for i := range trees {
				trees[i] = tree.Binary(shape, 19, rng, func(int) int32 { return int32(rng.IntN(5000)) })
			}
			b.Run(strings.Join([]string{shape.String(), fmt.Sprintf("batch=%d", B)}, "/"), func(b *testing.B) {
				b.ReportAllocs()
				cpu := cpuMetric(b)
				opt := schedule.TreeOptions{Executor: schedule.Recursive, Pool: pool}
				for b.Loop() {
					build := prog.Plan
					if reuse {
						build = prog.Acquire
					}
					tp, err := build(trees, opt)
					if err != nil {
						b.Fatal(err)
					}
					if err := tp.Run(); err != nil {
						b.Fatal(err)
					}
					tp.Release() // nothing for a plan from Plan
				}
				cpu()
				b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "trees/s")
			})
		}
	}
}

// cpuMetric starts timing the process's CPU time; the function it
// returns reports it per iteration (cpu-ns/op: user and system time of
// every thread, the pool's helpers' spinning included), where the
// platform has it.
func cpuMetric(b *testing.B) func() {
	start, ok := schedule.ProcessCPU()
	return func() {
		if end, _ := schedule.ProcessCPU(); ok && b.N > 0 {
			b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}
