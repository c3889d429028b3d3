package cputime

import (
	"runtime"
	"testing"
	"time"
)

// TestProcess: CPU time spent spinning shows up, and it never runs
// backwards.
func TestProcess(t *testing.T) {
	before, ok := Process()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no CPU time on Linux")
		}
		t.Skip("no process CPU time on", runtime.GOOS)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		n++
	}
	after, _ := Process()
	if after < before {
		t.Fatalf("CPU time ran backwards: %v then %v", before, after)
	}
	if after-before < 10*time.Millisecond {
		t.Fatalf("50 ms of spinning (%d loops) counted %v of CPU time", n, after-before)
	}
}
