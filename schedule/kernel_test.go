package schedule

import (
	"fmt"
	"testing"
)

// TestKernelString checks that every kernel has a name of its own and
// that a value outside the list says so.
func TestKernelString(t *testing.T) {
	seen := map[string]Kernel{}
	for k := KCopy; k < numKernels; k++ {
		name := k.String()
		if name == "" || name == fmt.Sprintf("Kernel(%d)", uint8(k)) {
			t.Errorf("kernel %d has no name", uint8(k))
		}
		if o, ok := seen[name]; ok {
			t.Errorf("kernels %d and %d are both %q", uint8(o), uint8(k), name)
		}
		seen[name] = k
	}
	for _, k := range []Kernel{0, numKernels, 255} {
		if got, want := k.String(), fmt.Sprintf("Kernel(%d)", uint8(k)); got != want {
			t.Errorf("Kernel(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
	if got := KTreeCell.String(); got != "tree_cell" {
		t.Errorf("KTreeCell = %q, want tree_cell", got)
	}
}
