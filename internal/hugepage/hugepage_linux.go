package hugepage

import (
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// thp says whether the kernel gives huge pages to a mapping advised
// MADV_HUGEPAGE: its THP mode (enabled) is "always" or "madvise", not
// "never", and THP is there at all.
var thp = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && thpMode(string(b))
})

// thpMode says whether a THP mode file's text ("always [madvise] never")
// selects a mode that honours MADV_HUGEPAGE.
func thpMode(s string) bool {
	return strings.Contains(s, "[always]") || strings.Contains(s, "[madvise]")
}

// mapHuge maps n bytes (rounded up to whole 4 KiB pages) at a 2 MiB
// boundary, advises MADV_HUGEPAGE and ties the mapping to owner; nil if
// the host has no huge pages to give or the kernel refuses the mapping
// or the advice.
func mapHuge[T any](owner *T, n int) []byte {
	if !thp() {
		return nil
	}
	size := uintptr(n+4095) &^ 4095
	pace(int64(size))
	base, err := unix.MmapPtr(-1, 0, nil, size+Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	// Keep [start, start+size) and give the rest back, so that only
	// whole huge pages can be huge and no address is held twice.
	head := (Size - uintptr(base)%Size) % Size
	start := unsafe.Add(base, head)
	if head > 0 {
		unix.MunmapPtr(base, head)
	}
	if tail := Size - head; tail > 0 {
		unix.MunmapPtr(unsafe.Add(start, size), tail)
	}
	b := unsafe.Slice((*byte)(start), size)
	if unix.Madvise(b, unix.MADV_HUGEPAGE) != nil {
		// No huge pages for it: ordinary pages from the heap serve as
		// well and stay in the heap's statistics.
		unix.MunmapPtr(start, size)
		return nil
	}
	track(owner, start, size)
	return b[:n:n]
}

// unmapRegion unmaps [p, p+n) and reports whether it did.
func unmapRegion(p unsafe.Pointer, n uintptr) bool { return unix.MunmapPtr(p, n) == nil }
