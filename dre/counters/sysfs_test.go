package counters

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// formats is a PMU's format/ directory.
func formats(m map[string]string) func(string) (string, error) {
	return func(term string) (string, error) {
		f, ok := m[term]
		if !ok {
			return "", errors.New("no such file")
		}
		return f, nil
	}
}

var imcFormats = formats(map[string]string{
	"event": "config:0-7", "umask": "config:8-15", "edge": "config:18", "thresh": "config:24-31",
	"split": "config:0-3,32-35", "rdwrmask": "config1:0-1", "wide": "config:0-63",
})

func TestParseEventConfig(t *testing.T) {
	for _, c := range []struct {
		desc string
		want uint64
	}{
		{"event=0x04,umask=0x03", 0x0304},
		{"event=0x04,umask=0x0c", 0x0c04},
		{"event=0xff,umask=0x0f,edge", 0x40fff},
		{"event=4, umask=3, thresh=1", 0x01000304},
		{"split=0xab", 0xb | 0xa<<32}, // the low bits in the first range, the rest in the next
		{"wide=0xffffffffffffffff", 0xffffffffffffffff},
	} {
		got, err := parseEventConfig(c.desc, imcFormats)
		if err != nil || got != c.want {
			t.Errorf("%q: %#x, %v; want %#x", c.desc, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "event=0x100", "nope=1", "event=x", "rdwrmask=1", "=1", "../event=1", "split=0x100"} {
		if _, err := parseEventConfig(bad, imcFormats); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for _, bad := range []string{"config:8-7", "config:64", "config:a-b", "config", "config:"} {
		if _, err := parseEventConfig("event=1", formats(map[string]string{"event": bad})); err == nil {
			t.Errorf("format %q: no error", bad)
		}
	}
}

func FuzzParseEventConfig(f *testing.F) {
	f.Add("event=0x04,umask=0x03", "config:0-7", "config:8-15")
	f.Add("event=1,umask", "config:0-3,32-35", "config:63")
	f.Fuzz(func(t *testing.T, desc, evFormat, umFormat string) {
		fuzzbound.Run(t, len(desc)+len(evFormat)+len(umFormat), func() {
			fm := formats(map[string]string{"event": evFormat, "umask": umFormat})
			got, err := parseEventConfig(desc, fm)
			if err != nil {
				return
			}
			// Every set bit of the config lies in a range of a format used.
			var allowed uint64
			for _, f := range []string{evFormat, umFormat} {
				_, ranges, _ := strings.Cut(f, ":")
				for r := range strings.SplitSeq(ranges, ",") {
					lo, hi, err := parseBitRange(r)
					if err != nil {
						continue
					}
					for b := lo; b <= hi; b++ {
						allowed |= 1 << b
					}
				}
			}
			if got&^allowed != 0 {
				t.Fatalf("config %#x sets bits %#x outside the formats %q, %q", got, got&^allowed, evFormat, umFormat)
			}
		})
	})
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "0,18": {0, 18}, "0-3,8": {0, 1, 2, 3, 8}, " 2 ": {2}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0-99999999"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestUnitBytes(t *testing.T) {
	for u, want := range map[string]float64{"MiB": 1 << 20, "": 1, "Bytes": 1, "KiB": 1024, "GB": 1 << 30} {
		if got, err := unitBytes(u); err != nil || got != want {
			t.Errorf("%q: %v, %v", u, got, err)
		}
	}
	if _, err := unitBytes("Joules"); err == nil {
		t.Error("Joules: no error")
	}
}

func TestCounts(t *testing.T) {
	var a, b Counts
	if !a.Empty() || a.String() != "(nothing measured)" {
		t.Errorf("zero Counts %v", a)
	}
	a.Set(Cycles, 100)
	a.Set(LLCLoadMisses, 10)
	b.Set(Cycles, 30)
	b.Set(Instructions, 7)
	d := a.Sub(b)
	if v, ok := d.Get(Cycles); !ok || v != 70 {
		t.Errorf("cycles %v %v", v, ok)
	}
	if d.Has(LLCLoadMisses) || d.Has(Instructions) {
		t.Error("Sub kept an event without a baseline, or one only the baseline has")
	}
	if v, _ := b.Sub(a).Get(Cycles); v != 0 {
		t.Errorf("negative difference not clamped: %v", v)
	}
	s := a.Add(b)
	if v, _ := s.Get(Cycles); v != 130 || !s.Has(Instructions) {
		t.Errorf("Add: %v", s)
	}
	if v, _ := a.Scale(0.5).Get(LLCLoadMisses); v != 5 {
		t.Errorf("Scale: %v", v)
	}
	if m, ok := a.LLCMisses(); !ok || m != 10 {
		t.Errorf("LLC misses from loads alone: %v %v", m, ok)
	}
	var g Counts
	g.Set(CacheMisses, 3)
	if m, ok := g.LLCMisses(); !ok || m != 3 {
		t.Errorf("LLC misses from the generic event: %v %v", m, ok)
	}
	if _, ok := (Counts{}).LLCMisses(); ok {
		t.Error("LLC misses from nothing")
	}
	if Event(200).String() != "Event(200)" || LLCStoreMisses.String() != "llc_store_misses" {
		t.Error("event names")
	}
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.Source != Auto || o.Root != "/" || o.Validate() != nil {
		t.Errorf("defaults %+v", o)
	}
	for _, bad := range []Options{{Source: Cachegrind}, {Source: Auto, Scope: 7}, {Source: Perf, CPU: -1}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	for _, s := range []string{"auto", "PERF", "uncore", "cachegrind", "none"} {
		if _, err := ParseSource(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, err := ParseSource("papi"); err == nil {
		t.Error("papi: no error")
	}
}
