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
//
// It also bounds, by construction, what the decoder would build out of
// few bytes: every key is a map entry or a struct, every element of an
// array other than tensor data a Tensor (88 bytes for the 3 of `{},`, or
// for the 2 of `1,`), a dimension or a parameter. A body may have at
// most maxKeys keys in all, and maxElements elements in all in arrays
// other than tensor data (the value of "data" or "prompt_tokens", which
// are counted and charged as they are converted), far more than any
// request needs.
type keyChecker struct {
	stack    []keyFrame
	inStr    bool
	esc      bool
	isKey    bool
	key      []byte // the key being read, as written (escapes kept); after it, the last string read
	keys     int    // keys so far
	elements int    // separators so far in arrays other than tensor data
}

// Bounds of keyChecker.
const (
	maxKeys     = 4096
	maxElements = 4096
)

// keyFrame is one open object or array.
type keyFrame struct {
	object    bool
	expectKey bool // the next string is a key
	data      bool // tensor data, or inside it
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
			// The last string read before an object's '[' is its key.
			data := top != nil && (top.data || top.object && (string(k.key) == "data" || string(k.key) == "prompt_tokens"))
			k.stack = append(k.stack, keyFrame{data: data})
		case '}', ']':
			if top != nil {
				k.stack = k.stack[:len(k.stack)-1]
			}
		case ',':
			if top != nil && top.object {
				top.expectKey = true
			}
			if top != nil && !top.object && !top.data {
				if k.elements++; k.elements >= maxElements {
					return infer.BadRequest("malformed JSON: more than %d array elements besides tensor data (at byte %d): no request has so many inputs, outputs, dimensions or strings", maxElements, off+int64(i))
				}
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
	if k.keys++; k.keys > maxKeys {
		return infer.BadRequest("malformed JSON: more than %d keys (at byte %d): no request has so many tensors or parameters", maxKeys, end)
	}
	if top.keys == nil {
		top.keys = map[string]struct{}{}
	}
	top.keys[key] = struct{}{}
	return nil
}
