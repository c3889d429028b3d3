package hugepage

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

type owner struct{ name string }

// TestBytes checks what every buffer must be, small or mapped: n zeroed,
// writable bytes, 64-byte aligned, capacity n; and a mapped one's start
// on a huge page boundary.
func TestBytes(t *testing.T) {
	for _, n := range []int{1, 63, 4096, MinBytes - 1, MinBytes, MinBytes + 1, 3*Size + 12345} {
		o := &owner{}
		b := Bytes(o, n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Bytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if addr%64 != 0 {
			t.Errorf("Bytes(%d) at %#x: not 64-byte aligned", n, addr)
		}
		if runtime.GOOS == "linux" && n >= MinBytes && addr%Size != 0 {
			t.Errorf("Bytes(%d) at %#x: not on a %d-byte boundary", n, addr, Size)
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("Bytes(%d)[%d] = %d, want 0", n, i, v)
			}
		}
		for i := range b {
			b[i] = byte(i)
		}
		if b[n-1] != byte(n-1) {
			t.Errorf("Bytes(%d): last byte not written", n)
		}
		runtime.KeepAlive(o)
	}
	o := &owner{}
	if f, u := Floats(o, 1000), Uint16s(o, 1000); len(f) != 1000 || len(u) != 1000 || len(Floats(o, 0)) != 0 {
		t.Errorf("Floats %d, Uint16s %d", len(f), len(u))
	}
}

// TestReleased checks that a mapping goes back once its owner is
// unreachable, and not before.
func TestReleased(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no mappings here")
	}
	// The other tests' owners are gone: wait for their mappings to go.
	settle(t, 0)
	const before = 0
	o := &owner{"weights"}
	f := Floats(o, 3*Size/4) // three huge pages of float32s
	if got := Mapped() - before; got != 3*Size {
		t.Fatalf("mapped %d bytes, want %d", got, 3*Size)
	}
	f[len(f)-1] = 1
	runtime.GC()
	runtime.GC()
	if got := Mapped() - before; got != 3*Size {
		t.Fatalf("with its owner live, %d bytes mapped, want %d", got, 3*Size)
	}
	runtime.KeepAlive(o)
	o, f = nil, nil
	settle(t, before)
}

// settle collects garbage until want bytes are mapped, or fails.
func settle(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Mapped() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still mapped, want %d", Mapped(), want)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestHugePages reports whether this kernel backs a mapping with huge
// pages (it may not: THP off, or memory too fragmented); the buffers are
// right either way.
func TestHugePages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	mode, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	o := &owner{}
	b := Bytes(o, 4*Size)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	t.Logf("THP %s; this process: %s", strings.TrimSpace(string(mode)), anonHuge())
	runtime.KeepAlive(o)
}

func anonHuge() string {
	b, _ := os.ReadFile("/proc/self/smaps_rollup")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "AnonHugePages") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "AnonHugePages unknown"
}
