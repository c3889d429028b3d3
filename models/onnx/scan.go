package onnx

import (
	"fmt"
	"reflect"

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
	// DecodeSlack and DecodeFactor bound the memory that decoding the
	// file may take, as counted before decoding: DecodeSlack plus
	// DecodeFactor bytes per byte of the file. A model's weights decode to
	// about their own size; a file of many small messages decodes to
	// many times its size, and is refused before it is decoded.
	DecodeSlack  = 64 << 20
	DecodeFactor = 3
)

// census is what decoding a file would allocate, counted from its wire
// format without decoding it.
type census struct {
	nodes, messages int
	bytes           int64 // heap bytes, an upper estimate
}

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

// scanDepth bounds the scan's stack: onnxpb's messages nest at most six
// deep, so a deeper one cannot occur; it is checked all the same.
const scanDepth = 8

// scan counts the messages and the decoded size of a ModelProto in data,
// walking its wire format with onnxpb's descriptors and an explicit stack
// no deeper than the messages nest. Fields onnxpb does not declare are
// skipped as decoding skips them. It stops at the first limit exceeded.
func scan(data []byte) (census, error) {
	var c census
	limit := int64(DecodeSlack) + DecodeFactor*int64(len(data))
	type frame struct {
		md protoreflect.MessageDescriptor
		b  []byte
	}
	node := (&pb.NodeProto{}).ProtoReflect().Descriptor().FullName()
	stack := []frame{{(&pb.ModelProto{}).ProtoReflect().Descriptor(), data}}
	c.bytes = structSize[stack[0].md.FullName()]
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if len(f.b) == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		num, typ, n := protowire.ConsumeTag(f.b)
		if n < 0 {
			return c, fmt.Errorf("%w: %v in a %s", ErrFormat, protowire.ParseError(n), f.md.Name())
		}
		f.b = f.b[n:]
		m := protowire.ConsumeFieldValue(num, typ, f.b)
		if m < 0 {
			return c, fmt.Errorf("%w: %v in field %d of a %s", ErrFormat, protowire.ParseError(m), num, f.md.Name())
		}
		val := f.b[:m]
		f.b = f.b[m:]
		fd := f.md.Fields().ByNumber(num)
		if fd == nil {
			continue // not declared: skipped by decoding
		}
		var payload []byte
		if typ == protowire.BytesType {
			payload, _ = protowire.ConsumeBytes(val)
		}
		switch {
		case fd.Message() != nil:
			if typ != protowire.BytesType {
				continue // the wrong wire type: decoding skips it
			}
			c.messages++
			if fd.Message().FullName() == node {
				c.nodes++
			}
			// The struct, a pointer to it, and its share of a growing slice.
			c.bytes += structSize[fd.Message().FullName()] + 24
			if fd.ContainingOneof() != nil {
				c.bytes += 16 // the oneof's wrapper
			}
			if len(stack) >= scanDepth {
				return c, fmt.Errorf("%w: messages nested more than %d deep", ErrFormat, scanDepth)
			}
			stack = append(stack, frame{fd.Message(), payload})
		case fd.IsList() && typ == protowire.BytesType && fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind:
			// A packed list of numbers, each decoded to 4 or 8 bytes; a
			// growing slice may hold up to twice that.
			var count int64
			switch fd.Kind() {
			case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
				count = int64(len(payload) / 4)
			case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
				count = int64(len(payload) / 8)
			default:
				for _, b := range payload {
					if b < 0x80 {
						count++
					}
				}
			}
			c.bytes += 2 * 8 * count
		case fd.IsList():
			c.bytes += 2*24 + int64(len(payload)) // one element: a header and its bytes
		default:
			c.bytes += 24 + int64(len(payload)) // a pointer to the value, or a header and its bytes
		}
		switch {
		case c.nodes > MaxNodes:
			return c, fmt.Errorf("%w: more than MaxNodes = %d nodes (the recurrent models read here have a few hundred)", ErrLimit, MaxNodes)
		case c.messages > MaxMessages:
			return c, fmt.Errorf("%w: more than MaxMessages = %d messages", ErrLimit, MaxMessages)
		case c.bytes > limit:
			return c, fmt.Errorf("%w: decoding this %d-byte file would take more than %d bytes of memory "+
				"(DecodeSlack + DecodeFactor per byte of the file): it holds that many small messages or numbers", ErrLimit, len(data), limit)
		}
	}
	return c, nil
}
