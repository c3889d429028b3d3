package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestProcCPULive: this process's CPU time in /proc grows by at least
// most of what a busy loop spends, as getrusage counts it.
func TestProcCPULive(t *testing.T) {
	tick, err := clockTick()
	if err != nil || tick <= 0 || tick > time.Second {
		t.Fatalf("clock tick %v, %v", tick, err)
	}
	before, err := procCPU("/", os.Getpid(), tick)
	if err != nil {
		t.Fatal(err)
	}
	spin := 300 * time.Millisecond
	start := rusageCPU(t)
	x := 0
	for rusageCPU(t)-start < spin {
		x++
	}
	after, err := procCPU("/", os.Getpid(), tick)
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts whole ticks; allow two of them and a tenth.
	if got := after - before; got < spin*9/10-2*tick {
		t.Errorf("a %v busy loop (%d turns) raised the process's CPU time by %v", spin, x, got)
	}
}

func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
