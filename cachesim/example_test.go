package cachesim_test

import (
	"fmt"

	"rnnserve/cachesim"
)

// Six requests to a fully associative cache of two 64-byte lines.
func Example() {
	c, err := cachesim.NewLRU(cachesim.Config{Size: 128, Ways: cachesim.FullyAssociative})
	if err != nil {
		panic(err)
	}
	c.Read(0, 64)   // line 0: miss
	c.Write(64, 8)  // line 1: miss (write-allocate), now dirty
	c.Read(0, 1)    // line 0: hit
	c.Read(128, 64) // line 2: miss, evicts dirty line 1
	c.Write(60, 8)  // line 0: hit, now dirty; line 1: miss, evicts line 2
	c.Read(130, 4)  // line 2: miss, evicts dirty line 0
	s := c.Stats()
	fmt.Printf("%d line accesses: %d hits, %d misses (%d on writes), %d write-backs\n",
		s.Accesses, s.Hits, s.Misses, s.WriteMisses, s.WriteBacks)
	fmt.Printf("DRAM: %d bytes read, %d bytes written\n", s.ReadBytes(), s.WriteBytes())
	c.Flush() // line 1 is still dirty
	fmt.Printf("after Flush: %d bytes written\n", c.Stats().WriteBytes())
	// Output:
	// 7 line accesses: 2 hits, 5 misses (2 on writes), 2 write-backs
	// DRAM: 320 bytes read, 128 bytes written
	// after Flush: 192 bytes written
}

// One pass of a profile gives the misses of every fully associative LRU
// size; OPT gives the fewest any replacement policy can have.
func ExampleProfile() {
	p, err := cachesim.NewProfile(64)
	if err != nil {
		panic(err)
	}
	t, err := cachesim.NewTrace(64)
	if err != nil {
		panic(err)
	}
	// The reference string of a classic textbook example, one line each.
	for _, line := range []int64{7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1} {
		p.Read(line*64, 64)
		t.Read(line*64, 64)
	}
	for lines := int64(1); lines <= 5; lines++ {
		fmt.Printf("%d lines: LRU %2d misses, OPT %2d\n",
			lines, p.Stats(lines*64).Misses, cachesim.OPT(t, lines*64).Misses)
	}
	// Output:
	// 1 lines: LRU 20 misses, OPT 20
	// 2 lines: LRU 17 misses, OPT 13
	// 3 lines: LRU 12 misses, OPT  9
	// 4 lines: LRU  8 misses, OPT  8
	// 5 lines: LRU  7 misses, OPT  7
}
