// Command write writes the hostile ONNX files of onnxbuild.All into a
// folder, one file each (the external data of shared_external beside its
// model in a folder of its own), and the 20,000 dangling nodes in order,
// which load:
//
//	go run ./models/internal/onnxbuild/write DIR
//	scripts/hostile_figures.sh COMMIT DIR
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"rnnserve/models/internal/onnxbuild"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: write DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	write := func(name string, data []byte) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for _, h := range onnxbuild.All() {
		if h.External != nil {
			write(filepath.Join(h.Name, "model.onnx"), h.Data)
			write(filepath.Join(h.Name, "weights.data"), h.External)
			continue
		}
		write(h.Name+".onnx", h.Data)
	}
	write("dangling_forward.onnx", onnxbuild.DanglingForward(20000))
}
