//go:build unix

package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Process is the CPU time (user and system, every thread) the process
// has used so far, or false where it cannot be read.
func Process() (time.Duration, bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
