package cachesim

// Sink receives a program's memory requests as byte ranges. Read and Write
// take a start address and a length in bytes; a zero length does nothing
// and a negative address or length panics. LRU, Profile and Trace are
// Sinks, so one walk of a program can feed any of them.
type Sink interface {
	Read(addr, n int64)
	Write(addr, n int64)
}

var (
	_ Sink = (*LRU)(nil)
	_ Sink = (*Profile)(nil)
	_ Sink = (*Trace)(nil)
)

// Trace records line accesses, 8 bytes each, for analyses that need the
// whole trace at once, such as OPT.
type Trace struct {
	lineSize int64
	shift    uint
	acc      []uint64 // line<<1 | write; a line is below 2^63
}

// NewTrace returns an empty trace of lines of lineSize bytes; zero means
// DefaultLineSize.
func NewTrace(lineSize int64) (*Trace, error) {
	if lineSize == 0 {
		lineSize = DefaultLineSize
	}
	if err := validateLineSize(lineSize); err != nil {
		return nil, err
	}
	return &Trace{lineSize: lineSize, shift: lineShift(lineSize)}, nil
}

// LineSize returns the trace's line size in bytes.
func (t *Trace) LineSize() int64 { return t.lineSize }

// Len returns the number of line accesses recorded.
func (t *Trace) Len() int { return len(t.acc) }

// At returns the i'th line access: the line number (address / LineSize)
// and whether it was a write.
func (t *Trace) At(i int) (line int64, write bool) {
	a := t.acc[i]
	return int64(a >> 1), a&1 != 0
}

// Read records a read of n bytes at addr, one access per line.
func (t *Trace) Read(addr, n int64) { t.record(addr, n, 0) }

// Write records a write of n bytes at addr, one access per line.
func (t *Trace) Write(addr, n int64) { t.record(addr, n, 1) }

func (t *Trace) record(addr, n int64, w uint64) {
	first, last, ok := lineRange(addr, n, t.shift)
	if !ok {
		return
	}
	for line := first; ; line++ {
		t.acc = append(t.acc, line<<1|w)
		if line == last {
			return
		}
	}
}

// Replay sends the recorded accesses to s in order, each as one line-sized
// range. A sink with the same line size sees exactly the recorded accesses.
func (t *Trace) Replay(s Sink) {
	for _, a := range t.acc {
		addr := int64(a>>1) << t.shift
		if a&1 != 0 {
			s.Write(addr, t.lineSize)
		} else {
			s.Read(addr, t.lineSize)
		}
	}
}
