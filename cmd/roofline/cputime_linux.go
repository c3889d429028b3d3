package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadClock returns a clock of the calling thread: its CPU time with
// -clock cpu (time the thread ran, so other tenants that take the core
// away do not count), else the wall clock.
func threadClock(cpu bool) func() time.Duration {
	if !cpu {
		start := time.Now()
		return func() time.Duration { return time.Since(start) }
	}
	return func() time.Duration {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
}
