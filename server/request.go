package server

import "rnnserve/server/internal/infer"

// The request and response types are package infer's, below the
// transports' codecs; these names keep them where users of package server
// find them. See infer.Request for how a transport uses them.
type (
	Request         = infer.Request
	Tensor          = infer.Tensor
	RequestedOutput = infer.RequestedOutput
	SequenceControl = infer.SequenceControl
	Params          = infer.Params
	Response        = infer.Response
	OutputTensor    = infer.OutputTensor
	Kind            = infer.Kind
)

// Kinds of tensor data.
const (
	KindUnsupported = infer.KindUnsupported
	KindInt         = infer.KindInt
	KindFloat       = infer.KindFloat
	KindBytes       = infer.KindBytes
)

// DatatypeKind tells which field of a Tensor holds elements of datatype
// dt, and the size of one in raw form (see infer.DatatypeKind).
func DatatypeKind(dt string) (Kind, int) { return infer.DatatypeKind(dt) }

// Elements is the number of elements a shape holds (see infer.Elements).
func Elements(shape []int64) (int, error) { return infer.Elements(shape) }
