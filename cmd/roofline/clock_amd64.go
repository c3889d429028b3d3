//go:build !purego

package main

// addChain runs n iterations of eight dependent integer adds and returns
// their sum, 8n: 8n cycles of a core whose add has one cycle of latency
// (every x86-64 core since the first).
//
//go:noescape
func addChain(n int) int

// chainAdds is addChain's adds per iteration.
const chainAdds = 8
