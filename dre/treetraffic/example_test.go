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
// leaf reads its row of the word table, W·e precomputed for every word)
// and as the recursion paper's executors run them (a product by the leaf
// weights W, 540 KB, per leaf or per height of leaves). Without the table
// the cache cannot hold the inner weights U (900 KB) beside W: the
// recursive executor reads U again for every inner node, the
// depth-batched one once per height. With it U stays in the cache. (Each
// DRE is over its plan's working set: with the table, the table replaces
// the embedding and W; see the package documentation.)
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
	// balanced     1    5.0 recursive          0.09      4.39
	// balanced     1    5.0 depth_batched      0.00      0.60
	// balanced    10    5.0 recursive          0.80     35.89
	// balanced    10    5.0 depth_batched      1.97      2.35
	// balanced    25    5.0 recursive          1.50     68.82
	// balanced    25    5.0 depth_batched      2.86      3.59
	// moderate     1    7.0 recursive          0.10      4.39
	// moderate     1    7.0 depth_batched      0.00      0.60
	// moderate    10    7.1 recursive          0.80     41.98
	// moderate    10    7.1 depth_batched      1.94      2.31
	// moderate    25    7.8 recursive          1.50     81.50
	// moderate    25    7.8 depth_batched      3.41      4.15
	// linear       1   18.0 recursive          0.09      0.66
	// linear       1   18.0 depth_batched      0.00      0.60
	// linear      10   18.0 recursive          0.80      5.43
	// linear      10   18.0 depth_batched      0.86      1.20
	// linear      25   18.0 recursive          1.50     10.42
	// linear      25   18.0 depth_batched      5.21      6.13
}
