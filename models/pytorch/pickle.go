package pytorch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Limits on decoding one pickle. Memory is charged as values are made,
// before their bytes are held: each string's bytes, each container's and
// stack's slots, each memo entry. See the package documentation.
const (
	// PickleMemoryPerByte and PickleMemoryBase bound the memory decoding
	// a pickle may take: PickleMemoryBase plus PickleMemoryPerByte bytes
	// per byte of pickle, at most 528 MiB for a pickle of MaxPickleBytes.
	// The pickles torch.save writes take 6 to 9 bytes per byte (a
	// state_dict, a Lightning checkpoint, a checkpoint holding long lists).
	PickleMemoryPerByte = 32
	PickleMemoryBase    = 16 << 20
	// MaxPickleMarks bounds the MARKs open at once (the nesting of
	// tuples, lists and dicts being built); a state_dict nests a few.
	MaxPickleMarks = 1024
	// MaxIntBytes bounds an integer's encoding: 256 bytes of LONG1 or
	// LONG4 (2048 bits), 256 digits of text.
	MaxIntBytes = 256
)

// Values a pickle decodes to. Python's None, bool, int, float, str and
// bytes are Go's nil, bool, int64 (or *longInt beyond 64 bits), float64,
// string and []byte.
type (
	// tuple is a Python tuple.
	tuple []any
	// list is a Python list (or set, which a state_dict never holds but a
	// training checkpoint might): mutable, so a pointer.
	list struct{ items []any }
	// dict is a Python dict or collections.OrderedDict: its items in the
	// order they were set (later duplicates kept; collect refuses them).
	dict struct{ keys, values []any }
	// longInt is an integer wider than 64 bits; only its size is kept,
	// since no value a state_dict needs is one.
	longInt struct{ size int }
	// global is a class or function a GLOBAL opcode named and the allow
	// list resolved.
	global struct {
		module, name string
		call         func(u *unpickler, args tuple) (any, error) // nil: not callable
	}
	// inert is what one of a few built-in names that old pickles use
	// (builtins.list, copy_reg._reconstructor, ...) builds: nothing at
	// all. collect refuses it inside a state_dict.
	inert struct{ from string }
)

// unpickler decodes one pickle held in memory. It runs nothing from the
// pickle: the classes a GLOBAL names resolve through the allow list
// (findGlobal) to Go functions of this package, or are refused.
type unpickler struct {
	data  []byte
	pos   int
	stack []any
	marks []int // stack heights at the open MARKs
	memo  []any // unset entries hold memoHole{}
	// spent is the memory charged so far; budget is the most allowed.
	spent, budget int64
	// persistent resolves a persistent id (a storage) to a value.
	persistent func(u *unpickler, pid any) (any, error)
	// ctx carries what the torch functions need: the storages seen, the
	// bytes claimed by tensors.
	ctx *loadContext
}

func newUnpickler(data []byte, ctx *loadContext) *unpickler {
	return &unpickler{
		data:   data,
		budget: PickleMemoryBase + PickleMemoryPerByte*int64(len(data)),
		ctx:    ctx,
	}
}

// charge counts n bytes against the memory budget before they are
// allocated. Everything allocated is charged and nothing is given back:
// the budget bounds what decoding allocates in all, and so its peak.
func (u *unpickler) charge(n int64) error {
	u.spent += n
	if u.spent > u.budget {
		return fmt.Errorf("%w: decoding the pickle of %d bytes needs more than %d bytes of memory (%d bytes of pickle may take %d bytes per byte, plus %d MiB)",
			ErrTooLarge, len(u.data), u.budget, len(u.data), PickleMemoryPerByte, PickleMemoryBase>>20)
	}
	return nil
}

// endError is a pickle that runs past the end of its bytes.
type endError struct{ msg string }

func (e *endError) Error() string { return "pytorch: checkpoint truncated: " + e.msg }

// Is makes errors.Is(err, ErrTruncated) true.
func (e *endError) Is(target error) bool { return target == ErrTruncated }

// slot is the memory charged per stack, container or memo slot.
const slot = 16

// load decodes the pickle at the start of data and returns its value and
// the offset just past its STOP.
func (u *unpickler) load() (any, int, error) {
	for {
		if u.pos >= len(u.data) {
			return nil, 0, &endError{"pickle ends without STOP"}
		}
		at := u.pos
		op := u.data[u.pos]
		u.pos++
		done, err := u.step(op)
		if err != nil {
			return nil, 0, fmt.Errorf("%w (pickle opcode %s at offset %d)", err, opName(op), at)
		}
		if done {
			v, err := u.pop()
			if err != nil || len(u.stack) != 0 || len(u.marks) != 0 {
				return nil, 0, fmt.Errorf("%w: STOP at offset %d with %d values and %d marks left on the stack", ErrCorrupt, at, len(u.stack)+1, len(u.marks))
			}
			return v, u.pos, nil
		}
	}
}

