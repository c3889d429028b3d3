package hugepage

import "testing"

func TestTHPMode(t *testing.T) {
	for s, want := range map[string]bool{
		"always [madvise] never\n": true,
		"[always] madvise never\n": true,
		"always madvise [never]\n": false,
		"":                         false,
	} {
		if got := thpMode(s); got != want {
			t.Errorf("thpMode(%q) = %v, want %v", s, got, want)
		}
	}
}
