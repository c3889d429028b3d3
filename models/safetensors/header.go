package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The header is parsed in one pass by the small strict JSON reader below
// rather than by encoding/json: a header may be MaxHeaderSize bytes of
// tens of thousands of entries, and decoding each entry through
// json.Decoder's token API took about 80 bytes of garbage and 35 µs per
// byte of header (2.9 MB of empty tensors: 1.75 s, 231 MiB). This reader
// allocates the names, shapes and metadata it returns and little else,
// and never recurses: a value it skips (an unknown field's) may nest at
// most maxJSONDepth deep.

// maxJSONDepth bounds the nesting of a value in an unknown field of an
// entry.
const maxJSONDepth = 64

// parseHeader decodes the JSON header. It checks each entry on its own;
// checkLayout then checks the entries against each other.
func parseHeader(header []byte) (*File, []span, error) {
	if !utf8.Valid(header) {
		return nil, nil, fmt.Errorf("%w: not valid UTF-8", ErrHeader)
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, fmt.Errorf("%w: does not start with '{'", ErrHeader)
	}
	f := &File{tensors: map[string]*Tensor{}}
	var spans []span
	seenMetadata := false
	s := &scanner{b: header}
	err := s.object(func(key string) error {
		if key == metadataKey {
			if seenMetadata {
				return fmt.Errorf("%w: duplicate %q", ErrHeader, metadataKey)
			}
			seenMetadata = true
			var err error
			f.Metadata, err = s.metadata()
			return err
		}
		if _, dup := f.tensors[key]; dup {
			return &TensorError{key, ErrDuplicate}
		}
		if s.peek() == 0 {
			return s.errorf("the header ends after a key")
		}
		sp, err := s.entry(key)
		if err != nil {
			return &TensorError{key, err}
		}
		f.tensors[key] = sp.t
		f.names = append(f.names, key)
		spans = append(spans, sp)
		return nil
	})
	if err == nil {
		s.ws()
		if s.i != len(s.b) {
			err = s.errorf("data after the JSON object")
		}
	}
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(f.names)
	return f, spans, nil
}

// metadata decodes the "__metadata__" value: null, or an object of
// strings.
func (s *scanner) metadata() (map[string]string, error) {
	if s.literal("null") {
		return nil, nil
	}
	md := map[string]string{}
	err := s.object(func(key string) error {
		if _, dup := md[key]; dup {
			return fmt.Errorf("%w: %s: duplicate key %q", ErrHeader, metadataKey, clip(key))
		}
		v, err := s.string()
		if err != nil {
			return fmt.Errorf("%w: %s: key %q: %w", ErrHeader, metadataKey, clip(key), err)
		}
		md[key] = v
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrHeader) {
			err = fmt.Errorf("%w: %s: %w", ErrHeader, metadataKey, err)
		}
		return nil, err
	}
	return md, nil
}

// entry decodes {"dtype": ..., "shape": [...], "data_offsets": [b, e]}
// and checks that the byte length agrees with dtype and shape. Unknown
// fields are skipped.
func (s *scanner) entry(name string) (span, error) {
	var (
		dtype          string
		shape, offsets []json.Number
		seen           [3]bool
	)
	err := s.object(func(key string) error {
		field := slices.Index([]string{"dtype", "shape", "data_offsets"}, key)
		if field < 0 {
			return s.skip()
		}
		if seen[field] {
			return fmt.Errorf("%w: duplicate field %q", ErrHeader, key)
		}
		seen[field] = true
		var err error
		switch field {
		case 0:
			if dtype, err = s.string(); err != nil {
				err = fmt.Errorf("%w: dtype: %w", ErrHeader, err)
			}
		case 1:
			if shape, err = s.numbers(); err != nil {
				err = fmt.Errorf("%w: shape: %w", ErrHeader, err)
			}
		case 2:
			if offsets, err = s.numbers(); err != nil {
				err = fmt.Errorf("%w: data_offsets: %w", ErrHeader, err)
			}
		}
		return err
	})
	if err != nil {
		if !errors.Is(err, ErrHeader) {
			err = fmt.Errorf("%w: %w", ErrHeader, err)
		}
		return span{}, err
	}
	for i, f := range []string{"dtype", "shape", "data_offsets"} {
		if !seen[i] {
			return span{}, fmt.Errorf("%w: missing field %q", ErrHeader, f)
		}
	}
	t := &Tensor{Name: name, DType: DType(dtype)}
	if !t.DType.Valid() {
		return span{}, fmt.Errorf("%w: %q", ErrDType, clip(dtype))
	}
	t.Shape = make([]int, len(shape))
	for i, d := range shape {
		var err error
		if t.Shape[i], err = parseCount(d, ErrShape, "dimension"); err != nil {
			return span{}, err
		}
	}
	if len(offsets) != 2 {
		return span{}, fmt.Errorf("%w: %d data_offsets, want 2", ErrOffsets, len(offsets))
	}
	begin, err := parseCount(offsets[0], ErrOffsets, "begin offset")
	if err != nil {
		return span{}, err
	}
	end, err := parseCount(offsets[1], ErrOffsets, "end offset")
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
		return span{}, fmt.Errorf("%w: offsets [%d, %d] span %d bytes, shape %s of %s needs %d",
			ErrSize, begin, end, got, ShapeString(t.Shape), t.DType, size)
	}
	return span{t: t, begin: uint64(begin), end: uint64(end)}, nil
}

