//go:build linux

package schedule

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// workerCPUs assigns the CPUs this process may run on to n workers in
// order, wrapping around when there are fewer CPUs than workers.
func workerCPUs(n int) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var allowed []int
	for c := 0; c < len(set)*64 && len(allowed) < n; c++ {
		if set.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	if len(allowed) == 0 {
		return nil
	}
	cpus := make([]int, n)
	for w := range cpus {
		cpus[w] = allowed[w%len(allowed)]
	}
	return cpus
}

// pinThread binds the calling OS thread (locked by the caller) to cpu.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("schedule: pin worker thread to CPU %d: %w", cpu, err)
	}
	return nil
}

// pinCaller binds the calling OS thread (locked by the caller) to cpu and
// returns a function that restores its previous CPU set.
func pinCaller(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return func() {}, fmt.Errorf("schedule: read caller's CPU set: %w", err)
	}
	if err := pinThread(cpu); err != nil {
		return func() {}, err
	}
	return func() { _ = unix.SchedSetaffinity(0, &old) }, nil
}
