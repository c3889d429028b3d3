package main

import (
	"encoding/json"
	"fmt"
	"io"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/dre/sweep"
	"rnnserve/dre/treetraffic"
	"rnnserve/rnn/tree"
)

// cmdTrees runs the tree sweep: for balanced, moderately balanced and
// linear trees (the recursion paper's Table 1 shapes) at several batch
// sizes, the DRAM traffic and DRE of the recursive and the depth-batched
// executor's plans (dre/treetraffic).
func cmdTrees(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trees", "", "Models the memory traffic of tree-structured models (balanced, moderate and linear trees; recursive and depth-batched executors) and prints a Markdown table, or JSON with -json.", stderr)
	cell := fs.String("cell", "binary_treelstm", "binary tree cell: tree_rnn, rntn or binary_treelstm")
	hidden := fs.Int("hidden", 150, "hidden size")
	embed := fs.Int("embed", 300, "embedding size (TreeRNN and RNTN use the hidden size)")
	vocab := fs.Int("vocab", 5000, "vocabulary")
	leaves := fs.Int("leaves", 19, "leaves of every tree")
	cache := fs.String("cache", "12MiB", "fully associative LRU cache size")
	runs := fs.Int("runs", dre.DefaultRuns, "back-to-back inferences averaged")
	asJSON := fs.Bool("json", false, "print JSON rows instead of a table")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return usageErr("trees takes no arguments")
	}
	c, err := tree.ParseCell(*cell)
	if err != nil {
		return usageErr("%v", err)
	}
	size, err := sweep.ParseSize(*cache)
	if err != nil || size <= 0 {
		return usageErr("-cache %q: want a size such as 12MiB", *cache)
	}
	opt := treetraffic.SweepOptions{Cell: c, Hidden: *hidden, Embed: *embed, Vocab: *vocab, Leaves: *leaves,
		DRE: dre.Options{Cache: cachesim.Config{Size: size}, Runs: *runs}}
	if c == tree.TreeRNN || c == tree.RNTN {
		opt.Embed = 0 // their leaves take the hidden size
	}
	rows, err := treetraffic.Sweep(opt)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprintf(stdout, "%s, hidden %d, %d leaves, %s cache, %d runs\n\n", c, *hidden, *leaves, *cache, *runs)
	fmt.Fprintln(stdout, "| shape | batch | mean height | executor | DRAM bytes / inference | working set | DRE |")
	fmt.Fprintln(stdout, "|---|---:|---:|---|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(stdout, "| %s | %d | %.1f | %s | %.0f | %d | %.3g |\n", r.Shape, r.Batch, r.Height, r.Executor, r.AvgRW, r.WorkingSet.Total, r.DRE)
	}
	return nil
}
