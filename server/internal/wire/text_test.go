package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"rnnserve/internal/fuzzbound"
	"rnnserve/server/internal/infer"
)

// referenceText is the text check done the slow way, on the whole text at
// once: the offset of the first byte that is not UTF-8 or of the first \u
// escape of a surrogate without its pair, or -1.
func referenceText(raw []byte) int {
	hex := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(raw); {
		if raw[i] == '\\' {
			r, ok := hex(i)
			switch {
			case !ok:
				i += 2
			case r >= 0xD800 && r < 0xDC00:
				if lo, ok := hex(i + 6); !ok || lo < 0xDC00 || lo > 0xDFFF {
					return i
				}
				i += 12
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			default:
				i += 6
			}
			continue
		}
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

// readChecked reads raw through a textChecker fed by rd and returns what
// came through and the error.
func readChecked(rd io.Reader) ([]byte, error) {
	return io.ReadAll(newTextChecker(rd))
}

func TestTextChecker(t *testing.T) {
	long := bytes.Repeat([]byte("héllo wörld € 😀 "), 4000) // over the checker's buffer
	for _, c := range []struct {
		text string
		bad  int // offset of the error, -1 for none
	}{
		{`{"text_input": "plain"}`, -1},
		{`{"a": "h\u00e9 \ud83d\ude00 \\ud800 \"q\" \n"}`, -1},
		{`{"a": "\ud800"}`, 7},
		{`{"a": "\udc00x"}`, 7},
		{`{"a": "\ud800\ud800"}`, 7},
		{`{"a": "\ud800\u0041"}`, 7},
		{`{"a": "\uD83D\uDE00"}`, -1},
		{"{\"a\": \"\xff\"}", 7},
		{"{\"a\": \"\xc3\"}", 7},
		{"{\"a\": \"\xe2\x82\"}", 7},
		{"{\"a\": \"\xed\xa0\x80\"}", 7}, // a surrogate encoded as UTF-8
		{"{\"a\": \"ok\"}\xc3", 11},
		{string(long), -1},
		{string(long) + "\xff", len(long)},
		{string(long) + `\udfff`, len(long)},
	} {
		raw := []byte(c.text)
		if ref := referenceText(raw); ref != c.bad {
			t.Fatalf("%.40q: reference finds %d, the table says %d", c.text, ref, c.bad)
		}
		for name, rd := range map[string]func() io.Reader{
			"whole":    func() io.Reader { return bytes.NewReader(raw) },
			"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(raw)) },
			"halves":   func() io.Reader { return iotest.HalfReader(bytes.NewReader(raw)) },
		} {
			got, err := readChecked(rd())
			switch {
			case c.bad < 0 && (err != nil || !bytes.Equal(got, raw)):
				t.Errorf("%.40q %s: %d bytes, %v; want it all through", c.text, name, len(got), err)
			case c.bad >= 0 && (!errors.Is(err, infer.ErrBadRequest) || !bytes.Equal(got, raw[:c.bad]) ||
				!bytes.Contains([]byte(err.Error()), []byte("byte "+strconv.Itoa(c.bad)))):
				t.Errorf("%.40q %s: %d bytes through, %v; want the %d before the bad text and an error naming it", c.text, name, len(got), err, c.bad)
			}
		}
	}
}

// FuzzTextChecker: whatever the text and however it arrives, the checker
// agrees with the whole-text reference, passes the good bytes through
// unchanged and stops exactly at the bad one.
func FuzzTextChecker(f *testing.F) {
	f.Add([]byte(`{"a": "\ud83d\ude00"}`), uint8(3))
	f.Add([]byte("{\"a\": \"\xe2\x82\xac\"}"), uint8(1))
	f.Add([]byte(`\ud800\`), uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, chunk uint8) {
		fuzzbound.Run(t, len(raw), func() {
			bad := referenceText(raw)
			rd := io.Reader(bytes.NewReader(raw))
			if chunk > 0 {
				rd = &chunkReader{r: rd, n: int(chunk)}
			}
			got, err := readChecked(rd)
			// The key checker behind it may refuse the text first: a key
			// twice in one object (FuzzDuplicateKeys), never a valid JSON
			// value that has none, with the bytes before it passed through.
			keys := func(upTo int) bool {
				dup, valid := referenceDuplicate(raw)
				return errors.Is(err, infer.ErrBadRequest) && strings.Contains(err.Error(), "appears twice") &&
					len(got) <= upTo && bytes.Equal(got, raw[:len(got)]) && (dup || !valid)
			}
			if bad < 0 {
				if (err != nil || !bytes.Equal(got, raw)) && !keys(len(raw)) {
					t.Fatalf("good text: %d of %d bytes, %v", len(got), len(raw), err)
				}
				return
			}
			if (!errors.Is(err, infer.ErrBadRequest) || !bytes.Equal(got, raw[:bad])) && !keys(bad) {
				t.Fatalf("bad at %d: %d bytes through, %v", bad, len(got), err)
			}
		})
	})
}

// chunkReader reads at most n bytes at a time.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.n)])
}

// TestDuplicateKeys: an object with a key twice (the empty key too), at
// any depth and however the key is written, is refused; the same key in
// different objects, key-like text inside strings, and a string that
// follows a key with no ':' between (a malformed text, the decoder's to
// refuse) are not; the text may arrive a byte at a time.
func TestDuplicateKeys(t *testing.T) {
	for _, c := range []struct {
		text string
		dup  string // "" for none
	}{
		{`{"inputs": [], "inputs": []}`, "inputs"},
		{`{"a": {"k": 1, "x": [1, 2], "k": 2}}`, "k"},
		{`{"a": 1, "\u0061": 2}`, "a"},
		{`{"a\"b": 1, "a\u0022b": 2}`, `a"b`},
		{`{"outputs": [{"name": "x", "parameters": {"k": 1}}, {"name": "y", "parameters": {"k": 2}}]}`, ""},
		{`{"s": "\"s\": 1, \"s\": 2", "t": "{\"u\": 1}"}`, ""},
		{`{"a": [{"b": 1}, {"b": 1}], "c": {"b": 1}}`, ""},
		{`[{"a": 1}, {"a": 2, "b": {"a": 3}}]`, ""},
		{`{"": 1, "": 2}`, `""`},
		// Malformed texts, left to the decoder: two strings with no ':'
		// between them are not two keys.
		{`{0""""00`, ""},
		{`{"a" "a": 1}`, ""},
	} {
		for _, oneByte := range []bool{false, true} {
			var rd io.Reader = bytes.NewReader([]byte(c.text))
			if oneByte {
				rd = iotest.OneByteReader(rd)
			}
			_, err := io.ReadAll(newTextChecker(rd))
			switch {
			case c.dup == "" && err != nil:
				t.Errorf("%s: %v, want no error", c.text, err)
			case c.dup != "" && (!errors.Is(err, infer.ErrBadRequest) || !strings.Contains(err.Error(), "appears twice")):
				t.Errorf("%s (a byte at a time %v): %v, want the duplicate key refused", c.text, oneByte, err)
			}
		}
	}
}

// FuzzDuplicateKeys holds keyChecker, fed the text in chunks of any size,
// to a reference that walks encoding/json's tokens of the whole text:
// for every text encoding/json reads as one valid value (and textChecker
// passes), both find a duplicate key or neither does.
func FuzzDuplicateKeys(f *testing.F) {
	f.Add([]byte(`{"a": 1, "b": {"a": [{"a": 1}, {"a": 2}]}, "c": "\"a\": 1"}`), uint8(3))
	f.Add([]byte(`{"a": 1, "\u0061": 2}`), uint8(1))
	f.Add([]byte(`[{"x": {}}, {"x": {"y": 1, "y": 2}}]`), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, chunk uint8) {
		fuzzbound.Run(t, len(raw), func() {
			want, ok := referenceDuplicate(raw)
			if !ok || referenceText(raw) >= 0 {
				return // not one valid JSON value, or text textChecker refuses first
			}
			var k keyChecker
			var err error
			step := max(int(chunk), 1)
			for i := 0; i < len(raw) && err == nil; i += step {
				err = k.scan(raw[i:min(i+step, len(raw))], int64(i))
			}
			if (err != nil) != want {
				t.Fatalf("%q: keyChecker %v, reference says a duplicate: %v", raw, err, want)
			}
		})
	})
}

// referenceDuplicate reports whether the JSON text raw has an object
// with a key twice, and whether raw is one valid JSON value at all.
func referenceDuplicate(raw []byte) (dup, ok bool) {
	if !json.Valid(raw) {
		return false, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return dup, true
		}
		if err != nil {
			return false, false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
			}
			continue
		case string:
			if top != nil && top.object && top.key {
				if top.keys[v] {
					dup = true
				}
				top.keys[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true // a value: the next string is a key
		}
	}
}

// TestDecodeJSONBufferReuse: DecodeJSON's checkers share read buffers
// (textBufs), so bodies decoded one after another and at once, some of
// them refused part way through a buffer, each come out as sent; and a
// checker released reads nothing more.
func TestDecodeJSONBufferReuse(t *testing.T) {
	type body struct {
		S string `json:"s"`
	}
	text := func(i int) string { return strings.Repeat(strconv.Itoa(i%10), 40<<10+i) } // over one buffer
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for i := g; i < 60 && err == nil; i += 4 {
				raw := `{"s":"` + text(i) + `"}`
				if i%3 == 0 {
					// Refused after a buffer's worth: invalid UTF-8 past 32 KiB.
					bad := raw[:len(raw)-10] + "\xff" + raw[len(raw)-9:]
					if e := DecodeJSON(strings.NewReader(bad), &body{}, 1<<30, nil); !errors.Is(e, infer.ErrBadRequest) {
						err = errors.New("invalid UTF-8 decoded: " + strconv.Quote(errString(e)))
						break
					}
				}
				var b body
				if e := DecodeJSON(strings.NewReader(raw), &b, 1<<30, nil); e != nil {
					err = e
				} else if b.S != text(i) {
					err = errors.New("body " + strconv.Itoa(i) + " decoded other than sent")
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	tc := newTextChecker(strings.NewReader(`{"s":"x"}`))
	tc.release()
	if n, err := tc.Read(make([]byte, 8)); n != 0 || err == nil {
		t.Errorf("read after release: %d bytes, err %v", n, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
