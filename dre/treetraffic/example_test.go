package treetraffic_test

import (
	"fmt"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/dre/treetraffic"
)

// ExampleSweep reports the DRE of a Binary TreeLSTM (embeddings 300,
// hidden 150, vocabulary 1000) on trees of 19 leaves of the three shapes
// of Jeong et al.'s Table 1, with a 1 MiB cache that cannot hold the inner
// weights U (900 KB) beside everything else: the recursive executor reads
// U for every inner node, the depth-batched one once per height.
func ExampleSweep() {
	rows, err := treetraffic.Sweep(treetraffic.SweepOptions{Vocab: 1000,
		DRE: dre.Options{Cache: cachesim.Config{Size: 1 << 20}}})
	if err != nil {
		panic(err)
	}
	for _, r := range rows {
		fmt.Printf("%-8s batch %2d height %4.1f %-13s DRE %5.2f\n", r.Shape, r.Batch, r.Height, r.Executor, r.DRE)
	}
	// Output:
	// balanced batch  1 height  5.0 recursive     DRE  4.39
	// balanced batch  1 height  5.0 depth_batched DRE  0.60
	// balanced batch 10 height  5.0 recursive     DRE 35.89
	// balanced batch 10 height  5.0 depth_batched DRE  2.35
	// balanced batch 25 height  5.0 recursive     DRE 68.82
	// balanced batch 25 height  5.0 depth_batched DRE  3.59
	// moderate batch  1 height  7.0 recursive     DRE  4.39
	// moderate batch  1 height  7.0 depth_batched DRE  0.60
	// moderate batch 10 height  7.1 recursive     DRE 41.98
	// moderate batch 10 height  7.1 depth_batched DRE  2.31
	// moderate batch 25 height  7.8 recursive     DRE 81.50
	// moderate batch 25 height  7.8 depth_batched DRE  4.15
	// linear   batch  1 height 18.0 recursive     DRE  0.66
	// linear   batch  1 height 18.0 depth_batched DRE  0.60
	// linear   batch 10 height 18.0 recursive     DRE  5.43
	// linear   batch 10 height 18.0 depth_batched DRE  1.20
	// linear   batch 25 height 18.0 recursive     DRE 10.42
	// linear   batch 25 height 18.0 depth_batched DRE  6.13
}
