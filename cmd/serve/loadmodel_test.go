package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestLoadModelTwice: a model -load-model names twice loads once.
func TestLoadModelTwice(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "model.yaml"), []byte("cell: lstm\ninput_size: 8\nhidden_size: 8\nembedding: {vocab_size: 256}\nseed: 1\n"), 0o644)
	cfg, _, err := parseConfig([]string{"-model-repository", dir, "-model-control-mode", "explicit", "-load-model", "a", "-load-model", "a"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, _, entries, failed, err := loadModels(slog.New(slog.DiscardHandler), cfg)
	if err != nil || len(entries) != 1 || len(failed) != 0 {
		t.Errorf("%d loaded, %d failed, %v; want a loaded once", len(entries), len(failed), err)
	}
}
