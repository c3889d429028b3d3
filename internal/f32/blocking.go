package f32

import (
	"sync"

	"rnnserve/internal/host"
)

// blocking is the sizes the kernels block their products by, set from
// the host's caches (internal/host) so that they hold on CPUs other than
// the one they were measured on; docs/data/host-tuning.md has the
// measurements behind each fraction on the project's AMD host (32 KiB
// L1d, 1 MiB L2, 32 MiB L3).
type blocking struct {
	// wBlock is the bytes of W rows GemmNT keeps in cache while every
	// group of A rows passes them (more than four rows): half a core's
	// L1d, so that a block of short rows and the A chunks that meet it
	// stay in L1 (long rows' blocks of 24 stay in L2).
	wBlock int
	// pull is the size above which a W comes from DRAM, or from an L3
	// it shares with the rest of a step, so that GemmNT lets the first
	// of a few rows pull each block in (pulls): a quarter of the last
	// level cache. Below it the extra pass costs.
	pull int
	// once is the size below which a W read once per inference (GemmNTOnce)
	// stays in a core's L2 until the next one, so that the pull would
	// only regroup its rows: a quarter of L2. A packed W above it, which
	// comes from L3 or DRAM, is prefetched block by block when 8 to 16
	// rows share it (gemmPackedAsm).
	once int
	// packBlock is the bytes of a packed W that several groups of rows
	// pass in turn while L2 holds it: an eighth of L2.
	packBlock int
	// nearK is the longest rows (k) for which GemmNTPackedNear's groups
	// take a packed W straight from the cache it lies in: a panel's eight
	// rows and a group's three rows of A, all k long, fill L1d. With
	// longer rows they no longer meet in L1 and the first row's pull pays
	// again (AMD's Zen 5, ten rows, W in L3: the groups took 0.94-0.99 of
	// the pull's time at rows of 512 to 1024, the same at 1152, 1.02-1.04
	// from 1280 to 2048, BenchmarkNearRows; docs/data/host-tuning.md).
	nearK int
	// panelK is the shortest rows (k) for which a packed W's panel, eight
	// rows, fills more than half of L1d: from there to nearK the AVX-512
	// products take many rows of A panel by panel (passGroups).
	panelK int
}

func newBlocking(d *host.Description) blocking {
	return blocking{
		wBlock:    int(d.L1D() / 2),
		pull:      int(d.L3() / 4),
		once:      int(d.L2() / 4),
		packBlock: int(d.L2() / 8),
		nearK:     int(d.L1D() / (4 * (8 + 3))),
		panelK:    int(d.L1D()/(2*4*8)) + 1,
	}
}

// blocks is this host's blocking, worked out on the first call; tests
// replace it to check the rules at another host's sizes.
var blocks = sync.OnceValue(func() blocking { return newBlocking(host.Get()) })
