package counters

import (
	"bytes"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"rnnserve/cachesim"
	"rnnserve/internal/fuzzbound"
)

func parseFile(t *testing.T, path string) *ValgrindTotals {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tot, err := ParseValgrindOutput(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tot
}

func TestParseCallgrindOutput(t *testing.T) {
	tot := parseFile(t, "testdata/callgrind.out.sample")
	if tot.Creator != "callgrind-3.19.0" {
		t.Errorf("creator %q", tot.Creator)
	}
	if want := (CacheDesc{Size: 1 << 20, LineSize: 64, Ways: 8}); tot.LL != want {
		t.Errorf("LL %+v, want %+v", tot.LL, want)
	}
	// The totals line, not the summary line (callgrind's summary misses
	// the last thread's costs).
	want := map[string]int64{"Ir": 6746520, "DLmr": 116118, "DLmw": 1448, "ILmr": 2755, "ILdmr": 13, "DLdmr": 1610, "DLdmw": 3}
	for name, n := range want {
		if got, ok := tot.Get(name); !ok || got != n {
			t.Errorf("%s = %d, %v; want %d", name, got, ok, n)
		}
	}
	tr, err := tot.Traffic(64)
	if err != nil {
		t.Fatal(err)
	}
	if tr.ReadBytes != 64*(2755+116118+1448) || tr.WriteBytes != 64*(13+1610+3) || !tr.Writes || tr.CodeBytes != 64*2755 {
		t.Errorf("traffic %+v", tr)
	}
}

func TestParseCachegrindOutput(t *testing.T) {
	tot := parseFile(t, "testdata/cachegrind.out.sample")
	if want := []string{"Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw"}; !slices.Equal(tot.Events, want) {
		t.Errorf("events %q", tot.Events)
	}
	if got, _ := tot.Get("DLmr"); got != 3089068 {
		t.Errorf("DLmr = %d", got)
	}
	if tot.LL.Size != 1<<20 || tot.LL.Ways != 8 {
		t.Errorf("LL %+v", tot.LL)
	}
	tr, err := tot.Traffic(64)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Writes || tr.WriteBytes != 0 || tr.ReadBytes != 64*(2589+3089068+3034) {
		t.Errorf("cachegrind has no write-backs: %+v", tr)
	}
}

func TestParseValgrindOutputParts(t *testing.T) {
	// Two parts (callgrind --dump-every-bb): their totals add up; a short
	// count line means zeros.
	in := "events: A B C\npart: 1\nsummary: 1 2 3\ntotals: 1 2 3\npart: 2\nevents: A B C\ntotals: 10 20\n"
	tot, err := ParseValgrindOutput(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tot.Counts, []int64{11, 22, 3}) {
		t.Errorf("counts %v", tot.Counts)
	}
	if _, err := tot.Traffic(64); !errors.Is(err, ErrValgrindOutput) {
		t.Errorf("no LL events: %v", err)
	}
}

func TestParseValgrindOutputErrors(t *testing.T) {
	for _, bad := range []string{
		"",
		"summary: 1 2\n",
		"events: Ir Dr\n",
		"events:\nsummary: 1\n",
		"events: Ir Dr\nsummary: 1 2 3\n",
		"events: Ir Dr\nsummary: 1 x\n",
		"events: Ir Dr\ntotals: 1 -2\n",
		"events: Ir Ir\nsummary: 1 2\n",
		"events: Ir\nevents: Dr\nsummary: 1\n",
		"events: Ir\ntotals: 9223372036854775807\ntotals: 1\n",
		"events: Ir\nsummary: 99999999999999999999\n",
		"events: Ir\ndesc: LL cache: 99999999999999999999 B, 64 B, 8-way associative\nsummary: 1\n",
		"events: Ir\nsummary: 1\n" + strings.Repeat("x", maxOutputLine+1) + "\n",
	} {
		if _, err := ParseValgrindOutput(strings.NewReader(bad)); !errors.Is(err, ErrValgrindOutput) {
			t.Errorf("%.60q: got %v, want ErrValgrindOutput", bad, err)
		}
	}
}

func FuzzParseValgrindOutput(f *testing.F) {
	for _, p := range []string{"testdata/callgrind.out.sample", "testdata/cachegrind.out.sample"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("events: A\ntotals: 1\ntotals: 2\n")
	f.Add("events: Ir Dr\nsummary: 1\n")
	fuzzbound.String(f, fuzzbound.Limits{}, func(t *testing.T, in string) {
		tot, err := ParseValgrindOutput(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrValgrindOutput) {
				t.Fatalf("error %v is not ErrValgrindOutput", err)
			}
			return
		}
		if len(tot.Events) == 0 || len(tot.Counts) != len(tot.Events) {
			t.Fatalf("%d events, %d counts", len(tot.Events), len(tot.Counts))
		}
		for i, n := range tot.Counts {
			if n < 0 {
				t.Fatalf("count %d of %s is negative", n, tot.Events[i])
			}
		}
		if tr, err := tot.Traffic(64); err == nil && (tr.ReadBytes < 0 || tr.WriteBytes < 0 || math.IsNaN(tr.RW())) {
			t.Fatalf("traffic %+v", tr)
		}
		// Written back and parsed again, the totals are the same.
		if strings.ContainsAny(tot.Creator, "\r") {
			return // a bare CR does not end a line for the scanner but may in the writer's reader
		}
		var b bytes.Buffer
		if _, err := tot.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		again, err := ParseValgrindOutput(&b)
		if err != nil {
			t.Fatalf("round trip: %v\n%s", err, b.String())
		}
		if !slices.Equal(again.Events, tot.Events) || !slices.Equal(again.Counts, tot.Counts) || again.LL != tot.LL {
			t.Fatalf("round trip of %+v gave %+v", tot, again)
		}
	})
}

func TestLegalLL(t *testing.T) {
	for _, c := range []struct {
		in       cachesim.Config
		want     cachesim.Config
		same     bool
		contains string
	}{
		// The paper's 12 MiB fully associative model: 3·2^16 lines, so
		// 12 ways gives 16384 sets.
		{cachesim.Config{Size: 12 << 20, LineSize: 64, Ways: cachesim.FullyAssociative},
			cachesim.Config{Size: 12 << 20, LineSize: 64, Ways: 12}, false, "12 MiB fully associative LL is simulated as 12 MiB 12-way (16384 sets)"},
		// 12 MiB 16-way has 12288 sets: 12 ways is the nearest legal.
		{cachesim.Config{Size: 12 << 20, LineSize: 64, Ways: 16},
			cachesim.Config{Size: 12 << 20, LineSize: 64, Ways: 12}, false, "12 MiB 16-way (12288 sets)"},
		{cachesim.Config{Size: 25 << 20, LineSize: 64, Ways: cachesim.FullyAssociative},
			cachesim.Config{Size: 25 << 20, LineSize: 64, Ways: 25}, false, "25-way (16384 sets)"},
		{cachesim.Config{Size: 2 << 20, LineSize: 64, Ways: 16},
			cachesim.Config{Size: 2 << 20, LineSize: 64, Ways: 16}, true, ""},
		{cachesim.Config{Size: 2 << 20, LineSize: 64, Ways: cachesim.FullyAssociative},
			cachesim.Config{Size: 2 << 20, LineSize: 64, Ways: 16}, false, "2 MiB 16-way (2048 sets)"},
		// 15625 lines (5^6) cannot be split into power-of-two sets of a
		// sensible size: the size changes, the ways stay.
		{cachesim.Config{Size: 15625 * 64, LineSize: 64, Ways: 16},
			cachesim.Config{Size: 1024 * 16 * 64, LineSize: 64, Ways: 16}, false, "1 MiB 16-way (1024 sets)"},
	} {
		got, note := LegalLL(c.in)
		if got != c.want {
			t.Errorf("LegalLL(%+v) = %+v, want %+v", c.in, got, c.want)
		}
		if (note == "") != c.same || !strings.Contains(note, c.contains) {
			t.Errorf("LegalLL(%+v) note %q, want one containing %q", c.in, note, c.contains)
		}
		opt := ValgrindOptions{LL: got}
		opt.EnsureDefaults()
		if err := opt.Validate(); err != nil {
			t.Errorf("LegalLL(%+v) = %+v, which valgrind refuses: %v", c.in, got, err)
		}
	}
	bad := ValgrindOptions{LL: cachesim.Config{Size: 12 << 20, LineSize: 64, Ways: 16}}
	bad.EnsureDefaults()
	if err := bad.Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("12288 sets: %v, want ErrInvalidOptions", err)
	}
}

func TestLookValgrindMissing(t *testing.T) {
	_, err := LookValgrind("/nonexistent/valgrind")
	if !errors.Is(err, ErrNoValgrind) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrNoValgrind and ErrUnavailable", err)
	}
}

// TestGoUnderValgrind: cpu.rdtscp=off joins a GODEBUG already set (the
// last one, which os/exec keeps) or becomes one.
func TestGoUnderValgrind(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"A=1"}, "GODEBUG=cpu.rdtscp=off"},
		{[]string{"GODEBUG=x=1", "A=1", "GODEBUG=asyncpreemptoff=1"}, "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off"},
	} {
		got := GoUnderValgrind(c.env)
		if len(got) != len(c.env)+1 || got[len(got)-1] != c.want || !slices.Equal(got[:len(c.env)], c.env) {
			t.Errorf("%q: %q, want %q added", c.env, got, c.want)
		}
	}
}
