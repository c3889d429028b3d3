package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestHugePagesSetting serves a model with a 16 MiB W_hh with the default
// setting and with -huge-pages off: on (where the kernel offers
// transparent huge pages) its matrices are mapped, the gauge counting at
// least that W_hh, and held once: the Go heap in use is smaller than that
// W_hh (the network's matrices are not on the heap as well); off nothing
// is mapped.
func TestHugePagesSetting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	thp := runtime.GOOS == "linux" && err == nil && !strings.Contains(string(mode), "[never]")
	repo := t.TempDir()
	if err := os.Mkdir(filepath.Join(repo, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := "cell: lstm\ninput_size: 8\nhidden_size: 1024\nnum_layers: 1\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: 1\n"
	if err := os.WriteFile(filepath.Join(repo, "big", "model.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	const whh = 4 * 1024 * 1024 * 4
	bin := buildServe(t)
	gauge := regexp.MustCompile(`(?m)^rnnserve_hugepage_mapped_bytes (\S+)$`)
	heapInuse := regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)$`)
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, thp},
		{[]string{"-huge-pages", "off"}, false},
	} {
		args := append([]string{"-listen", "127.0.0.1:0", "-grpc-listen", "off", "-model-repository", repo}, c.args...)
		// A low GOGC keeps the heap in use near the live heap.
		srv := startServe(t, bin, []string{"GOGC=10"}, args...)
		body := getBody(t, srv.base+"/metrics")
		m, h := gauge.FindStringSubmatch(body), heapInuse.FindStringSubmatch(body)
		if m == nil || h == nil {
			t.Fatalf("%v: no rnnserve_hugepage_mapped_bytes or go_memstats_heap_inuse_bytes in /metrics", c.args)
		}
		mapped, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		heap, err := strconv.ParseFloat(h[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.want && mapped < whh:
			t.Errorf("%v: %.0f bytes on huge pages, want at least the %d-byte W_hh", c.args, mapped, whh)
		case c.want && heap >= whh:
			t.Errorf("%v: %.0f bytes on huge pages and %.0f of Go heap in use, want less heap than the %d-byte W_hh", c.args, mapped, heap, whh)
		case !c.want && mapped != 0:
			t.Errorf("%v: %.0f bytes on huge pages, want none", c.args, mapped)
		}
		t.Logf("%v: %.0f bytes on huge pages, %.0f of Go heap in use", c.args, mapped, heap)
		stopServe(t, srv)
	}
}
