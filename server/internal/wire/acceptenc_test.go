package wire

import (
	"testing"

	"rnnserve/internal/fuzzbound"
)

// TestAcceptsCoding: Accept-Encoding as RFC 9110 writes it.
func TestAcceptsCoding(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"br, gzip;q=0.5"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip;q=0.0"}, false},
		{[]string{"gzip;Q=0"}, false},
		{[]string{"gzip; q=0.000"}, false},
		{[]string{"gzip ;q=0.001"}, true},
		{[]string{"gzip;q=1.000"}, true},
		{[]string{"gzip;q=1.5"}, false},    // malformed: ignored
		{[]string{"gzip;q=0.0001"}, false}, // four decimals: ignored
		{[]string{"gzip;q=abc"}, false},    // malformed
		{[]string{"gzip;level=9"}, false},  // not a weight: ignored
		{[]string{"*"}, true},              // any coding
		{[]string{"*;q=0"}, false},
		{[]string{"*, gzip;q=0"}, false}, // named beats *
		{[]string{"gzip;q=0, *"}, false},
		{[]string{"identity, *;q=0"}, false},
		{[]string{"br", "gzip"}, true},        // several field lines
		{[]string{"gzip", "gzip;q=0"}, false}, // named twice: the lowest weight
		{[]string{"deflate"}, false},
		{[]string{"gzipx"}, false},
		{[]string{",,gzip,,"}, true},
	} {
		if got := acceptsCoding(c.values, "gzip"); got != c.want {
			t.Errorf("Accept-Encoding %q: %v, want %v", c.values, got, c.want)
		}
	}
}

// FuzzAcceptsCoding: any header is read without a panic, within the
// fuzz bounds, and a coding refused by name stays refused whatever
// follows.
func FuzzAcceptsCoding(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0.5, *", "x-gzip;Q=1.000", "*;q=0", "gzip;q=", ";;,,q=1"} {
		f.Add([]byte(s))
	}
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		v := string(data)
		acceptsCoding([]string{v}, "gzip")
		if acceptsCoding([]string{v, "gzip;q=0"}, "gzip") {
			t.Fatalf("%q then gzip;q=0 accepts gzip", v)
		}
	})
}