// take returns the next n bytes of the pickle, without copying.
func (u *unpickler) take(n uint64) ([]byte, error) {
	if n > uint64(len(u.data)-u.pos) {
		return nil, &endError{fmt.Sprintf("declares %d bytes, %d remain", n, len(u.data)-u.pos)}
	}
	b := u.data[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return b, nil
}

// line returns the bytes up to the next newline (not included), at most
// max long.
func (u *unpickler) line(max int) (string, error) {
	rest := u.data[u.pos:min(len(u.data), u.pos+max+1)]
	i := bytes.IndexByte(rest, '\n')
	if i < 0 {
		if len(rest) > max {
			return "", fmt.Errorf("%w: a text argument longer than %d bytes", ErrCorrupt, max)
		}
		return "", &endError{"unterminated line"}
	}
	u.pos += i + 1
	return string(rest[:i]), nil
}

func (u *unpickler) length(size int) (uint64, error) {
	b, err := u.take(uint64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	}
	return binary.LittleEndian.Uint64(b), nil
}

// counted returns the bytes of an opcode's length-prefixed argument.
func (u *unpickler) counted(op byte) ([]byte, error) {
	n, err := u.length(argSize(op))
	if err != nil {
		return nil, err
	}
	return u.take(n)
}

func (u *unpickler) push(v any) error {
	var err error
	u.stack, err = appendCharged(u, u.stack, v)
	return err
}

// appendCharged appends items to s, charging a new backing array before
// it allocates one (doubling, as append does).
func appendCharged[T any](u *unpickler, s []T, items ...T) ([]T, error) {
	if n := len(s) + len(items); n > cap(s) {
		c := max(2*cap(s), n, 4)
		var zero T
		if err := u.charge(int64(c) * int64(unsafe.Sizeof(zero))); err != nil {
			return s, err
		}
		grown := make([]T, len(s), c)
		copy(grown, s)
		s = grown
	}
	return append(s, items...), nil
}

func (u *unpickler) base() int {
	if len(u.marks) == 0 {
		return 0
	}
	return u.marks[len(u.marks)-1]
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) <= u.base() {
		return nil, fmt.Errorf("%w: stack underflow", ErrCorrupt)
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) <= u.base() {
		return nil, fmt.Errorf("%w: stack underflow", ErrCorrupt)
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the values above the last MARK (a copy, charged) and
// closes it.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, fmt.Errorf("%w: no MARK open", ErrCorrupt)
	}
	b := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := u.stack[b:]
	if err := u.charge(slot * int64(len(items))); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	copy(out, items)
	clear(items)
	u.stack = u.stack[:b]
	return out, nil
}

func (u *unpickler) str(b []byte) (string, error) {
	if err := u.charge(int64(len(b)) + slot); err != nil {
		return "", err
	}
	return string(b), nil
}

