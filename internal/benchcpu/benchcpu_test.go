package benchcpu

import (
	"flag"
	"testing"
)

// recorder notes whether Fatalf was called.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestOne(t *testing.T) {
	f := flag.Lookup("test.cpu")
	if f == nil {
		t.Skip("no -test.cpu flag in this binary")
	}
	was := f.Value.String()
	defer f.Value.Set(was)
	for _, c := range []struct {
		cpu  string
		fail bool
	}{{"", false}, {"2", false}, {"1,2", true}, {"1,2,4", true}} {
		if err := f.Value.Set(c.cpu); err != nil {
			t.Fatal(err)
		}
		r := &recorder{TB: t}
		One(r)
		if r.failed != c.fail {
			t.Errorf("-cpu %q: failed %v, want %v", c.cpu, r.failed, c.fail)
		}
	}
}
