// Package hugepage allocates large, long-lived buffers that kernels stream
// through (the schedules' weight matrices) on the kernel's transparent
// huge pages where the host offers them.
//
// On 4 KiB pages a 16 MiB weight slice is 4,096 pages: more than a Zen 4
// core's second-level TLB holds (3,072 entries), and each page starts the
// hardware prefetchers' streams again, since they follow physical
// addresses and stop at a page's end. Backed by 2 MiB pages, the same
// slice is 8 pages. The Go heap asks for none (THP "madvise", the common
// default, then gives it none), so Bytes maps such buffers itself: an
// anonymous mapping whose start is aligned to 2 MiB, advised
// MADV_HUGEPAGE before anything touches it.
//
// A mapping is not Go heap: Bytes ties it to an owner, a pointer whose
// object holds every reference to the buffer (a schedule's *Buffer, or
// the Arena of a network's matrices), and unmaps it once the owner is
// unreachable (runtime.AddCleanup; or sooner, when a collection that
// mapping more starts finds it so). Nothing may keep the returned slice,
// or a slice of it, longer than the owner.
// Smaller buffers, other systems, a host whose THP mode is "never" (or
// that has no THP), a mapping or an advice the kernel refuses, and a
// process that called Enable(false) get memory from make, as before.
//
// Mapped memory is not in the Go heap's statistics (runtime/metrics,
// runtime.MemStats); Mapped counts it, and a server exports it beside
// them.
package hugepage

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"
)

// Size is the huge page size the mappings are aligned to (x86-64's and
// arm64's default).
const Size = 2 << 20

// MinBytes is the smallest buffer Bytes maps: one huge page. A smaller
// one would hold no whole huge page.
const MinBytes = Size

// mapped counts the bytes of live mappings.
var mapped atomic.Int64

// Mapped is the bytes Bytes has mapped and not yet released: memory
// outside the Go heap, which runtime/metrics does not count.
func Mapped() int64 { return mapped.Load() }

// total counts the bytes of every mapping made, live or released.
var total atomic.Int64

// MappedTotal is the bytes Bytes has mapped since the process started,
// released or not: what a piece of work mapped is the difference across
// it, its short-lived buffers (such as those a model's load builds and
// drops) included, whenever the collector releases them.
func MappedTotal() int64 { return total.Load() }

// Mappings are outside the Go heap, so they do not make the collector
// run: a process that drops models and loads others, allocating little
// heap while it does (random weights, a network filled in place), could
// map without bound before a collection found the old owners
// unreachable. pace counts mapped bytes as the heap's pacer counts heap
// bytes at GOGC=100: once the bytes mapped since the last collection
// exceed those mapped before it (and paceMin), mapping n more collects
// first and unmaps every mapping whose owner that collection found gone
// (releaseGone) before it maps on.
func pace(n int64) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	paced.Lock()
	defer paced.Unlock()
	if c := s[0].Value.Uint64(); c != paced.cycles {
		paced.cycles, paced.grown = c, 0
	}
	paced.grown += n
	if paced.grown > max(Mapped()-paced.grown, paceMin) {
		runtime.GC()
		releaseGone()
		metrics.Read(s)
		paced.cycles, paced.grown = s[0].Value.Uint64(), n
	}
}

// live holds the mappings not yet released. A mapping is released by
// its owner's cleanup, but cleanups run after the collection, on
// goroutines of their own, which a host busy with other processes may
// not run for many milliseconds while a loop maps on (one such run
// mapped 928 MiB where pace meant at most 640). So each mapping also
// keeps a weak pointer to its owner, which the collection itself
// clears, and pace releases those it finds cleared at once.
var live struct {
	sync.Mutex
	m map[*mapping]struct{}
}

// mapping is one mapping Bytes made: its range, and whether its owner
// is gone (the owner's weak pointer cleared).
type mapping struct {
	start unsafe.Pointer
	size  uintptr
	gone  func() bool
	done  atomic.Bool // released
}

