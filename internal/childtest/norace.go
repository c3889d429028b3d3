//go:build !race

package childtest

// Race is true when the race detector is on: its shadow memory counts in
// MaxRSS, so peak-memory bounds do not hold under it.
const Race = false
