//go:build purego || !amd64

package main

// Without the assembly there is no instruction of known latency to time,
// so the clock is not estimated (coreClock returns 0).
func addChain(n int) int { return 0 }

const chainAdds = 0
