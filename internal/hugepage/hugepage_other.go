//go:build !linux

package hugepage

import "unsafe"

// mapHuge has no huge-page mapping to make here: Bytes uses the heap.
func mapHuge[T any](owner *T, n int) []byte { return nil }

// unmapRegion is never called here: nothing is mapped.
func unmapRegion(unsafe.Pointer, uintptr) bool { return false }
