// Package onnxbuild writes ONNX graphs for tests: short constructors for
// the proto2 messages of models/onnx/onnxpb, and the hostile files the
// loader must refuse (Hostile). It is not part of the server.
package onnxbuild

import (
	"encoding/binary"
	"math"
	"strconv"

	"google.golang.org/protobuf/proto"

	pb "rnnserve/models/onnx/onnxpb"
)

// Floats is a FLOAT tensor of the given dims whose data is v, in float_data.
func Floats(name string, dims []int64, v []float32) *pb.TensorProto {
	return &pb.TensorProto{Name: &name, Dims: dims, DataType: proto.Int32(int32(pb.TensorProto_FLOAT)), FloatData: v}
}

// Fill is a FLOAT tensor of the given dims holding from, from+step, ...
func Fill(name string, dims []int64, from, step float32) *pb.TensorProto {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = from + float32(i)*step
	}
	return Floats(name, dims, v)
}

// Ints is a 1-D INT64 tensor holding v.
func Ints(name string, v ...int64) *pb.TensorProto {
	return &pb.TensorProto{Name: &name, Dims: []int64{int64(len(v))}, DataType: proto.Int32(int32(pb.TensorProto_INT64)), Int64Data: v}
}

// Scalar is a 0-D INT64 tensor.
func Scalar(name string, v int64) *pb.TensorProto {
	return &pb.TensorProto{Name: &name, DataType: proto.Int32(int32(pb.TensorProto_INT64)), Int64Data: []int64{v}}
}

// External moves t's data (raw_data, or float_data as little-endian
// bytes) to location at offset and returns the bytes moved.
func External(t *pb.TensorProto, location string, offset int) []byte {
	raw := t.GetRawData()
	if raw == nil {
		for _, f := range t.GetFloatData() {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
		}
	}
	t.ExternalData = []*pb.StringStringEntryProto{Entry("location", location),
		Entry("offset", strconv.Itoa(offset)), Entry("length", strconv.Itoa(len(raw)))}
	t.DataLocation, t.RawData, t.FloatData = pb.TensorProto_EXTERNAL.Enum(), nil, nil
	return raw
}

// Entry is a key and value.
func Entry(k, v string) *pb.StringStringEntryProto {
	return &pb.StringStringEntryProto{Key: &k, Value: &v}
}

// Node is one node; "" in outputs is an absent optional output.
func Node(name, op string, in, out []string, attrs ...*pb.AttributeProto) *pb.NodeProto {
	n := &pb.NodeProto{OpType: &op, Input: in, Output: out, Attribute: attrs}
	if name != "" {
		n.Name = &name
	}
	return n
}

// Int is an INT attribute.
func Int(name string, v int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: &name, Type: pb.AttributeProto_INT.Enum(), I: &v}
}

// IntList is an INTS attribute.
func IntList(name string, v ...int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: &name, Type: pb.AttributeProto_INTS.Enum(), Ints: v}
}

// Float is a FLOAT attribute.
func Float(name string, v float32) *pb.AttributeProto {
	return &pb.AttributeProto{Name: &name, Type: pb.AttributeProto_FLOAT.Enum(), F: &v}
}

// String is a STRING attribute.
func String(name, v string) *pb.AttributeProto {
	return &pb.AttributeProto{Name: &name, Type: pb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// Strings is a STRINGS attribute.
func Strings(name string, v ...string) *pb.AttributeProto {
	a := &pb.AttributeProto{Name: &name, Type: pb.AttributeProto_STRINGS.Enum()}
	for _, s := range v {
		a.Strings = append(a.Strings, []byte(s))
	}
	return a
}

// Tensor is a TENSOR attribute (a Constant's value).
func Tensor(name string, t *pb.TensorProto) *pb.AttributeProto {
	return &pb.AttributeProto{Name: &name, Type: pb.AttributeProto_TENSOR.Enum(), T: t}
}

// Value is a graph input or output of a tensor type.
func Value(name string, elem pb.TensorProto_DataType) *pb.ValueInfoProto {
	return &pb.ValueInfoProto{Name: &name, Type: &pb.TypeProto{Value: &pb.TypeProto_TensorType{
		TensorType: &pb.TypeProto_Tensor{ElemType: proto.Int32(int32(elem))}}}}
}

// Model serializes a model of graph g at the given opset version.
func Model(g *pb.GraphProto, opset int64) []byte {
	data, err := proto.Marshal(&pb.ModelProto{IrVersion: proto.Int64(8), ProducerName: proto.String("onnxbuild"), Graph: g,
		OpsetImport: []*pb.OperatorSetIdProto{{Version: &opset}}})
	if err != nil {
		panic(err)
	}
	return data
}
