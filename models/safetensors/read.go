package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"rnnserve/models/sniff"
)

// MaxHeaderSize is the largest header, in bytes, that Read accepts and
// Write produces.
const MaxHeaderSize = 100_000_000

// metadataKey is the header key that holds the metadata object.
const metadataKey = "__metadata__"

// File is a parsed safetensors file.
type File struct {
	// Metadata holds the "__metadata__" object; nil if the file has none.
	Metadata map[string]string

	tensors map[string]*Tensor
	names   []string // sorted
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// Names returns the names of the tensors in sorted order.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Tensors returns the tensors sorted by name, ready to pass to Write.
func (f *File) Tensors() []Tensor {
	ts := make([]Tensor, len(f.names))
	for i, name := range f.names {
		ts[i] = *f.tensors[name]
	}
	return ts
}

// ReadFile reads and parses the file at path. The tensors own their data.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Read(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return f, nil
}

// Read parses a whole safetensors file held in memory and validates it as
// described in the package documentation. The Data of each tensor is a
// sub-slice of data, which the caller must not modify while the tensors
// are in use.
func Read(data []byte) (*File, error) {
	f, spans, base, err := readHeader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	body := data[base:]
	for _, s := range spans {
		s.t.Data = body[s.begin:s.end:s.end]
	}
	return f, nil
}

// ReadAt parses the safetensors file of size bytes that r holds, reading
// only its header: each tensor's elements stay where they are, in
// Tensor.Section, until Float32sInto or Bytes reads them (straight into
// the caller's buffer, for Float32sInto). The file is validated as Read
// validates it; r must not change while the tensors are in use.
func ReadAt(r io.ReaderAt, size int64) (*File, error) {
	f, spans, base, err := readHeader(r, size)
	if err != nil {
		return nil, err
	}
	for _, s := range spans {
		s.t.Section = io.NewSectionReader(r, base+int64(s.begin), int64(s.end-s.begin))
	}
	return f, nil
}

// readHeader reads and checks the header of the file of size bytes in r,
// allocating no more than the header's own length (bounded by
// MaxHeaderSize and by the file), and returns the tensors' spans and the
// offset of the data section.
func readHeader(r io.ReaderAt, size int64) (*File, []span, int64, error) {
	if f := sniff.DetectAt(r, size); f != sniff.Safetensors && f != sniff.Unknown {
		return nil, nil, 0, fmt.Errorf("%w: this is %v", ErrFormat, f)
	}
	var prefix [8]byte
	if size < 8 {
		return nil, nil, 0, fmt.Errorf("%w: %d bytes, need 8 for the header length", ErrTruncated, size)
	}
	if err := readFullAt(r, prefix[:], 0); err != nil {
		return nil, nil, 0, fmt.Errorf("%w: header length: %v", ErrTruncated, err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderSize {
		return nil, nil, 0, fmt.Errorf("%w: %d bytes, limit %d (MaxHeaderSize)", ErrHeaderTooLarge, n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, nil, 0, fmt.Errorf("%w: header length %d but only %d bytes follow", ErrTruncated, n, size-8)
	}
	header := make([]byte, n)
	if err := readFullAt(r, header, 8); err != nil {
		return nil, nil, 0, fmt.Errorf("%w: header: %v", ErrTruncated, err)
	}
	f, spans, err := parseHeader(header)
	if err != nil {
		return nil, nil, 0, err
	}
	base := 8 + int64(n)
	if err := checkLayout(spans, uint64(size-base)); err != nil {
		return nil, nil, 0, err
	}
	return f, spans, base, nil
}

// readFullAt fills b from r at off: a ReaderAt may return io.EOF with
// the last bytes.
func readFullAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	switch {
	case n == len(b):
		return nil
	case err == nil || errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	}
	return err
}

// span is a tensor whose data has yet to be sliced out of the data section.
type span struct {
	t          *Tensor
	begin, end uint64
}

// checkLayout checks that the spans tile [0, bodyLen) exactly.
func checkLayout(spans []span, bodyLen uint64) error {
	sorted := slices.Clone(spans)
	slices.SortFunc(sorted, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), strings.Compare(a.t.Name, b.t.Name))
	})
	var pos uint64
	prev := ""
	for _, s := range sorted {
		switch {
		case s.begin > pos:
			return &TensorError{s.t.Name, fmt.Errorf("%w: gap of %d bytes before offset %d",
				ErrOffsets, s.begin-pos, s.begin)}
		case s.begin < pos:
			return &TensorError{s.t.Name, fmt.Errorf("%w: [%d, %d] overlaps tensor %q, which ends at %d",
				ErrOffsets, s.begin, s.end, clip(prev), pos)}
		case s.end > bodyLen:
			return &TensorError{s.t.Name, fmt.Errorf("%w: data ends at offset %d but the data section has %d bytes",
				ErrTruncated, s.end, bodyLen)}
		}
		pos, prev = s.end, s.t.Name
	}
	if pos != bodyLen {
		return fmt.Errorf("%w: the last %d bytes of the data section belong to no tensor",
			ErrOffsets, bodyLen-pos)
	}
	return nil
}

// parseCount parses a dimension or an offset: a non-negative integer that
// fits in an int. Malformed and negative values are reported as kind, with
// what naming the value.
func parseCount(n json.Number, kind error, what string) (int, error) {
	digits, neg := strings.CutPrefix(string(n), "-")
	s := clip(string(n)) // for a message: a number may have a million digits
	u, err := strconv.ParseUint(digits, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("%w: %s %s", ErrOverflow, what, s)
	case err != nil:
		return 0, fmt.Errorf("%w: %s %s is not an integer", kind, what, s)
	case neg && u != 0:
		return 0, fmt.Errorf("%w: %s %s is negative", kind, what, s)
	case u > math.MaxInt:
		return 0, fmt.Errorf("%w: %s %s", ErrOverflow, what, s)
	}
	return int(u), nil
}