// step runs one opcode; done is true after STOP.
func (u *unpickler) step(op byte) (done bool, err error) {
	switch op {
	case '.': // STOP
		return true, nil
	case 0x80: // PROTO
		b, err := u.take(1)
		if err != nil {
			return false, err
		}
		if b[0] > 5 {
			return false, fmt.Errorf("%w: pickle protocol %d (at most 5)", ErrCorrupt, b[0])
		}
	case 0x95: // FRAME: a length, then the frame's opcodes inline
		n, err := u.length(8)
		if err != nil {
			return false, err
		}
		if n > uint64(len(u.data)-u.pos) {
			return false, &endError{fmt.Sprintf("frame of %d bytes, %d remain", n, len(u.data)-u.pos)}
		}
	case '(': // MARK
		if len(u.marks) >= MaxPickleMarks {
			return false, fmt.Errorf("%w: more than %d MARKs open at once (MaxPickleMarks)", ErrTooLarge, MaxPickleMarks)
		}
		if u.marks, err = appendCharged(u, u.marks, len(u.stack)); err != nil {
			return false, err
		}
	case '0': // POP
		_, err = u.pop()
	case '1': // POP_MARK
		_, err = u.popMark()
	case '2': // DUP
		var v any
		if v, err = u.top(); err == nil {
			err = u.push(v)
		}
	case 'N':
		err = u.push(nil)
	case 0x88:
		err = u.push(true)
	case 0x89:
		err = u.push(false)
	case 'K', 'M', 'J': // BININT1, BININT2, BININT
		b, err := u.take(uint64(argSize(op)))
		if err != nil {
			return false, err
		}
		var v int64
		switch op {
		case 'K':
			v = int64(b[0])
		case 'M':
			v = int64(binary.LittleEndian.Uint16(b))
		default:
			v = int64(int32(binary.LittleEndian.Uint32(b)))
		}
		return false, u.pushInt(v)
	case 0x8a, 0x8b: // LONG1, LONG4
		n, err := u.length(argSize(op))
		if err != nil {
			return false, err
		}
		if n > MaxIntBytes {
			return false, fmt.Errorf("%w: an integer of %d bytes (MaxIntBytes %d)", ErrTooLarge, n, MaxIntBytes)
		}
		b, err := u.take(n)
		if err != nil {
			return false, err
		}
		return false, u.pushLong(b)
	case 'I': // INT, text; "00" and "01" are False and True
		s, err := u.line(MaxIntBytes)
		if err != nil {
			return false, err
		}
		switch s {
		case "00":
			return false, u.push(false)
		case "01":
			return false, u.push(true)
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return false, fmt.Errorf("%w: INT argument is not a 64-bit integer", ErrCorrupt)
		}
		return false, u.pushInt(v)
	case 'L': // LONG, text with an optional L suffix
		s, err := u.line(MaxIntBytes)
		if err != nil {
			return false, err
		}
		s = trimSuffix(s, "L")
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			return false, u.pushInt(v)
		}
		for i, c := range []byte(s) {
			if (c < '0' || c > '9') && !(i == 0 && c == '-') || s == "-" || s == "" {
				return false, fmt.Errorf("%w: LONG argument is not an integer", ErrCorrupt)
			}
		}
		return false, u.pushNew(&longInt{size: len(s)})
	case 'G': // BINFLOAT, big-endian
		b, err := u.take(8)
		if err != nil {
			return false, err
		}
		return false, u.pushFloat(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case 'F': // FLOAT, text
		s, err := u.line(64)
		if err != nil {
			return false, err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false, fmt.Errorf("%w: FLOAT argument is not a number", ErrCorrupt)
		}
		return false, u.pushFloat(f)
	case 'X', 0x8c, 0x8d, 'T', 'U': // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING
		b, err := u.counted(op)
		if err != nil {
			return false, err
		}
		if (op == 'X' || op == 0x8c || op == 0x8d) && !utf8.Valid(b) {
			return false, fmt.Errorf("%w: a str that is not valid UTF-8", ErrCorrupt)
		}
		s, err := u.str(b)
		if err != nil {
			return false, err
		}
		return false, u.push(s)
	case 'B', 'C', 0x8e, 0x96: // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
		b, err := u.counted(op)
		if err != nil {
			return false, err
		}
		if err := u.charge(int64(len(b)) + slot); err != nil {
			return false, err
		}
		return false, u.push(bytes.Clone(b))
	case ')': // EMPTY_TUPLE
		err = u.push(tuple(nil))
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		n := int(op - 0x84)
		if len(u.stack)-u.base() < n {
			return false, fmt.Errorf("%w: stack underflow", ErrCorrupt)
		}
		if err := u.charge(slot * int64(n)); err != nil {
			return false, err
		}
		t := make(tuple, n)
		copy(t, u.stack[len(u.stack)-n:])
		u.stack = u.stack[:len(u.stack)-n]
		err = u.push(t)
	case 't': // TUPLE
		var items []any
		if items, err = u.popMark(); err == nil {
			err = u.push(tuple(items))
		}
	case ']', 0x8f: // EMPTY_LIST, EMPTY_SET
		err = u.pushNew(&list{})
	case 'l', 0x91: // LIST, FROZENSET
		var items []any
		if items, err = u.popMark(); err == nil {
			err = u.pushNew(&list{items: items})
		}
	case '}': // EMPTY_DICT
		err = u.pushNew(&dict{})
	case 'd': // DICT
		var items []any
		if items, err = u.popMark(); err == nil {
			d := &dict{}
			if err = u.setItems(d, items); err == nil {
				err = u.pushNew(d)
			}
		}
	case 'a': // APPEND
		var v, l any
		if v, err = u.pop(); err == nil {
			if l, err = u.top(); err == nil {
				err = u.appendTo(l, []any{v})
			}
		}
	case 'e', 0x90: // APPENDS, ADDITEMS
		var items []any
		var l any
		if items, err = u.popMark(); err == nil {
			if l, err = u.top(); err == nil {
				err = u.appendTo(l, items)
			}
		}
	case 's': // SETITEM
		var k, v, d any
		if v, err = u.pop(); err == nil {
			if k, err = u.pop(); err == nil {
				if d, err = u.top(); err == nil {
					err = u.setItemsOf(d, []any{k, v})
				}
			}
		}
	case 'u': // SETITEMS
		var items []any
		var d any
		if items, err = u.popMark(); err == nil {
			if d, err = u.top(); err == nil {
				err = u.setItemsOf(d, items)
			}
		}
	case 'h', 'j', 'g': // BINGET, LONG_BINGET, GET
		var i uint64
		if i, err = u.memoIndex(op); err == nil {
			if i >= uint64(len(u.memo)) || u.memo[i] == (memoHole{}) {
				return false, fmt.Errorf("%w: memo entry %d is not set", ErrCorrupt, i)
			}
			err = u.push(u.memo[i])
		}
	case 'q', 'r', 'p': // BINPUT, LONG_BINPUT, PUT
		var i uint64
		if i, err = u.memoIndex(op); err == nil {
			err = u.memoize(i)
		}
	case 0x94: // MEMOIZE
		err = u.memoize(uint64(len(u.memo)))
	case 'c': // GLOBAL: module and name on two lines
		module, err := u.line(256)
		if err != nil {
			return false, err
		}
		name, err := u.line(256)
		if err != nil {
			return false, err
		}
		return false, u.pushGlobal(module, name)
	case 0x93: // STACK_GLOBAL
		name, err := u.pop()
		if err != nil {
			return false, err
		}
		module, err := u.pop()
		if err != nil {
			return false, err
		}
		m, ok1 := module.(string)
		n, ok2 := name.(string)
		if !ok1 || !ok2 {
			return false, fmt.Errorf("%w: STACK_GLOBAL of %s and %s, want two str", ErrCorrupt, summary(module), summary(name))
		}
		return false, u.pushGlobal(m, n)
	case 'R': // REDUCE
		args, err := u.pop()
		if err != nil {
			return false, err
		}
		f, err := u.pop()
		if err != nil {
			return false, err
		}
		g, ok := f.(*global)
		if !ok || g.call == nil {
			return false, fmt.Errorf("%w: REDUCE calls %s, not an allowed callable", ErrCorrupt, summary(f))
		}
		a, ok := args.(tuple)
		if !ok {
			return false, fmt.Errorf("%w: REDUCE of %s.%s with %s, want a tuple of arguments", ErrCorrupt, g.module, g.name, summary(args))
		}
		v, err := g.call(u, a)
		if err != nil {
			return false, err
		}
		return false, u.push(v)
	case 'Q': // BINPERSID
		pid, err := u.pop()
		if err != nil {
			return false, err
		}
		if u.persistent == nil {
			return false, fmt.Errorf("%w: a persistent id where none is expected", ErrContent)
		}
		v, err := u.persistent(u, pid)
		if err != nil {
			return false, err
		}
		return false, u.push(v)
	case 'b': // BUILD: set an object's state
		state, err := u.pop()
		if err != nil {
			return false, err
		}
		obj, err := u.top()
		if err != nil {
			return false, err
		}
		// torch.save sets an OrderedDict's attributes (_metadata) so; the
		// attributes are not needed, and nothing else takes a state.
		if _, ok := obj.(*dict); !ok {
			return false, fmt.Errorf("%w: BUILD sets the state of %s to %s", ErrContent, summary(obj), summary(state))
		}
	default:
		if name, ok := refused[op]; ok {
			return false, fmt.Errorf("%w: pickle opcode %s, which a PyTorch checkpoint does not use", ErrCorrupt, name)
		}
		return false, fmt.Errorf("%w: unknown pickle opcode 0x%02x", ErrCorrupt, op)
	}
	return false, err
}

