package wire

import (
	"bytes"
	"encoding/json"

	"rnnserve/server/internal/infer"
)

// keyChecker refuses a JSON object that has the same key twice, at any
// depth, as strict JSON parsers do (RFC 8259 leaves it to the receiver;
// encoding/json keeps the last one without a word, so a client's two
// "model_version" or two "k" would reach the server as one of them). It
// follows the text's structure as it streams through textChecker, which
// has already checked it to be valid UTF-8: strings, objects, arrays and
// the keys of each open object. Keys are compared decoded ("a" and
// "\u0061" are the same key). Anything else (a malformed text) is left to
// the JSON decoder to refuse.
type keyChecker struct {
	stack []keyFrame
	inStr bool
	esc   bool
	isKey bool
	key   []byte // the key being read, as written (escapes kept)
}

// keyFrame is one open object or array.
type keyFrame struct {
	object    bool
	expectKey bool // the next string is a key
	keys      map[string]struct{}
}

// scan follows b, the next bytes of the text, starting at offset off; it
// returns a 400 naming the key and its offset at a duplicate.
func (k *keyChecker) scan(b []byte, off int64) error {
	for i := 0; i < len(b); {
		if k.inStr {
			if k.esc {
				k.esc = false
				if k.isKey {
					k.key = append(k.key, b[i])
				}
				i++
				continue
			}
			j := bytes.IndexAny(b[i:], `"\`)
			if j < 0 {
				if k.isKey {
					k.key = append(k.key, b[i:]...)
				}
				return nil
			}
			if k.isKey {
				k.key = append(k.key, b[i:i+j]...)
			}
			c := b[i+j]
			i += j + 1
			if c == '\\' {
				k.esc = true
				if k.isKey {
					k.key = append(k.key, '\\')
				}
				continue
			}
			k.inStr = false
			if k.isKey {
				// A key is followed by ':'; a string before the next ','
				// is none (in a malformed text, the decoder's to refuse).
				k.stack[len(k.stack)-1].expectKey = false
				if err := k.saw(off + int64(i)); err != nil {
					return err
				}
			}
			continue
		}
		j := bytes.IndexAny(b[i:], `"{}[],:`)
		if j < 0 {
			return nil
		}
		c := b[i+j]
		i += j + 1
		var top *keyFrame
		if n := len(k.stack); n > 0 {
			top = &k.stack[n-1]
		}
		switch c {
		case '"':
			k.inStr = true
			k.isKey = top != nil && top.object && top.expectKey
			k.key = k.key[:0]
		case '{':
			k.stack = append(k.stack, keyFrame{object: true, expectKey: true})
		case '[':
			k.stack = append(k.stack, keyFrame{})
		case '}', ']':
			if top != nil {
				k.stack = k.stack[:len(k.stack)-1]
			}
		case ',':
			if top != nil && top.object {
				top.expectKey = true
			}
		case ':':
			if top != nil && top.object {
				top.expectKey = false
			}
		}
	}
	return nil
}

// saw records the key just read in the innermost object; end is the
// offset just past it.
func (k *keyChecker) saw(end int64) error {
	top := &k.stack[len(k.stack)-1]
	key := string(k.key)
	if bytes.IndexByte(k.key, '\\') >= 0 {
		var s string
		if json.Unmarshal(append(append([]byte{'"'}, k.key...), '"'), &s) == nil {
			key = s
		}
	}
	if _, dup := top.keys[key]; dup {
		return infer.BadRequest("malformed JSON: the key %q appears twice in one object (the second ends at byte %d)", infer.Clip(key), end)
	}
	if top.keys == nil {
		top.keys = map[string]struct{}{}
	}
	top.keys[key] = struct{}{}
	return nil
}
