//go:build !purego

package f32

import (
	"testing"

	"rnnserve/internal/host"
)

// TestDispatch checks which kernels a process starts with and the names
// Impl gives them: the AVX-512 products by default only where 512-bit
// operations run at full width (not on Zen 4, AMD family 25), the
// AVX-512 gates wherever the CPU has AVX-512; and the name of each level
// the tests select.
func TestDispatch(t *testing.T) {
	for _, c := range []struct {
		vendor string
		family int
		zen4   bool
	}{
		{"AuthenticAMD", 25, true},  // Zen 4: 512-bit operations as two halves
		{"AuthenticAMD", 26, false}, // Zen 5
		{"AuthenticAMD", 23, false}, // Zen 2, no AVX-512
		{"GenuineIntel", 6, false},
		{"", 0, false},
	} {
		if got := zen4(&host.Description{Vendor: c.vendor, Family: c.family}); got != c.zen4 {
			t.Errorf("zen4(%s family %d) = %v, want %v", c.vendor, c.family, got, c.zen4)
		}
	}
	defer setDefault()
	bf := ""
	if hostBF16 {
		bf = "+avx512bf16"
	}
	setDefault()
	want := "avx2+fma"
	switch {
	case hostAVX512 && (avx512F32 || !zen4(host.Get())):
		want = "avx512"
	case hostAVX512:
		want += "+avx512gates"
	case !hostAVX2:
		want, bf = "go", ""
	}
	if got := Impl(); got != want+bf {
		t.Errorf("default kernels on %s (family %d): %q, want %q", host.Get().Model, host.Get().Family, got, want+bf)
	}
	for _, l := range levels() {
		setLevel(l)
		want := [...]string{levelGo: "go", levelAVX2: "avx2+fma", levelAVX512: "avx512" + bf}[l]
		if got := Impl(); got != want {
			t.Errorf("level %d: %q, want %q", l, got, want)
		}
	}
}