// track counts the mapping [start, start+size) and ties it to owner:
// released by owner's cleanup, or by pace, whichever comes first. An
// owner must not have a finalizer, which could bring it back after its
// weak pointer cleared (none in this module has one).
func track[T any](owner *T, start unsafe.Pointer, size uintptr) {
	w := weak.Make(owner)
	m := &mapping{start: start, size: size, gone: func() bool { return w.Value() == nil }}
	live.Lock()
	if live.m == nil {
		live.m = map[*mapping]struct{}{}
	}
	live.m[m] = struct{}{}
	live.Unlock()
	mapped.Add(int64(size))
	total.Add(int64(size))
	runtime.AddCleanup(owner, (*mapping).release, m)
}

// release unmaps m, once.
func (m *mapping) release() {
	if !m.done.CompareAndSwap(false, true) {
		return
	}
	live.Lock()
	delete(live.m, m)
	live.Unlock()
	if unmapRegion(m.start, m.size) {
		mapped.Add(-int64(m.size))
	}
}

// releaseGone releases every mapping whose owner is gone.
func releaseGone() {
	var gone []*mapping
	live.Lock()
	for m := range live.m {
		if m.gone() {
			gone = append(gone, m)
		}
	}
	live.Unlock()
	for _, m := range gone {
		m.release()
	}
}

// paced is pace's count: bytes mapped since the collection it last saw.
var paced struct {
	sync.Mutex
	cycles uint64
	grown  int64
}

// paceMin is the mapped bytes pace lets grow between collections
// whatever was mapped before.
const paceMin = 256 << 20

// off turns mapping off (Enable).
var off atomic.Bool

// Enable turns mapping on (the default, where the host has THP) or off
// and returns whether it was on. Off, every buffer comes from the heap, as
// on a host without huge pages; buffers already mapped stay mapped.
func Enable(on bool) (was bool) { return !off.Swap(!on) }

// Place returns src's elements in memory that lives as long as owner: a
// copy on huge pages where Bytes would map one, else src itself (no
// copy: the caller's slice stays the buffer, on the heap).
func Place[T any](owner *T, src []float32) []float32 {
	if 4*len(src) < MinBytes || off.Load() {
		return src
	}
	b := mapHuge(owner, 4*len(src))
	if b == nil {
		return src
	}
	f := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(src))
	copy(f, src)
	return f
}

// Bytes returns n zeroed bytes, 64-byte aligned, that live as long as
// owner: from a huge-page mapping where n >= MinBytes and the system has
// them, else from the Go heap.
func Bytes[T any](owner *T, n int) []byte {
	if n >= MinBytes && !off.Load() {
		if b := mapHuge(owner, n); b != nil {
			return b
		}
	}
	raw := make([]byte, n+63)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & 63)
	return raw[off : off+n : off+n]
}

// Floats is Bytes for n float32s.
func Floats[T any](owner *T, n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	b := Bytes(owner, 4*n)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// Uint16s is Bytes for n uint16s.
func Uint16s[T any](owner *T, n int) []uint16 {
	if n == 0 {
		return []uint16{}
	}
	b := Bytes(owner, 2*n)
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// Arena owns the buffers of one long-lived object (a network's weight
// matrices): each of MinBytes or more mapped on huge pages, where Place's
// rules allow, the rest on the heap. Its mappings are released together
// once the Arena is unreachable. A slice into them does not keep the
// Arena reachable: whatever holds such a slice must hold the Arena too
// (the object the buffers belong to points to it, and so does every
// reader that may outlive that object).
type Arena struct {
	mu     sync.Mutex
	spans  []span // the mappings, for Holds
	mapped int64
}

type span struct{ start, end uintptr }

// Floats returns n zeroed float32s owned by a: mapped on huge pages where
// 4n is MinBytes or more and mapping is on and works, else from make.
// A nil Arena always uses make.
func (a *Arena) Floats(n int) []float32 {
	if a == nil || 4*n < MinBytes || off.Load() {
		return make([]float32, n)
	}
	b := mapHuge(a, 4*n)
	if b == nil {
		return make([]float32, n)
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	a.mu.Lock()
	a.spans = append(a.spans, span{start, start + uintptr(len(b))})
	a.mapped += int64(len(b)+4095) &^ 4095
	a.mu.Unlock()
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// Holds reports whether f's elements lie in one of a's mappings.
func (a *Arena) Holds(f []float32) bool {
	if a == nil || len(f) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.spans {
		if p >= s.start && p < s.end {
			return true
		}
	}
	return false
}

// Mapped is the bytes a holds on huge pages (whole 4 KiB pages).
func (a *Arena) Mapped() int64 {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mapped
}