// refused are the opcodes of the pickle protocols that torch.save never
// writes and this unpickler does not take.
var refused = map[byte]string{
	'S': "STRING", 'V': "UNICODE", 'P': "PERSID", 'i': "INST", 'o': "OBJ",
	0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
	0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}

// argSize is the size of an opcode's fixed argument or length prefix.
func argSize(op byte) int {
	switch op {
	case 'K', 0x8a, 0x8c, 'U', 'C':
		return 1
	case 'M':
		return 2
	case 'J', 0x8b, 'X', 'T', 'B':
		return 4
	}
	return 8
}

func opName(op byte) string {
	if op >= 0x20 && op < 0x7f {
		return strconv.QuoteRune(rune(op))
	}
	return fmt.Sprintf("0x%02x", op)
}

func trimSuffix(s, suffix string) string {
	if len(s) > 0 && s[len(s)-1:] == suffix {
		return s[:len(s)-1]
	}
	return s
}

func (u *unpickler) pushInt(v int64) error {
	if err := u.charge(8); err != nil { // boxed in the interface
		return err
	}
	return u.push(v)
}

func (u *unpickler) pushFloat(f float64) error {
	if err := u.charge(8); err != nil {
		return err
	}
	return u.push(f)
}

// pushLong pushes a LONG1/LONG4 integer: an int64 when it fits.
func (u *unpickler) pushLong(b []byte) error {
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 { // sign-extend
			v |= ^uint64(0) << (8 * len(b))
		}
		return u.pushInt(int64(v))
	}
	return u.pushNew(&longInt{size: len(b)})
}