// scanner reads JSON from b, one value at a time.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) errorf(format string, a ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrHeader, s.i, fmt.Sprintf(format, a...))
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) literal(word string) bool {
	if s.peek() != word[0] || len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// object reads an object, calling member for each key with the scanner
// at the key's value, which member must read.
func (s *scanner) object(member func(key string) error) error {
	if s.peek() != '{' {
		return s.errorf("not a JSON object")
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errorf("object key is not a string")
		}
		key, err := s.string()
		if err != nil {
			return s.errorf("object key: %v", err)
		}
		if s.peek() != ':' {
			return s.errorf("no ':' after an object key")
		}
		s.i++
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errorf("no ',' or '}' after an object member")
		}
	}
}

// numbers reads an array of numbers, without interpreting them.
func (s *scanner) numbers() ([]json.Number, error) {
	if s.peek() != '[' {
		return nil, errors.New("not an array")
	}
	s.i++
	var out []json.Number
	if s.peek() == ']' {
		s.i++
		return out, nil
	}
	for {
		n, err := s.number()
		if err != nil {
			return nil, err
		}
		out = append(out, n)
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return out, nil
		default:
			return nil, errors.New("no ',' or ']' after an array element")
		}
	}
}

// number reads a JSON number.
func (s *scanner) number() (json.Number, error) {
	s.ws()
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digits() == 0:
		s.i = start
		return "", errors.New("array element is not a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return "", errors.New("malformed number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return "", errors.New("malformed number")
		}
	}
	return json.Number(s.b[start:s.i]), nil
}

// string reads a JSON string.
func (s *scanner) string() (string, error) {
	if s.peek() != '"' {
		return "", errors.New("not a string")
	}
	s.i++
	start := s.i
	plain := true
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if plain {
				return string(raw), nil
			}
			return unescape(raw)
		case c == '\\':
			plain = false
			s.i += 2
		case c < 0x20:
			return "", errors.New("control character in a string")
		default:
			s.i++
		}
	}
	return "", errors.New("unterminated string")
}

// unescape decodes the body of a JSON string that holds escapes.
func unescape(raw []byte) (string, error) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(raw) {
			return "", errors.New("unterminated escape")
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, ok := hex4(raw[i+1:])
			if !ok {
				return "", errors.New("malformed \\u escape")
			}
			i += n
			if utf16.IsSurrogate(r) {
				r2, n2, ok := rune(0), 0, false
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, n2, ok = hex4(raw[i+3:])
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r, i = dec, i+2+n2
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", fmt.Errorf("invalid escape \\%c", raw[i])
		}
	}
	return string(out), nil
}

func hex4(b []byte) (rune, int, bool) {
	if len(b) < 4 {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), 4, err == nil
}

// skip reads any JSON value, nested at most maxJSONDepth deep, without
// recursing.
func (s *scanner) skip() error {
	var objects uint64 // bit d is set when the container at depth d+1 is an object
	depth := 0
	key := func() error {
		if _, err := s.string(); err != nil {
			return s.errorf("object key is not a string")
		}
		if s.peek() != ':' {
			return s.errorf("no ':' after an object key")
		}
		s.i++
		return nil
	}
	// closeValue reads what follows a value: the ends of the containers
	// it completes, then a comma (and a key, in an object) before the
	// next value. It returns false when the outermost value is complete.
	closeValue := func() (bool, error) {
		for depth > 0 {
			obj := objects>>(depth-1)&1 == 1
			end := byte(']')
			if obj {
				end = '}'
			}
			switch s.peek() {
			case end:
				s.i++
				depth--
			case ',':
				s.i++
				if obj {
					return true, key()
				}
				return true, nil
			default:
				return false, s.errorf("no ',' or %q after a value", end)
			}
		}
		return false, nil
	}
	for {
		switch c := s.peek(); {
		case c == '{' || c == '[':
			if depth == maxJSONDepth {
				return s.errorf("a value nested more than %d deep", maxJSONDepth)
			}
			depth++
			objects &^= 1 << (depth - 1)
			end := byte(']')
			if c == '{' {
				objects |= 1 << (depth - 1)
				end = '}'
			}
			s.i++
			if s.peek() != end {
				if c == '{' {
					if err := key(); err != nil {
						return err
					}
				}
				continue // the container's first value
			}
			s.i++
			depth--
		case c == '"':
			if _, err := s.string(); err != nil {
				return s.errorf("%v", err)
			}
		case c == '-' || c >= '0' && c <= '9':
			if _, err := s.number(); err != nil {
				return s.errorf("%v", err)
			}
		case s.literal("true") || s.literal("false") || s.literal("null"):
		default:
			return s.errorf("not a JSON value")
		}
		more, err := closeValue()
		if err != nil || !more {
			return err
		}
	}
}
