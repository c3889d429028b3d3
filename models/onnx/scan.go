package onnx

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "rnnserve/models/onnx/onnxpb"
)

// Limits on what an ONNX file can make the loader do. Each is checked
// before the work or the memory it bounds; a file over one is refused
// with an error matching ErrLimit that names it.
const (
	// MaxModelBytes bounds the model file: protobuf's own limit on one
	// message (ONNX keeps larger weights in external data files).
	MaxModelBytes = 1<<31 - 1
	// MaxNodes bounds the graph's nodes. A recurrent model this package
	// recognises has about 15 per layer.
	MaxNodes = 1 << 16
	// MaxMessages bounds the messages of every kind the file holds
	// (nodes, attributes, tensors, inputs, outputs, key-value entries),
	// counted before decoding.
	MaxMessages = 1 << 20
	// MaxElements bounds one tensor's element count (rnn's limit on one
	// weight matrix).
	MaxElements = 1 << 34
	// MaxExternalBytes bounds the external data files read for one model,
	// all together.
	MaxExternalBytes = 1 << 34
	// MaxExternalFiles bounds the external data files one model reads,
	// each held open until its weights are read: onnx.save writes one file
	// per tensor at most, and a recurrent model has a few a layer.
	MaxExternalFiles = 1024
	// DecodeSlack and DecodeFactor bound the memory that decoding the
	// file's graph may take, as counted before decoding: DecodeSlack plus
	// DecodeFactor bytes per byte of the file. Tensor data in raw_data or
	// packed float_data and double_data are left in the file and cost
	// nothing here; a file of many small messages or numbers decodes to
	// many times its size, and is refused before it is decoded.
	DecodeSlack  = 64 << 20
	DecodeFactor = 3
)

// elideMin is the size above which a tensor's data in raw_data, packed
// float_data or packed double_data are left in the file by the walk:
// decoding sees where they are, and the weights are read from there once,
// into the network's own buffers. Smaller ones (shapes, axes, a
// ConstantOfShape value: at most 64 integers) are decoded with the graph.
const elideMin = 512

// windowBytes is how much of the model file the walk holds at a time.
const windowBytes = 64 << 10

// census is what decoding a file's graph would allocate, counted from its
// wire format without decoding it.
type census struct {
	nodes, messages int
	bytes           int64 // heap bytes, an upper estimate
}

// payload is a tensor's data left in the file by the walk: n bytes at
// off, the value of field raw_data, float_data or double_data.
type payload struct {
	field  protowire.Number
	off, n int64
}

// markerField is the field under which the walk tells a TensorProto
// where its data were: a varint, the payload's index. onnxpb declares no
// such field and the walk drops every field onnxpb does not declare, so
// nothing in the file can write it; decoding keeps it among the
// TensorProto's unknown fields (see tensors.payload).
const markerField = protowire.MaxValidNumber

var (
	modelMD  = (&pb.ModelProto{}).ProtoReflect().Descriptor()
	nodeMD   = (&pb.NodeProto{}).ProtoReflect().Descriptor()
	tensorMD = (&pb.TensorProto{}).ProtoReflect().Descriptor()
	// TensorProto's fields whose data the walk may leave in the file.
	rawDataField    = tensorMD.Fields().ByName("raw_data").Number()
	floatDataField  = tensorMD.Fields().ByName("float_data").Number()
	doubleDataField = tensorMD.Fields().ByName("double_data").Number()
)

// structSize is the size of each onnxpb message's Go struct.
var structSize = map[protoreflect.FullName]int64{}

func init() {
	fds := pb.File_onnx_proto.Messages()
	var add func(ms protoreflect.MessageDescriptors)
	add = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			md := ms.Get(i)
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err != nil {
				panic(err)
			}
			structSize[md.FullName()] = int64(reflect.TypeOf(mt.Zero().Interface()).Elem().Size())
			add(md.Messages())
		}
	}
	add(fds)
}

// scanDepth bounds the walk's stack: onnxpb's messages nest at most six
// deep, so a deeper one cannot occur; it is checked all the same.
const scanDepth = 8

// frame is a message the walk is in.
type frame struct {
	md  protoreflect.MessageDescriptor
	end int64 // where it ends in the file
	// at is where its length goes in the shallow encoding: room bytes
	// written when the message ends, its encoding following them.
	at, room int
	// data is 1 + the index of the payload left out of this TensorProto;
	// 0: none.
	data int
}

