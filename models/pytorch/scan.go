package pytorch

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Argument layouts of the pickle opcodes (protocols 0 to 5), as the
// pickle format defines them.
const (
	argNone   = iota
	argFixed  // n bytes
	argLine   // up to and including '\n'
	argLine2  // two lines (GLOBAL, INST)
	argLen1   // 1-byte length, then that many bytes
	argLen4   // 4-byte little-endian length (signed for some), then bytes
	argLen8   // 8-byte little-endian length, then bytes
	argFrame8 // 8-byte frame length; the frame's opcodes follow inline
)

type opArg struct {
	kind uint8
	n    int // argFixed: byte count
}

// opcodes maps each opcode to its argument layout; a zero kind with
// known=false means an opcode that does not exist.
var opcodes = func() (t [256]struct {
	known bool
	arg   opArg
}) {
	set := func(ops string, a opArg) {
		for i := 0; i < len(ops); i++ {
			t[ops[i]].known = true
			t[ops[i]].arg = a
		}
	}
	set("N\x88\x89]ael)t\x85\x86\x87}dsu\x8f\x90\x91021(\x94\x93RbO\x81\x92.Q\x97\x98o", opArg{kind: argNone})
	set("K", opArg{argFixed, 1})
	set("M", opArg{argFixed, 2})
	set("J", opArg{argFixed, 4})
	set("G", opArg{argFixed, 8})
	set("h", opArg{argFixed, 1})
	set("j", opArg{argFixed, 4})
	set("q", opArg{argFixed, 1})
	set("r", opArg{argFixed, 4})
	set("\x80", opArg{argFixed, 1})
	set("\x82", opArg{argFixed, 1})
	set("\x83", opArg{argFixed, 2})
	set("\x84", opArg{argFixed, 4})
	set("ILSVFgpP", opArg{kind: argLine})
	set("ci", opArg{kind: argLine2})
	set("\x8aUC\x8c", opArg{kind: argLen1})
	set("\x8bTBX", opArg{kind: argLen4})
	set("\x8e\x8d\x96", opArg{kind: argLen8})
	set("\x95", opArg{kind: argFrame8})
	return t
}()

// scanPickle walks the opcodes of the pickle at the start of data and
// returns the offset just past its STOP. It checks what gopickle does not:
// that every opcode exists, that every declared length fits in the bytes
// that follow, and that the stream ends with STOP. It decodes nothing.
func scanPickle(data []byte) (int, error) {
	pos := 0
	for pos < len(data) {
		op := data[pos]
		pos++
		e := opcodes[op]
		if !e.known {
			return 0, fmt.Errorf("%w: unknown pickle opcode 0x%02x at offset %d", ErrCorrupt, op, pos-1)
		}
		if op == '.' {
			return pos, nil
		}
		rest := len(data) - pos
		var skip uint64
		switch e.arg.kind {
		case argFixed:
			skip = uint64(e.arg.n)
		case argLine, argLine2:
			lines := 1
			if e.arg.kind == argLine2 {
				lines = 2
			}
			for range lines {
				i := bytes.IndexByte(data[pos:], '\n')
				if i < 0 {
					return 0, fmt.Errorf("%w: pickle opcode %q at offset %d: unterminated line", ErrTruncated, op, pos-1)
				}
				pos += i + 1
			}
			continue
		case argLen1:
			if rest < 1 {
				skip = 1
				break
			}
			skip = 1 + uint64(data[pos])
		case argLen4:
			if rest < 4 {
				skip = 4
				break
			}
			n := binary.LittleEndian.Uint32(data[pos:])
			if int32(n) < 0 {
				return 0, fmt.Errorf("%w: pickle opcode %q at offset %d: negative length", ErrCorrupt, op, pos-1)
			}
			skip = 4 + uint64(n)
		case argLen8, argFrame8:
			if rest < 8 {
				skip = 8
				break
			}
			n := binary.LittleEndian.Uint64(data[pos:])
			if n > uint64(rest) {
				return 0, fmt.Errorf("%w: pickle opcode 0x%02x at offset %d declares %d bytes, %d remain", ErrTruncated, op, pos-1, n, rest-8)
			}
			skip = 8
			if e.arg.kind == argLen8 {
				skip += n
			}
		}
		if skip > uint64(rest) {
			return 0, fmt.Errorf("%w: pickle opcode 0x%02x at offset %d needs %d bytes, %d remain", ErrTruncated, op, pos-1, skip, rest)
		}
		pos += int(skip)
	}
	return 0, fmt.Errorf("%w: pickle ends without STOP", ErrTruncated)
}
