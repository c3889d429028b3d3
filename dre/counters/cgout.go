package counters

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// ErrValgrindOutput is wrapped by every error ParseValgrindOutput returns.
var ErrValgrindOutput = errors.New("counters: malformed cachegrind/callgrind output")

// ValgrindTotals are the whole-program event counts of one cachegrind or
// callgrind output file.
type ValgrindTotals struct {
	Creator string   // "callgrind-3.19.0", or "" (cachegrind files do not say)
	Events  []string // names, in the file's order: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw [ILdmr DLdmr DLdmw]
	Counts  []int64  // one per event
	// LL is the last-level cache the file's "desc: LL cache:" line
	// describes, zero if it has none.
	LL CacheDesc
}

// CacheDesc is a cache as valgrind describes it.
type CacheDesc struct {
	Size, LineSize int64
	Ways           int
}

// Get returns the count of the named event.
func (t *ValgrindTotals) Get(name string) (int64, bool) {
	for i, n := range t.Events {
		if n == name {
			return t.Counts[i], true
		}
	}
	return 0, false
}

// sum adds the named events; false if one is missing.
func (t *ValgrindTotals) sum(names ...string) (int64, bool) {
	var s int64
	for _, n := range names {
		v, ok := t.Get(n)
		if !ok {
			return 0, false
		}
		s += v
	}
	return s, true
}

// maxOutputLine bounds one line of an output file (function names can be
// long, but not this long).
const maxOutputLine = 1 << 20

var llDesc = regexp.MustCompile(`^LL cache:\s+(\d+) B, (\d+) B, (\d+)-way associative`)

// ParseValgrindOutput reads the header and totals of a cachegrind or
// callgrind output file: the "events:" line, and the counts of the
// "totals:" lines (callgrind; one per part of a multi-part file, summed)
// or, without any, of the "summary:" lines. A count line may be shorter
// than the events line (the missing counts are zero) but not longer.
// Cost lines, file and function names are skipped.
func ParseValgrindOutput(r io.Reader) (*ValgrindTotals, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrValgrindOutput, fmt.Sprintf(format, a...))
	}
	t := &ValgrindTotals{}
	var summaries, totals [][]int64
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxOutputLine)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch key {
		case "creator":
			t.Creator = strings.TrimSpace(rest)
		case "desc":
			if m := llDesc.FindStringSubmatch(strings.TrimSpace(rest)); m != nil {
				size, err1 := strconv.ParseInt(m[1], 10, 64)
				ls, err2 := strconv.ParseInt(m[2], 10, 64)
				ways, err3 := strconv.Atoi(m[3])
				if err1 != nil || err2 != nil || err3 != nil {
					return nil, bad("line %d: LL cache description out of range", lineNo)
				}
				t.LL = CacheDesc{Size: size, LineSize: ls, Ways: ways}
			}
		case "events":
			names := strings.Fields(rest)
			if len(names) == 0 {
				return nil, bad("line %d: empty events line", lineNo)
			}
			if t.Events != nil {
				if strings.Join(names, " ") != strings.Join(t.Events, " ") {
					return nil, bad("line %d: events %q differ from the earlier %q", lineNo, names, t.Events)
				}
				continue
			}
			seen := map[string]bool{}
			for _, n := range names {
				if seen[n] {
					return nil, bad("line %d: event %s twice", lineNo, n)
				}
				seen[n] = true
			}
			t.Events = names
		case "summary", "totals":
			if t.Events == nil {
				return nil, bad("line %d: %s before the events line", lineNo, key)
			}
			f := strings.Fields(rest)
			if len(f) > len(t.Events) {
				return nil, bad("line %d: %d counts for %d events", lineNo, len(f), len(t.Events))
			}
			counts := make([]int64, len(t.Events))
			for i, s := range f {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n < 0 {
					return nil, bad("line %d: count %q of %s is not a non-negative integer", lineNo, s, t.Events[i])
				}
				counts[i] = n
			}
			if key == "summary" {
				summaries = append(summaries, counts)
			} else {
				totals = append(totals, counts)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValgrindOutput, err)
	}
	if t.Events == nil {
		return nil, bad("no events line")
	}
	use := totals
	if len(use) == 0 {
		use = summaries
	}
	if len(use) == 0 {
		return nil, bad("neither a totals nor a summary line")
	}
	t.Counts = make([]int64, len(t.Events))
	for _, c := range use {
		for i, n := range c {
			if t.Counts[i] > math.MaxInt64-n {
				return nil, bad("the counts of %s overflow", t.Events[i])
			}
			t.Counts[i] += n
		}
	}
	return t, nil
}

// WriteTo writes t back in the output format: creator, the LL
// description, the events and one totals line.
func (t *ValgrindTotals) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	if t.Creator != "" {
		fmt.Fprintf(&b, "creator: %s\n", t.Creator)
	}
	if t.LL != (CacheDesc{}) {
		fmt.Fprintf(&b, "desc: LL cache: %d B, %d B, %d-way associative\n", t.LL.Size, t.LL.LineSize, t.LL.Ways)
	}
	fmt.Fprintf(&b, "events: %s\ntotals:", strings.Join(t.Events, " "))
	for _, n := range t.Counts {
		fmt.Fprintf(&b, " %d", n)
	}
	b.WriteByte('\n')
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}
