package invariants

import (
	"testing"
	"unsafe"
)

// TestRecord checks that a recording sees the streams reported while it
// runs, under the tag, and nothing without it; and none after its stop.
func TestRecord(t *testing.T) {
	buf := make([]float32, 8)
	var got []int
	stop := Record(func(addr uintptr, bytes int) {
		if addr != uintptr(unsafe.Pointer(&buf[2])) {
			t.Errorf("address %#x, want %p", addr, &buf[2])
		}
		got = append(got, bytes)
	})
	Stream(unsafe.Pointer(&buf[2]), 12)
	Stream(unsafe.Pointer(&buf[2]), 4)
	stop()
	Stream(unsafe.Pointer(&buf[2]), 8)
	want := 0
	if Enabled {
		want = 2
	}
	if len(got) != want || want == 2 && (got[0] != 12 || got[1] != 4) {
		t.Errorf("recorded %v, want %d streams (12 and 4 bytes) with Enabled = %v", got, want, Enabled)
	}
}