// A message's length in the shallow encoding is written when the message
// ends, in room left for it when it began, so that nothing after it moves:
// a varint padded to the size of the largest length the message can have
// (protobuf reads a varint of up to ten bytes, padded or not). A message of
// L bytes in the file is at most 3L bytes in the shallow encoding (the
// length of a message nested in it may take a byte more than in the file,
// where the field takes at least three; every other field keeps its size
// or shrinks), so the room is the size of 3L as a varint.
func room(fileLen int64) int { return protowire.SizeVarint(uint64(3 * fileLen)) }

// putLen writes n as a varint of exactly len(b) bytes, or reports that it
// does not fit.
func putLen(b []byte, n int) bool {
	for i := range len(b) - 1 {
		b[i] = byte(n) | 0x80
		n >>= 7
	}
	b[len(b)-1] = byte(n)
	return n < 0x80
}

// walk reads a ModelProto's wire format from r, front to back through a
// window of windowBytes, and writes its shallow encoding: every field
// onnxpb does not declare (or of the wrong wire type) dropped, as
// decoding would drop it, and every tensor's data of more than elide
// bytes in raw_data, packed float_data or packed double_data left out,
// the TensorProto marked (markerField) with the index of the payload that
// says where they are. Decoding the shallow encoding makes the graph
// without its weights; the walk holds the window, the shallow encoding
// (written once, each message's length filled in when it ends) and a
// stack no deeper than the messages nest. It counts the messages
// and the memory decoding will take (census) as it goes and stops at the
// first limit exceeded, before reading what would exceed it.
func walk(r io.ReaderAt, size int64, elide int64) ([]byte, []payload, census, error) {
	var c census
	limit := int64(DecodeSlack) + DecodeFactor*size
	cur := &cursor{r: r, size: size, buf: make([]byte, min(windowBytes, size))}
	stack := []frame{{md: modelMD, end: size}}
	c.bytes = structSize[modelMD.FullName()]
	var payloads []payload
	var out []byte // the shallow encoding
	for {
		f := &stack[len(stack)-1]
		if cur.pos == f.end {
			if len(stack) == 1 {
				return out, payloads, c, nil
			}
			if f.data > 0 {
				out = protowire.AppendTag(out, markerField, protowire.VarintType)
				out = protowire.AppendVarint(out, uint64(f.data-1))
			}
			if !putLen(out[f.at:f.at+f.room], len(out)-f.at-f.room) {
				return nil, nil, c, fmt.Errorf("onnx: internal error: a %s of %d bytes in the shallow encoding", f.md.Name(), len(out)-f.at-f.room)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		num, typ, err := cur.tag(f.end)
		if err != nil {
			return nil, nil, c, malformed(err, f.md)
		}
		var v uint64 // a varint or fixed value
		var n int64  // a bytes value's length
		switch typ {
		case protowire.VarintType:
			v, err = cur.varint(f.end)
		case protowire.Fixed32Type:
			v, err = cur.fixed(4, f.end)
		case protowire.Fixed64Type:
			v, err = cur.fixed(8, f.end)
		case protowire.BytesType:
			if v, err = cur.varint(f.end); err == nil {
				if n = int64(v); v > uint64(f.end-cur.pos) {
					err = parseError{io.ErrUnexpectedEOF}
				}
			}
		case protowire.StartGroupType:
			err = cur.skipGroup(num, f.end) // onnxpb declares no group: dropped
		default: // an end group outside a group, or a reserved type
			err = parseError{protowire.ParseError(protowire.ConsumeFieldValue(num, typ, nil))}
		}
		if err != nil {
			return nil, nil, c, malformed(err, f.md)
		}
		fd := f.md.Fields().ByNumber(num)
		if fd == nil || typ == protowire.StartGroupType || !wireFits(fd, typ) {
			cur.pos += n // not declared: dropped, as decoding drops it
			continue
		}
		switch {
		case fd.Message() != nil:
			c.messages++
			if fd.Message().FullName() == nodeMD.FullName() {
				c.nodes++
			}
			// The struct, a pointer to it, and its share of a growing slice.
			c.bytes += structSize[fd.Message().FullName()] + 24
			if fd.ContainingOneof() != nil {
				c.bytes += 16 // the oneof's wrapper
			}
			if len(stack) >= scanDepth {
				return nil, nil, c, fmt.Errorf("%w: messages nested more than %d deep", ErrFormat, scanDepth)
			}
		case f.md == tensorMD && typ == protowire.BytesType && n > elide &&
			(num == rawDataField || num == floatDataField || num == doubleDataField):
			if f.data > 0 {
				return nil, nil, c, fmt.Errorf("%w: a tensor whose data are in two fields (%s and %s)", ErrUnsupported,
					tensorMD.Fields().ByNumber(payloads[f.data-1].field).Name(), fd.Name())
			}
			payloads = append(payloads, payload{field: num, off: cur.pos, n: n})
			f.data = len(payloads)
			cur.pos += n
			continue
		case fd.IsList() && typ == protowire.BytesType && fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind:
			// A packed list of numbers, each decoded to 4 or 8 bytes; a
			// growing slice may hold up to twice that.
			var count int64
			switch fd.Kind() {
			case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
				count = n / 4
			case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
				count = n / 8
			default:
				if count, err = cur.countVarints(n); err != nil {
					return nil, nil, c, err
				}
			}
			c.bytes += 2 * 8 * count
		case fd.IsList():
			c.bytes += 2*24 + n // one element: a header and its bytes
		default:
			c.bytes += 24 + n // a pointer to the value, or a header and its bytes
		}
		// The field in the shallow encoding.
		c.bytes += int64(protowire.SizeTag(num))
		switch {
		case fd.Message() != nil:
			c.bytes += int64(room(n))
		case typ == protowire.BytesType:
			c.bytes += int64(protowire.SizeVarint(uint64(n))) + n
		default:
			c.bytes += int64(protowire.SizeVarint(v)) // at most the 8 bytes of a fixed value
		}
		switch {
		case c.nodes > MaxNodes:
			return nil, nil, c, fmt.Errorf("%w: more than MaxNodes = %d nodes (the recurrent models read here have a few hundred)", ErrLimit, MaxNodes)
		case c.messages > MaxMessages:
			return nil, nil, c, fmt.Errorf("%w: more than MaxMessages = %d messages", ErrLimit, MaxMessages)
		case c.bytes > limit:
			return nil, nil, c, fmt.Errorf("%w: decoding this %d-byte file would take more than %d bytes of memory "+
				"(DecodeSlack + DecodeFactor per byte of the file): it holds that many small messages or numbers", ErrLimit, size, limit)
		}
		out = protowire.AppendTag(out, num, typ)
		if fd.Message() != nil {
			stack = append(stack, frame{md: fd.Message(), end: cur.pos + n, at: len(out), room: room(n)})
			out = append(out, make([]byte, room(n))...)
			continue
		}
		switch typ {
		case protowire.VarintType:
			out = protowire.AppendVarint(out, v)
		case protowire.Fixed32Type:
			out = protowire.AppendFixed32(out, uint32(v))
		case protowire.Fixed64Type:
			out = protowire.AppendFixed64(out, v)
		case protowire.BytesType:
			out = protowire.AppendVarint(out, uint64(n))
			if out, err = cur.appendBytes(slices.Grow(out, int(n)), n); err != nil {
				return nil, nil, c, err
			}
		}
	}
}

// wireFits reports whether a field of wire type typ decodes as fd: its
// own type, or a packed list.
func wireFits(fd protoreflect.FieldDescriptor, typ protowire.Type) bool {
	var want protowire.Type
	switch fd.Kind() {
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		want = protowire.Fixed32Type
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		want = protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return typ == protowire.BytesType
	case protoreflect.GroupKind:
		return false
	default:
		want = protowire.VarintType
	}
	return typ == want || fd.IsList() && typ == protowire.BytesType
}

// parseError is the wire format broken where the walk read it.
type parseError struct{ err error }

func (e parseError) Error() string { return e.err.Error() }

// malformed says where the wire format is broken; other errors (reading
// the file) pass as they are.
func malformed(err error, md protoreflect.MessageDescriptor) error {
	var pe parseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: %v in a %s", ErrFormat, err, md.Name())
	}
	return err
}

// cursor reads a file's wire format front to back through a window.
type cursor struct {
	r    io.ReaderAt
	size int64
	pos  int64  // the next byte to read
	base int64  // the file offset of win[0]
	win  []byte // the file from base on
	buf  []byte // the window's memory
}

// peek returns the next min(n, end-pos) bytes, n at most windowBytes,
// without consuming them.
func (c *cursor) peek(n int, end int64) ([]byte, error) {
	want := min(int64(n), end-c.pos)
	if c.pos < c.base || c.pos+want > c.base+int64(len(c.win)) {
		k := min(int64(len(c.buf)), c.size-c.pos)
		m, err := c.r.ReadAt(c.buf[:k], c.pos)
		if int64(m) < k {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("onnx: read the model file at offset %d: %w (did it change while it was read?)", c.pos, err)
		}
		c.base, c.win = c.pos, c.buf[:k]
	}
	i := c.pos - c.base
	return c.win[i : i+want], nil
}

func (c *cursor) tag(end int64) (protowire.Number, protowire.Type, error) {
	b, err := c.peek(binaryMaxVarint, end)
	if err != nil {
		return 0, 0, err
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, parseError{protowire.ParseError(n)}
	}
	c.pos += int64(n)
	return num, typ, nil
}

const binaryMaxVarint = 10

func (c *cursor) varint(end int64) (uint64, error) {
	b, err := c.peek(binaryMaxVarint, end)
	if err != nil {
		return 0, err
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, parseError{protowire.ParseError(n)}
	}
	c.pos += int64(n)
	return v, nil
}

func (c *cursor) fixed(size int, end int64) (uint64, error) {
	b, err := c.peek(size, end)
	if err != nil {
		return 0, err
	}
	if len(b) < size {
		return 0, parseError{io.ErrUnexpectedEOF}
	}
	c.pos += int64(size)
	if size == 4 {
		v, _ := protowire.ConsumeFixed32(b)
		return uint64(v), nil
	}
	v, _ := protowire.ConsumeFixed64(b)
	return v, nil
}

// appendBytes appends the next n bytes to out.
func (c *cursor) appendBytes(out []byte, n int64) ([]byte, error) {
	for n > 0 {
		b, err := c.peek(windowBytes, c.pos+n)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
		c.pos += int64(len(b))
		n -= int64(len(b))
	}
	return out, nil
}

// countVarints counts the varints in the next n bytes (the bytes that end
// one), without consuming them.
func (c *cursor) countVarints(n int64) (int64, error) {
	start := c.pos
	defer func() { c.pos = start }()
	var count int64
	for end := c.pos + n; c.pos < end; {
		b, err := c.peek(windowBytes, end)
		if err != nil {
			return 0, err
		}
		for _, x := range b {
			if x < 0x80 {
				count++
			}
		}
		c.pos += int64(len(b))
	}
	return count, nil
}

// skipGroup skips a group whose start tag (field num) was just read,
// with the groups nested in it, up to its end tag; nesting is bounded as
// protobuf bounds it.
func (c *cursor) skipGroup(num protowire.Number, end int64) error {
	open := []protowire.Number{num}
	for len(open) > 0 {
		n, typ, err := c.tag(end)
		if err != nil {
			return err
		}
		switch typ {
		case protowire.StartGroupType:
			if len(open) >= protowire.DefaultRecursionLimit {
				return parseError{fmt.Errorf("parse error: groups nested more than %d deep", protowire.DefaultRecursionLimit)}
			}
			open = append(open, n)
		case protowire.EndGroupType:
			if n != open[len(open)-1] {
				return parseError{errors.New("mismatching end group marker")}
			}
			open = open[:len(open)-1]
		case protowire.VarintType:
			_, err = c.varint(end)
		case protowire.Fixed32Type:
			_, err = c.fixed(4, end)
		case protowire.Fixed64Type:
			_, err = c.fixed(8, end)
		case protowire.BytesType:
			var v uint64
			if v, err = c.varint(end); err == nil {
				if v > uint64(end-c.pos) {
					err = parseError{io.ErrUnexpectedEOF}
				}
				c.pos += int64(v)
			}
		default:
			err = parseError{protowire.ParseError(protowire.ConsumeFieldValue(n, typ, nil))}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
