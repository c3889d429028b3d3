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
	"unicode/utf8"

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
		return nil, nil, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrHeaderTooLarge, n, MaxHeaderSize)
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

// parseHeader decodes the JSON header. It checks each entry on its own;
// checkLayout then checks the entries against each other.
func parseHeader(header []byte) (*File, []span, error) {
	if !utf8.Valid(header) {
		return nil, nil, fmt.Errorf("%w: not valid UTF-8", ErrHeader)
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, fmt.Errorf("%w: does not start with '{'", ErrHeader)
	}
	members, err := objectMembers(header)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	f := &File{tensors: make(map[string]*Tensor, len(members))}
	spans := make([]span, 0, len(members))
	seenMetadata := false
	for _, m := range members {
		if m.key == metadataKey {
			if seenMetadata {
				return nil, nil, fmt.Errorf("%w: duplicate %q", ErrHeader, metadataKey)
			}
			seenMetadata = true
			if f.Metadata, err = parseMetadata(m.value); err != nil {
				return nil, nil, err
			}
			continue
		}
		if _, dup := f.tensors[m.key]; dup {
			return nil, nil, &TensorError{m.key, ErrDuplicate}
		}
		s, err := parseEntry(m.key, m.value)
		if err != nil {
			return nil, nil, &TensorError{m.key, err}
		}
		f.tensors[m.key] = s.t
		f.names = append(f.names, m.key)
		spans = append(spans, s)
	}
	slices.Sort(f.names)
	return f, spans, nil
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	members, err := objectMembers(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrHeader, metadataKey, err)
	}
	md := make(map[string]string, len(members))
	for _, m := range members {
		if _, dup := md[m.key]; dup {
			return nil, fmt.Errorf("%w: %s: duplicate key %q", ErrHeader, metadataKey, m.key)
		}
		v, err := jsonString(m.value)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: key %q: %w", ErrHeader, metadataKey, m.key, err)
		}
		md[m.key] = v
	}
	return md, nil
}

// parseEntry decodes {"dtype": ..., "shape": [...], "data_offsets": [b, e]}
// and checks that the byte length agrees with dtype and shape. Unknown
// fields are ignored.
func parseEntry(name string, raw json.RawMessage) (span, error) {
	members, err := objectMembers(raw)
	if err != nil {
		return span{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	var dtype, shape, offsets json.RawMessage
	for _, m := range members {
		var dst *json.RawMessage
		switch m.key {
		case "dtype":
			dst = &dtype
		case "shape":
			dst = &shape
		case "data_offsets":
			dst = &offsets
		default:
			continue
		}
		if *dst != nil {
			return span{}, fmt.Errorf("%w: duplicate field %q", ErrHeader, m.key)
		}
		*dst = m.value
	}
	for _, f := range []struct {
		name  string
		value json.RawMessage
	}{{"dtype", dtype}, {"shape", shape}, {"data_offsets", offsets}} {
		if f.value == nil {
			return span{}, fmt.Errorf("%w: missing field %q", ErrHeader, f.name)
		}
	}

	dt, err := jsonString(dtype)
	if err != nil {
		return span{}, fmt.Errorf("%w: dtype: %w", ErrHeader, err)
	}
	t := &Tensor{Name: name, DType: DType(dt)}
	if !t.DType.Valid() {
		return span{}, fmt.Errorf("%w: %q", ErrDType, dt)
	}

	dims, err := jsonIntegers(shape)
	if err != nil {
		return span{}, fmt.Errorf("%w: shape: %w", ErrHeader, err)
	}
	t.Shape = make([]int, len(dims))
	for i, d := range dims {
		if t.Shape[i], err = parseCount(d, ErrShape, "dimension"); err != nil {
			return span{}, err
		}
	}

	offs, err := jsonIntegers(offsets)
	if err != nil {
		return span{}, fmt.Errorf("%w: data_offsets: %w", ErrHeader, err)
	}
	if len(offs) != 2 {
		return span{}, fmt.Errorf("%w: %d data_offsets, want 2", ErrOffsets, len(offs))
	}
	begin, err := parseCount(offs[0], ErrOffsets, "begin offset")
	if err != nil {
		return span{}, err
	}
	end, err := parseCount(offs[1], ErrOffsets, "end offset")
	if err != nil {
		return span{}, err
	}
	if end < begin {
		return span{}, fmt.Errorf("%w: end %d before begin %d", ErrOffsets, end, begin)
	}

	size, err := byteSize(t.Shape, t.DType)
	if err != nil {
		return span{}, err
	}
	if got := uint64(end - begin); got != size {
		return span{}, fmt.Errorf("%w: offsets [%d, %d] span %d bytes, shape %v of %s needs %d",
			ErrSize, begin, end, got, t.Shape, t.DType, size)
	}
	return span{t: t, begin: uint64(begin), end: uint64(end)}, nil
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
				ErrOffsets, s.begin, s.end, prev, pos)}
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

// member is one key/value pair of a JSON object, in document order.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers decodes a JSON object into its members, keeping duplicate
// keys for the caller to reject. Only whitespace may follow the object.
func objectMembers(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		members = append(members, member{key, v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return members, nil
}

// jsonString decodes a JSON string, rejecting null and other types.
func jsonString(raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' {
		return "", errors.New("not a string")
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// jsonIntegers decodes a JSON array of numbers without interpreting them.
func jsonIntegers(raw json.RawMessage) ([]json.Number, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('[') {
		return nil, errors.New("not an array")
	}
	var nums []json.Number
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		n, ok := tok.(json.Number)
		if !ok {
			return nil, errors.New("array element is not a number")
		}
		nums = append(nums, n)
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return nil, err
	}
	return nums, nil
}

// parseCount parses a dimension or an offset: a non-negative integer that
// fits in an int. Malformed and negative values are reported as kind, with
// what naming the value.
func parseCount(n json.Number, kind error, what string) (int, error) {
	s := string(n)
	digits, neg := strings.CutPrefix(s, "-")
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
