package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseStatCPU: utime and stime are counted from the last ')', so a
// command name with spaces and parentheses does not shift them, and a
// short or malformed line is an error.
func TestParseStatCPU(t *testing.T) {
	// proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime ...
	line := "4242 (node (x) ) y) S 1 4242 4242 0 -1 4194560 9000 0 12 0 250 75 3 4 20 0 11 0 123 456 789\n"
	got, err := parseStatCPU([]byte(line), 10*time.Millisecond)
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("got %v, %v; want 3.25s (325 ticks of 10ms; children's 3+4 not counted)", got, err)
	}
	for _, bad := range []string{
		"", "4242 node S 1 2 3", "4242 (node) S 1 4242 4242 0 -1 4194560 9000 0 12 0 250",
		"4242 (node) S 1 4242 4242 0 -1 4194560 9000 0 12 0 2x5 75 3 4",
		"4242 (node) S 1 4242 4242 0 -1 4194560 9000 0 12 0 -1 75 3 4",
	} {
		if _, err := parseStatCPU([]byte(bad), time.Millisecond); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// TestProcCPU reads a stat file under a root of its own, a missing
// process is an error, and a request count of 0 gives "-".
func TestProcCPU(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc", "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat := "7 (serve) R 1 7 7 0 -1 0 0 0 0 0 100 50 0 0 20 0 3 0 1 2 3\n"
	if err := os.WriteFile(filepath.Join(root, "proc", "7", "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := procCPU(root, 7, 10*time.Millisecond); err != nil || d != 1500*time.Millisecond {
		t.Errorf("got %v, %v; want 1.5s", d, err)
	}
	if _, err := procCPU(root, 8, 10*time.Millisecond); err == nil {
		t.Error("a missing process was read")
	}
	if d := perRequest(2*time.Second, 4000); d != "500" {
		t.Errorf("2s over 4000 requests: %s µs, want 500", d)
	}
	if d := perRequest(time.Second, 0); !strings.Contains(d, "-") {
		t.Errorf("no requests: %q, want -", d)
	}
}
