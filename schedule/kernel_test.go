package schedule

import (
	"fmt"
	"rnnserve/rnn"
	"strings"
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

// TestWeightRoles checks that every schedule marks each layer's W_ih,
// W_hh and W_hr by Role, whatever it names the buffer, and nothing else.
func TestWeightRoles(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 4, Hidden: 16, Proj: 8, Layers: 2, Vocab: 5, HeadOut: 5}, 1)
	want := map[string]Role{".weight_ih": RoleWIH, ".weight_hh": RoleWHH, ".weight_hr": RoleWHR}
	check := func(what string, bufs []*Buffer) {
		n := 0
		for _, b := range bufs {
			role := RoleNone
			for suffix, r := range want {
				if strings.HasSuffix(b.Name, suffix) {
					role = r
				}
			}
			if b.Role != role {
				t.Errorf("%s: buffer %q has role %d, want %d", what, b.Name, b.Role, role)
			}
			if role != RoleNone {
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s: no layer weights", what)
		}
	}
	for _, s := range sequenceSchedules(nil) {
		if s.prog == nil {
			continue
		}
		prog, err := s.prog(net)
		if err != nil {
			t.Fatal(err)
		}
		if prog.Schedule != A {
			check(s.name, prog.Weights())
		}
	}
	for _, prec := range []Precision{F32, Int8} {
		p, err := TraceStepper(net, &Sequence{Tokens: []int64{1, 2}}, prec)
		if err != nil {
			t.Fatal(err)
		}
		check("stepper "+prec.String(), p.Buffers)
	}
}
