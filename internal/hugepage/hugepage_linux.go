package hugepage

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapHuge maps n bytes (rounded up to whole 4 KiB pages) at a 2 MiB
// boundary, advises MADV_HUGEPAGE and ties the mapping to owner; nil if
// the kernel refuses the mapping.
func mapHuge[T any](owner *T, n int) []byte {
	size := uintptr(n+4095) &^ 4095
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
	// Without THP (or with it off) the advice fails or does nothing, and
	// the mapping is ordinary pages: still correct.
	unix.Madvise(b, unix.MADV_HUGEPAGE)
	mapped.Add(int64(size))
	runtime.AddCleanup(owner, unmap, region{start, size})
	return b[:n:n]
}

// region is one mapping Bytes made.
type region struct {
	start unsafe.Pointer
	size  uintptr
}

func unmap(r region) {
	if unix.MunmapPtr(r.start, r.size) == nil {
		mapped.Add(-int64(r.size))
	}
}
