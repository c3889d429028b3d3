//go:build !linux

package schedule

// Without sched_setaffinity the workers run unpinned: each is still locked
// to its own OS thread, and the OS keeps busy threads on separate cores.

func workerCPUs(n int) []int { return nil }

func pinThread(cpu int) error { return nil }

func pinCaller(cpu int) (func(), error) { return func() {}, nil }
