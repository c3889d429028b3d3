package wire

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

	"rnnserve/server/internal/infer"
)

// textChecker passes JSON text through from r, holding back each byte
// until it has checked it: a byte sequence that is not UTF-8, a \u
// escape of a UTF-16 surrogate without its pair, or an object key given
// twice (keyChecker), fails the read with a 400 naming its offset, before
// the decoder sees it. encoding/json would
// replace either with U+FFFD without a word, so a prompt, a tree, an id or
// a name would reach the model other than the client sent it. A backslash
// outside a string, or an escape cut short at the end, is left for the
// JSON decoder to refuse.
type textChecker struct {
	r   io.Reader
	buf []byte
	// buf[lo:ok] is checked and not yet delivered; buf[ok:hi] is a tail
	// that may be an incomplete character or escape.
	lo, ok, hi int
	off        int64 // offset in the text of buf[0]
	err        error // sticky: the reader's error, or the bad text
	keys       keyChecker
	pooled     *[]byte // buf's, to go back to textBufs on release
}

// textBufs holds the checkers' read buffers: a fresh 32 KiB for every
// request body was most of the bytes the server allocated per bytelm
// request, and zeroing them a cost of its own.
var textBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func newTextChecker(r io.Reader) *textChecker {
	bp := textBufs.Get().(*[]byte)
	return &textChecker{r: r, buf: *bp, pooled: bp}
}

// release gives the checker's buffer back for another body; the checker
// reads nothing after it. Read copies out of the buffer, so nothing the
// caller holds points into it.
func (t *textChecker) release() {
	if t.pooled != nil {
		textBufs.Put(t.pooled)
		t.pooled, t.buf = nil, nil
		t.lo, t.ok, t.hi = 0, 0, 0
		if t.err == nil {
			t.err = io.ErrClosedPipe
		}
	}
}

func (t *textChecker) Read(p []byte) (int, error) {
	for t.lo == t.ok {
		if t.err != nil {
			return 0, t.err
		}
		n := copy(t.buf, t.buf[t.ok:t.hi])
		t.off += int64(t.ok)
		t.lo, t.ok, t.hi = 0, 0, n
		m, err := t.r.Read(t.buf[t.hi:])
		t.hi += m
		t.err = err
		t.check(err != nil)
		if kerr := t.keys.scan(t.buf[:t.ok], t.off); kerr != nil {
			t.ok, t.err = 0, kerr
		}
	}
	n := copy(p, t.buf[t.lo:t.ok])
	t.lo += n
	return n, nil
}

// check moves ok past the bytes it can check in buf[ok:hi]; with final
// (the reader has ended) everything must be checked. Bad text sets err
// and stops ok before it.
func (t *textChecker) check(final bool) {
	b := t.buf[:t.hi]
	i := t.ok
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '\\')
		end := len(b)
		if j >= 0 {
			end = i + j
		}
		seg := b[i:end]
		if j < 0 && !final {
			seg = seg[:completeRunes(seg)]
		}
		if !utf8.Valid(seg) {
			t.ok = i + InvalidAt(seg)
			t.err = infer.BadRequest("the JSON text is not valid UTF-8 at byte %d", t.off+int64(t.ok))
			return
		}
		i += len(seg)
		if j < 0 {
			break
		}
		// An escape at b[i].
		need := 2 // a two-byte escape, or \u and no four hex digits (bad JSON)
		if i+1 < len(b) && b[i+1] == 'u' {
			if i+6 > len(b) && !final {
				break // wait for the digits
			}
			if v, ok := hex4(b, i); ok {
				need = 6
				if v >= 0xD800 && v < 0xDC00 {
					need = 12 // a high surrogate wants its low half next
				}
			}
		}
		if i+need > len(b) {
			if need == 12 && (final || len(b) > i+6 && b[i+6] != '\\' || len(b) > i+7 && b[i+7] != 'u') {
				t.ok = i // a high surrogate whose low half is missing
				t.err = infer.BadRequest("the JSON text has a lone UTF-16 surrogate escape at byte %d", t.off+int64(i))
				return
			}
			if final {
				i = len(b) // an escape cut short: the decoder refuses it
			}
			break
		}
		if need >= 6 {
			if v, ok := hex4(b, i); ok && v >= 0xD800 && v <= 0xDFFF {
				if lo, ok2 := hex4(b, i+6); need != 12 || !ok2 || b[i+6] != '\\' || b[i+7] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
					t.ok = i
					t.err = infer.BadRequest("the JSON text has a lone UTF-16 surrogate escape at byte %d", t.off+int64(i))
					return
				}
			}
		}
		i += need
	}
	t.ok = i
}

// hex4 reads the four hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
	return rune(v), err == nil
}

// completeRunes is the length of b without an incomplete UTF-8 sequence
// at its end.
func completeRunes(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < utf8.RuneSelf {
			return len(b)
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-k:]) {
				return len(b)
			}
			return len(b) - k
		}
	}
	return len(b)
}

// InvalidAt is the offset of the first byte of b that does not start a
// valid UTF-8 sequence (len(b) when b is valid).
func InvalidAt(b []byte) int {
	k := 0
	for k < len(b) {
		r, size := utf8.DecodeRune(b[k:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		k += size
	}
	return k
}