// pushNew pushes a new container, charging its header.
func (u *unpickler) pushNew(v any) error {
	if err := u.charge(48); err != nil {
		return err
	}
	return u.push(v)
}

func (u *unpickler) appendTo(target any, items []any) error {
	l, ok := target.(*list)
	if !ok {
		return fmt.Errorf("%w: APPEND to %s, not a list", ErrCorrupt, summary(target))
	}
	var err error
	l.items, err = appendCharged(u, l.items, items...)
	return err
}

func (u *unpickler) setItemsOf(target any, items []any) error {
	d, ok := target.(*dict)
	if !ok {
		return fmt.Errorf("%w: SETITEM on %s, not a dict", ErrCorrupt, summary(target))
	}
	return u.setItems(d, items)
}

func (u *unpickler) setItems(d *dict, items []any) error {
	if len(items)%2 != 0 {
		return fmt.Errorf("%w: %d values for a dict's keys and values", ErrCorrupt, len(items))
	}
	for i := 0; i < len(items); i += 2 {
		var err error
		if d.keys, err = appendCharged(u, d.keys, items[i]); err != nil {
			return err
		}
		if d.values, err = appendCharged(u, d.values, items[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (u *unpickler) memoIndex(op byte) (uint64, error) {
	switch op {
	case 'h', 'q':
		return u.length(1)
	case 'j', 'r':
		return u.length(4)
	}
	s, err := u.line(20)
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: memo index is not a number", ErrCorrupt)
	}
	return i, nil
}

// memoHole marks a memo entry not set. Pickles number their memo entries
// from 0 up; one that skips ahead is charged for the entries it skips.
type memoHole struct{}

func (u *unpickler) memoize(i uint64) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	if i >= uint64(len(u.memo)) {
		if i >= uint64(u.budget/slot) { // more entries than the budget holds
			return u.charge(u.budget + 1)
		}
		if need := int(i) + 1; need > cap(u.memo) {
			c := max(2*cap(u.memo), need, 16)
			if err := u.charge(slot * int64(c)); err != nil {
				return err
			}
			grown := make([]any, len(u.memo), c)
			copy(grown, u.memo)
			u.memo = grown
		}
		for uint64(len(u.memo)) <= i {
			u.memo = append(u.memo, memoHole{})
		}
	}
	u.memo[i] = v
	return nil
}

func (u *unpickler) pushGlobal(module, name string) error {
	g, err := findGlobal(module, name)
	if err != nil {
		return err
	}
	return u.pushNew(g)
}

// summary describes a pickled value for an error message in a few words,
// whatever its size or depth: its type and, for a container, how many
// items it holds at its top level; for a str, its length and at most its
// first 40 bytes.
func summary(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int64:
		return "the int " + strconv.FormatInt(x, 10)
	case *longInt:
		return fmt.Sprintf("an int of %d bytes", x.size)
	case float64:
		return "a float"
	case string:
		if len(x) > 40 {
			return fmt.Sprintf("a str of %d bytes starting %q", len(x), x[:40])
		}
		return strconv.Quote(x)
	case []byte:
		return fmt.Sprintf("bytes of length %d", len(x))
	case tuple:
		return fmt.Sprintf("a tuple of %d items", len(x))
	case *list:
		return fmt.Sprintf("a list of %d items", len(x.items))
	case *dict:
		return fmt.Sprintf("a dict of %d items", len(x.keys))
	case *global:
		return "the class " + x.module + "." + x.name
	case *inert:
		return "an object built by " + x.from
	case *tensor:
		return "a tensor"
	case *storage:
		return "a storage"
	}
	return fmt.Sprintf("a value of type %T", v)
}
