package rnn

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"rnnserve/internal/hugepage"
)

// TestNetworkMemory: NewNetwork maps each matrix of hugepage.MinBytes or
// more on huge pages (where the host maps them), owned by the network's
// arena, which its layers share; smaller ones, a dry network's and all of
// them with mapping off stay on the heap.
func TestNetworkMemory(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	thp := runtime.GOOS == "linux" && err == nil && !strings.Contains(string(mode), "[never]")
	// W_hh 3072×1024 (12 MiB) in both layers, W_ih 3072×8 in the first
	// and 3072×1024 in the second, head 4×1024, embedding 2048×8: three
	// matrices over the bound.
	cfg := Config{Cell: GRU, Input: 8, Hidden: 1024, Layers: 2, Vocab: 2048, HeadOut: 4}
	for _, on := range []bool{true, false} {
		was := hugepage.Enable(on)
		n, err := NewNetwork(cfg, false)
		hugepage.Enable(was)
		if err != nil {
			t.Fatal(err)
		}
		mem := n.Memory()
		for k, dirs := range n.Layers {
			l := dirs[0]
			if l.Memory() != mem || mem == nil {
				t.Fatalf("layer %d's arena is not the network's", k)
			}
			if mem.Holds(l.Whh) != (on && thp) || mem.Holds(l.Wih) != (k == 1 && on && thp) || mem.Holds(l.Bih) {
				t.Errorf("mapping %v, layer %d: W_hh mapped %v, W_ih %v, b_ih %v", on, k, mem.Holds(l.Whh), mem.Holds(l.Wih), mem.Holds(l.Bih))
			}
		}
		want := int64(0)
		if on && thp {
			want = 3 * 3072 * 1024 * 4
		}
		if mem.Holds(n.HeadW) || mem.Holds(n.Embedding) || mem.Mapped() != want {
			t.Errorf("mapping %v: %d bytes mapped, want %d (two W_hh, one W_ih)", on, mem.Mapped(), want)
		}
	}
	dry, err := NewNetwork(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Memory() != nil {
		t.Error("a dry network has an arena")
	}
}
