//go:build !linux

package fuzzbound

import "testing"

func busyHelper(t *testing.T) { t.Skip("pins processes to a core with sched_setaffinity") }
