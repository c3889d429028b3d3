//go:build !linux

package main

import "time"

// threadClock returns the wall clock: thread CPU time is read on Linux
// only.
func threadClock(bool) func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}
