package models

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/childtest"
)

// TestHostileHelper opens $MODEL_FILE in a child process of
// TestHostileFiles and prints the refusal.
func TestHostileHelper(t *testing.T) {
	childtest.Role(t)
	p := os.Getenv("MODEL_FILE")
	start := time.Now()
	var err error
	if data, _ := os.ReadFile(p); strings.HasSuffix(p, ".yaml") && IsTreeSpec(data) {
		_, err = LoadTree(p)
	} else {
		_, err = Open(p)
	}
	if err == nil {
		t.Fatal("opened")
	}
	fmt.Printf("refused in %v: %v\n", time.Since(start), err)
}

// TestHostileFiles opens each file of testdata/hostile (written by
// scripts/model_files.py) in a child process, where a crash, a hang or an
// exhausted memory would show without taking the tests down: each is
// refused, naming the file and saying what is wrong, within seconds and
// with a peak resident memory of 64 MiB plus 48 bytes per byte of file.
func TestHostileFiles(t *testing.T) {
	data, err := os.ReadFile("testdata/hostile/expect.json")
	if err != nil {
		t.Fatal(err)
	}
	var expect map[string]string
	if err := json.Unmarshal(data, &expect); err != nil {
		t.Fatal(err)
	}
	for name, says := range expect {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join("testdata", "hostile", name)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			r := childtest.Run(t, "TestHostileHelper", "open", time.Minute, "MODEL_FILE="+p)
			out := r.Output
			if i := strings.Index(out, "refused in "); i >= 0 {
				out = out[i:]
			}
			if r.Code != 0 || !strings.Contains(out, says) || !strings.Contains(out, name) {
				t.Fatalf("exit %d after %v, want a refusal naming %s and saying %q:\n%.2000s", r.Code, r.Elapsed, name, says, r.Output)
			}
			limit := 64<<20 + 48*fi.Size()
			t.Logf("%d bytes: peak RSS %d MiB, %v: %.300s", fi.Size(), r.MaxRSS>>20, r.Elapsed.Round(time.Millisecond), out)
			if !childtest.Race && r.MaxRSS > limit {
				t.Errorf("peak RSS %d MiB, limit %d MiB", r.MaxRSS>>20, limit>>20)
			}
			if r.Elapsed > 20*time.Second {
				t.Errorf("took %v", r.Elapsed)
			}
			if len(out) > 4000 {
				t.Errorf("a refusal of %d bytes", len(out))
			}
		})
	}
}
