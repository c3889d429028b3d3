package schedule

import (
	"bytes"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"rnnserve/internal/hugepage"
)

// weightData is the slice weight buffer b holds for data, one of a
// network's matrices: a copy on huge pages where data is
// hugepage.MinBytes (2 MiB) or more and the host maps them (the products
// stream it; see internal/hugepage), else data itself.
//
// The copies are shared: every program and stepper that holds a copy of
// the same elements holds the same one (a model's A+ program and each of
// its batcher's steppers), which lives while any of their buffers does.
// A network's large matrices are then held twice, the network's on the
// heap and one copy mapped (hugepage.Mapped), not once per user.
func weightData(b *Buffer, data []float32) []float32 {
	if 4*len(data) < hugepage.MinBytes {
		return data
	}
	key := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	hugeCopies.Lock()
	defer hugeCopies.Unlock()
	// A copy made from the same address is reused only while it holds
	// the same elements: the network's slice may have been changed, or
	// freed and its address given to another.
	if c := hugeCopies.m[key].Value(); c != nil && bytes.Equal(asBytes(c.f), asBytes(data)) {
		b.shared = c
		return c.f
	}
	c := &hugeCopy{}
	c.f = hugepage.Place(c, data)
	if unsafe.SliceData(c.f) == unsafe.SliceData(data) {
		return data // not mapped: the network's own slice, on the heap
	}
	if hugeCopies.m == nil {
		hugeCopies.m = map[uintptr]weak.Pointer[hugeCopy]{}
	}
	w := weak.Make(c)
	hugeCopies.m[key] = w
	runtime.AddCleanup(c, forgetCopy, copyKey{key, w})
	b.shared = c
	return c.f
}

// hugeCopy owns one copy on huge pages; the buffers over it point to it.
type hugeCopy struct{ f []float32 }

// hugeCopies indexes the live copies by the address they were made from.
var hugeCopies struct {
	sync.Mutex
	m map[uintptr]weak.Pointer[hugeCopy]
}

type copyKey struct {
	addr uintptr
	copy weak.Pointer[hugeCopy]
}

// forgetCopy drops a collected copy's entry, unless a newer copy from the
// same address has taken its place.
func forgetCopy(k copyKey) {
	hugeCopies.Lock()
	if hugeCopies.m[k.addr] == k.copy {
		delete(hugeCopies.m, k.addr)
	}
	hugeCopies.Unlock()
}

func asBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}
