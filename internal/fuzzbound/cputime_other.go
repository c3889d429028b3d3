//go:build !unix

package fuzzbound

import "time"

// processCPU cannot be read here: the CPU bound falls back to wall-clock
// time.
func processCPU() (time.Duration, bool) { return 0, false }
