package treetraffic_test

import (
	"fmt"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/dre/treetraffic"
)

// ExampleSweep reports the DRE of a Binary TreeLSTM (embeddings 300,
// hidden 150, vocabulary 1000) on trees of 19 leaves of the three shapes
// of Jeong et al.'s Table 1, with a 1 MiB cache, as the plans run (each
// leaf reads its state, h and c, from the word tables, computed for every
// word when the program was built) and as the recursion paper's executors
// run them (a product by the leaf weights W, 540 KB, per leaf or per
// height of leaves, then the leaf's gates). Without the tables the cache
// cannot hold the inner weights U (900 KB) beside W: the recursive
// executor reads U again for every inner node, the depth-batched one once
// per height. With them U stays in the cache. (Each DRE is over its plan's
// working set: with the tables, the tables replace the embedding, W and
// its bias; see the package documentation.)
func ExampleSweep() {
	opt := treetraffic.SweepOptions{Vocab: 1000, DRE: dre.Options{Cache: cachesim.Config{Size: 1 << 20}}}
	rows, err := treetraffic.Sweep(opt)
	if err != nil {
		panic(err)
	}
	opt.MaxWordTable = -1
	products, err := treetraffic.Sweep(opt)
	if err != nil {
		panic(err)
	}
	fmt.Println("shape    batch height executor      DRE table  products")
	for i, r := range rows {
		fmt.Printf("%-8s %5d %6.1f %-13s %9.2f %9.2f\n", r.Shape, r.Batch, r.Height, r.Executor, r.DRE, products[i].DRE)
	}
	// Output:
	// shape    batch height executor      DRE table  products
	// balanced     1    5.0 recursive          0.00      4.31
	// balanced     1    5.0 depth_batched      0.00      0.60
	// balanced    10    5.0 recursive          0.44     35.27
	// balanced    10    5.0 depth_batched      2.42      2.35
	// balanced    25    5.0 recursive          0.88     67.64
	// balanced    25    5.0 depth_batched      3.60      3.59
	// moderate     1    7.0 recursive          0.00      4.31
	// moderate     1    7.0 depth_batched      0.00      0.60
	// moderate    10    7.1 recursive          0.45     41.37
	// moderate    10    7.1 depth_batched      2.35      2.31
	// moderate    25    7.8 recursive          0.88     80.34
	// moderate    25    7.8 depth_batched      4.36      4.15
	// linear       1   18.0 recursive          0.00      0.58
	// linear       1   18.0 depth_batched      0.00      0.60
	// linear      10   18.0 recursive          0.45      4.77
	// linear      10   18.0 depth_batched      0.90      1.20
	// linear      25   18.0 recursive          0.88      9.15
	// linear      25   18.0 depth_batched      7.02      6.13
}
