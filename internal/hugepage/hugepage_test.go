package hugepage

import (
	"fmt"
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
	total0 := MappedTotal()
	o := &owner{"weights"}
	f := Floats(o, 3*Size/4) // three huge pages of float32s
	if got := Mapped() - before; got != 3*Size {
		t.Fatalf("mapped %d bytes, want %d", got, 3*Size)
	}
	if got := MappedTotal() - total0; got != 3*Size {
		t.Fatalf("MappedTotal grew by %d bytes, want %d", got, 3*Size)
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
	if got := MappedTotal() - total0; got != 3*Size {
		t.Errorf("MappedTotal grew by %d bytes with the mapping released, want %d", got, 3*Size)
	}
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

// TestOff checks the heap path a host without huge pages takes (here by
// Enable(false)): large buffers from make, nothing mapped, Place no copy.
func TestOff(t *testing.T) {
	was := Enable(false)
	defer Enable(was)
	if Enable(false) {
		t.Fatal("Enable(false) did not turn mapping off")
	}
	settle(t, 0) // the other tests' mappings gone, none may appear
	o := &owner{}
	before := Mapped()
	b := Bytes(o, 3*Size)
	if len(b) != 3*Size || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64 != 0 {
		t.Fatalf("off: Bytes(%d) len %d at %p", 3*Size, len(b), unsafe.SliceData(b))
	}
	src := make([]float32, Size)
	if p := Place(o, src); unsafe.SliceData(p) != unsafe.SliceData(src) {
		t.Error("off: Place copied")
	}
	if Mapped() != before {
		t.Errorf("off: %d bytes mapped, want %d", Mapped(), before)
	}
	runtime.KeepAlive(o)
}

// TestPlace checks that Place copies a large slice onto a mapping (where
// the host maps one) with every element, and leaves a small one in place.
func TestPlace(t *testing.T) {
	o := &owner{}
	small := []float32{1, 2, 3}
	if p := Place(o, small); unsafe.SliceData(p) != unsafe.SliceData(small) {
		t.Error("Place copied a small slice")
	}
	if len(Place(o, []float32(nil))) != 0 {
		t.Error("Place(nil) not empty")
	}
	src := make([]float32, MinBytes/4+5)
	for i := range src {
		src[i] = float32(i) + 0.5
	}
	before := Mapped()
	p := Place(o, src)
	if len(p) != len(src) {
		t.Fatalf("Place: len %d, want %d", len(p), len(src))
	}
	for i := range p {
		if p[i] != src[i] {
			t.Fatalf("Place: [%d] = %v, want %v", i, p[i], src[i])
		}
	}
	if thpHost() {
		if unsafe.SliceData(p) == unsafe.SliceData(src) || uintptr(unsafe.Pointer(unsafe.SliceData(p)))%Size != 0 {
			t.Errorf("Place on a THP host: %p not a mapping", unsafe.SliceData(p))
		}
		if got, want := Mapped()-before, int64(4*len(src)+4095)&^4095; got != want {
			t.Errorf("Place mapped %d bytes, want %d (whole 4 KiB pages)", got, want)
		}
	} else if unsafe.SliceData(p) != unsafe.SliceData(src) {
		t.Error("Place copied on a host without huge pages")
	}
	runtime.KeepAlive(o)
}

// thpHost says whether this host's THP mode lets Bytes map.
func thpHost() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return runtime.GOOS == "linux" && err == nil && !strings.Contains(string(b), "[never]")
}

// TestArena checks an arena's buffers: zeroed, large ones mapped (on a
// THP host) and counted, small ones and all of them with mapping off from
// the heap; Holds tells them apart; the mappings go once the arena is
// unreachable, not before.
func TestArena(t *testing.T) {
	settle(t, 0)
	a := new(Arena)
	big, small := a.Floats(MinBytes/4+7), a.Floats(100)
	if len(big) != MinBytes/4+7 || len(small) != 100 {
		t.Fatalf("lengths %d, %d", len(big), len(small))
	}
	for i := range big {
		if big[i] != 0 {
			t.Fatalf("big[%d] = %v, want 0", i, big[i])
		}
		big[i] = float32(i)
	}
	want := int64(0)
	if thpHost() {
		want = int64(4*len(big)+4095) &^ 4095
	}
	if Mapped() != want || a.Mapped() != want || a.Holds(big) != (want > 0) || a.Holds(small) {
		t.Errorf("mapped %d, arena %d, want %d; holds big %v, small %v", Mapped(), a.Mapped(), want, a.Holds(big), a.Holds(small))
	}
	if a.Holds(big[len(big)-1:]) != (want > 0) || new(Arena).Holds(big) {
		t.Error("Holds of the last element or by another arena")
	}
	was := Enable(false)
	if off := a.Floats(MinBytes / 2); a.Holds(off) || a.Mapped() != want {
		t.Error("with mapping off, the arena mapped")
	}
	Enable(was)
	var none *Arena
	if f := none.Floats(MinBytes); len(f) != MinBytes || none.Holds(f) || none.Mapped() != 0 {
		t.Error("a nil arena")
	}
	runtime.GC()
	runtime.GC()
	if Mapped() != want || big[len(big)-1] != float32(len(big)-1) {
		t.Fatalf("with the arena live: %d bytes mapped, want %d", Mapped(), want)
	}
	runtime.KeepAlive(a)
	a, big = nil, nil
	settle(t, 0)
}

// TestPaced: mappings whose owners are dropped, made with next to no heap
// allocation between them, are released by the collections mapping
// starts, so the mapped bytes stay bounded: also where no cleanup runs
// (stalled: every cleanup goroutine held by a cleanup of the test's),
// as on a host so busy that the cleanups' goroutines wait for a core.
func TestPaced(t *testing.T) {
	if !thpHost() {
		t.Skip("no mappings here")
	}
	const each, n = 32 << 20, 48 // 1.5 GiB in all, never touched
	for _, stalled := range []bool{false, true} {
		t.Run(fmt.Sprintf("stalled=%v", stalled), func(t *testing.T) {
			settle(t, 0)
			if stalled {
				release := stallCleanups(t)
				defer func() { close(release); settle(t, 0) }()
			}
			peak := int64(0)
			for range n {
				a := new(Arena)
				if f := a.Floats(each / 4); a.Mapped() != each || len(f) != each/4 {
					t.Fatalf("arena mapped %d bytes, want %d", a.Mapped(), each)
				}
				peak = max(peak, Mapped())
			}
			// The bytes mapped since a collection reach paceMin before the
			// next, which unmaps every owner it finds gone before mapping on.
			if limit := int64(2*paceMin + each); peak > limit {
				t.Errorf("peak %d bytes mapped over %d mappings of %d, want at most %d", peak, n, each, limit)
			}
			t.Logf("peak %d MiB mapped over %d MiB", peak>>20, n*each>>20)
			if !stalled {
				settle(t, 0)
			}
		})
	}
}

// stallCleanups holds every goroutine that runs cleanups (one per four
// Ps, at least one) in a cleanup of its own until the returned channel
// is closed, and checks that they are held: a mapping whose owner is
// gone stays mapped through a collection and 20 ms. Where it cannot
// hold them, the test is skipped.
func stallCleanups(t *testing.T) chan struct{} {
	release := make(chan struct{})
	started := make(chan struct{}, runtime.GOMAXPROCS(0))
	for range runtime.GOMAXPROCS(0) {
		o := new([64]byte)
		runtime.AddCleanup(o, func(int) { started <- struct{}{}; <-release }, 0)
	}
	runtime.GC()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		close(release)
		t.Skip("no cleanup ran within 5 s")
	}
	a := new(Arena)
	a.Floats(MinBytes / 4)
	a = nil
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	if Mapped() == 0 {
		close(release)
		t.Skip("the cleanups ran: could not hold them")
	}
	return release
}
