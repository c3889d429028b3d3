// Package cputime reads the CPU time the process has used: what the fuzz
// bound (internal/fuzzbound) limits an input by and what the benchmarks
// report beside wall time (cpu-ns/op), so that a machine busy with other
// work does not count against the code measured.
package cputime
