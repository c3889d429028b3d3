package wire

import "strings"

// acceptsCoding reports whether the Accept-Encoding field values accept
// the content coding (RFC 9110, section 12.5.3): the coding, case
// insensitively (x-gzip counts as gzip, as section 8.4.1.3 asks), or
// failing that "*", listed with a weight above 0. A weight is "q=" (or
// "Q=") and a qvalue, 0 to 1 with up to three decimals; "q=0", "q=0.0"
// and "Q=0.000" all refuse. A coding named twice takes its lowest weight.
// An element whose weight is malformed is ignored. No field, or one that
// names neither, accepts nothing but identity.
func acceptsCoding(values []string, coding string) bool {
	named, star := -1, -1 // weights in thousandths; -1 when not listed
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(elem, ";")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			q, ok := weight(params)
			if !ok {
				continue
			}
			lower := func(w *int) {
				if *w < 0 || q < *w {
					*w = q
				}
			}
			switch {
			case strings.EqualFold(name, coding), coding == "gzip" && strings.EqualFold(name, "x-gzip"):
				lower(&named)
			case name == "*":
				lower(&star)
			}
		}
	}
	if named >= 0 {
		return named > 0
	}
	return star > 0
}

// weight parses an element's parameters: none (weight 1000), or one
// weight "q=qvalue", in thousandths.
func weight(params string) (int, bool) {
	p := strings.TrimSpace(params)
	if p == "" {
		return 1000, true
	}
	v, ok := strings.CutPrefix(p, "q=")
	if !ok {
		if v, ok = strings.CutPrefix(p, "Q="); !ok {
			return 0, false
		}
	}
	whole, frac, dot := strings.Cut(v, ".")
	if whole != "0" && whole != "1" || dot && len(frac) > 3 {
		return 0, false
	}
	n := 0
	for i := range 3 {
		d := 0
		if i < len(frac) {
			if frac[i] < '0' || frac[i] > '9' {
				return 0, false
			}
			d = int(frac[i] - '0')
		}
		n = n*10 + d
	}
	if whole == "1" {
		if n != 0 {
			return 0, false
		}
		return 1000, true
	}
	return n, true
}
