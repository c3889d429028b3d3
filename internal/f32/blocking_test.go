package f32

import (
	"testing"

	"rnnserve/internal/host"
)

// amdBlocking is the blocking on the project's AMD host (Zen 4: 32 KiB
// L1d, 1 MiB L2 per core, 32 MiB L3), which the tests that check a rule
// at given sizes assume, whatever host runs them.
var amdBlocking = newBlocking(&host.Description{Caches: []host.Cache{
	{Level: 1, Type: "Data", Bytes: 32 << 10, Private: true},
	{Level: 2, Type: "Unified", Bytes: 1 << 20, Private: true},
	{Level: 3, Type: "Unified", Bytes: 32 << 20},
}})

// withBlocking makes the kernels block by b until the test ends.
func withBlocking(t testing.TB, b blocking) {
	saved := blocks
	blocks = func() blocking { return b }
	t.Cleanup(func() { blocks = saved })
}

// TestBlocking checks the blocking at the project's two kinds of host: on
// the AMD one the sizes the kernels were measured with, on an Intel Xeon
// (48 KiB L1d, 2 MiB L2, 105 MiB L3) the same fractions of its caches;
// and that with no cache information the defaults give the AMD's L1d and
// L2 fractions.
func TestBlocking(t *testing.T) {
	xeon := newBlocking(&host.Description{Caches: []host.Cache{
		{Level: 1, Type: "Data", Bytes: 48 << 10, Private: true},
		{Level: 1, Type: "Instruction", Bytes: 32 << 10, Private: true},
		{Level: 2, Type: "Unified", Bytes: 2 << 20, Private: true},
		{Level: 3, Type: "Unified", Bytes: 105 << 20},
	}})
	for _, c := range []struct {
		name      string
		got, want blocking
	}{
		{"AMD", amdBlocking, blocking{wBlock: 16 << 10, pull: 8 << 20, once: 256 << 10, packBlock: 128 << 10, nearK: 744, panelK: 513}},
		{"Xeon", xeon, blocking{wBlock: 24 << 10, pull: 105 << 18, once: 512 << 10, packBlock: 256 << 10, nearK: 1117, panelK: 769}},
		{"unknown", newBlocking(&host.Description{}), blocking{wBlock: 16 << 10, pull: 3 << 20, once: 256 << 10, packBlock: 128 << 10, nearK: 744, panelK: 513}},
	} {
		if c.got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
	withBlocking(t, amdBlocking)
	if wBlock(64) != 48 || wBlock(1<<20) != 24 || wBlock(1000) != 24 {
		t.Errorf("AMD wBlock: %d %d %d", wBlock(64), wBlock(1<<20), wBlock(1000))
	}
	withBlocking(t, xeon)
	if wBlock(64) != 96 || wBlock(1000) != 24 {
		t.Errorf("Xeon wBlock: %d %d", wBlock(64), wBlock(1000))
	}
	if h := newBlocking(host.Get()); h.wBlock <= 0 || h.pull <= 0 || h.once <= 0 || h.packBlock <= 0 {
		t.Errorf("this host: %+v", h)
	}
}
