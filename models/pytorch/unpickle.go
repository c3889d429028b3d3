package pytorch

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"rnnserve/models/safetensors"
)

// storageClass is an allowed torch.<Type>Storage class.
type storageClass struct {
	name  string
	dtype safetensors.DType
}

var storageClasses = map[string]safetensors.DType{
	"FloatStorage":    safetensors.F32,
	"HalfStorage":     safetensors.F16,
	"BFloat16Storage": safetensors.BF16,
	"DoubleStorage":   safetensors.F64,
	"LongStorage":     safetensors.I64,
	"IntStorage":      safetensors.I32,
	"ShortStorage":    safetensors.I16,
	"CharStorage":     safetensors.I8,
	"ByteStorage":     safetensors.U8,
	"BoolStorage":     safetensors.Bool,
}

// storage is a loaded storage: numel elements of dtype, little-endian.
type storage struct {
	dtype safetensors.DType
	numel int
	data  []byte
}

// tensor is what _rebuild_tensor_v2 returns: a checked view of a
// storage, copied out by bytes once every storage is loaded (the legacy
// format stores them after the object).
type tensor struct {
	st           *storage
	offset       int
	size, stride []int
	numel        int
}

// rebuildTensor is torch._utils._rebuild_tensor_v2(storage,
// storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
type rebuildTensor struct{}

func (rebuildTensor) Call(args ...any) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("%w: _rebuild_tensor_v2 with %d arguments", ErrContent, len(args))
	}
	st, ok := args[0].(*storage)
	if !ok {
		return nil, fmt.Errorf("%w: _rebuild_tensor_v2 of %s, not a storage", ErrContent, describe(args[0]))
	}
	offset, ok := smallInt(args[1])
	if !ok || offset < 0 {
		return nil, fmt.Errorf("%w: tensor storage offset %v", ErrContent, args[1])
	}
	size, err := intTuple(args[2], "size")
	if err != nil {
		return nil, err
	}
	stride, err := intTuple(args[3], "stride")
	if err != nil {
		return nil, err
	}
	return newView(st, offset, size, stride)
}

// rebuildParameter is torch._utils._rebuild_parameter(data,
// requires_grad, backward_hooks): an nn.Parameter is its data here.
type rebuildParameter struct{}

func (rebuildParameter) Call(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("%w: _rebuild_parameter without arguments", ErrContent)
	}
	t, ok := args[0].(*tensor)
	if !ok {
		return nil, fmt.Errorf("%w: _rebuild_parameter of %s, not a tensor", ErrContent, describe(args[0]))
	}
	return t, nil
}

// maxDims bounds a tensor's rank.
const maxDims = 16

// newView checks that the strided view (offset, size, stride) lies
// inside st and holds no more elements than st.
func newView(st *storage, offset int, size, stride []int) (*tensor, error) {
	if len(size) != len(stride) || len(size) > maxDims {
		return nil, fmt.Errorf("%w: tensor of size %v and stride %v", ErrContent, size, stride)
	}
	numel := 1
	for i, n := range size {
		if n < 0 || stride[i] < 0 {
			return nil, fmt.Errorf("%w: tensor of size %v and stride %v", ErrContent, size, stride)
		}
		numel = min(numel*min(n, st.numel+1), st.numel+1)
	}
	if numel > st.numel {
		return nil, fmt.Errorf("%w: tensor of size %v has more elements than its storage (%d): an expanded view; save t.contiguous()",
			ErrContent, size, st.numel)
	}
	t := &tensor{st: st, offset: offset, size: size, stride: stride, numel: numel}
	if numel == 0 {
		return t, nil
	}
	// The highest element the view reads must lie inside the storage.
	last := offset
	for i, n := range size {
		if n > 1 && stride[i] > 0 {
			if last >= st.numel || n-1 > (st.numel-1-last)/stride[i] {
				last = st.numel
				break
			}
			last += (n - 1) * stride[i]
		}
	}
	if last >= st.numel {
		return nil, fmt.Errorf("%w: tensor of size %v, stride %v and offset %d reaches past its storage of %d elements",
			ErrContent, size, stride, offset, st.numel)
	}
	return t, nil
}

// bytes copies the view out in row-major order.
func (t *tensor) bytes() []byte {
	es := t.st.dtype.Size()
	out := make([]byte, t.numel*es)
	if t.numel == 0 {
		return out
	}
	if contiguous(t.size, t.stride) {
		copy(out, t.st.data[t.offset*es:])
		return out
	}
	idx := make([]int, len(t.size))
	for i := 0; i < t.numel; i++ {
		src := t.offset
		for d, k := range idx {
			src += k * t.stride[d]
		}
		copy(out[i*es:(i+1)*es], t.st.data[src*es:])
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < t.size[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out
}

func contiguous(size, stride []int) bool {
	want := 1
	for i := len(size) - 1; i >= 0; i-- {
		if size[i] != 1 && stride[i] != want {
			return false
		}
		want *= size[i]
	}
	return true
}

// smallInt converts a pickled int that fits in an int32-safe range.
func smallInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, x >= -(1<<40) && x <= 1<<40
	case *big.Int:
		return 0, false
	}
	return 0, false
}

func intTuple(v any, what string) ([]int, error) {
	tup, ok := v.(*types.Tuple)
	if !ok {
		return nil, fmt.Errorf("%w: tensor %s %s, not a tuple", ErrContent, what, describe(v))
	}
	out := make([]int, tup.Len())
	for i := range out {
		n, ok := smallInt(tup.Get(i))
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s %v", ErrContent, what, tup)
		}
		out[i] = n
	}
	return out, nil
}

// findClass is the allow list; everything else is a *ClassError.
func findClass(module, name string) (any, error) {
	switch {
	case module == "torch._utils" && name == "_rebuild_tensor_v2":
		return rebuildTensor{}, nil
	case module == "torch._utils" && name == "_rebuild_parameter":
		return rebuildParameter{}, nil
	case module == "torch":
		if dt, ok := storageClasses[name]; ok {
			return &storageClass{name: name, dtype: dt}, nil
		}
	}
	return nil, &ClassError{Module: module, Name: name}
}

// loader fetches the bytes of the storage with the given key.
type loader func(key string, cls *storageClass, numel int) (*storage, error)

// unpickle decodes the pickle at the start of data (which scanPickle has
// checked), resolving storages through load, and recovering gopickle's
// panics on malformed input. It returns the object and the offset past
// the pickle's STOP.
func unpickle(data []byte, persistent func(pid any) (any, error)) (obj any, end int, err error) {
	end, err = scanPickle(data)
	if err != nil {
		return nil, 0, err
	}
	u := pickle.NewUnpickler(bytes.NewReader(data[:end]))
	u.FindClass = findClass
	u.PersistentLoad = persistent
	defer func() {
		if r := recover(); r != nil {
			obj, err = nil, fmt.Errorf("%w: malformed pickle (%v)", ErrCorrupt, r)
		}
	}()
	obj, err = u.Load()
	if err != nil {
		if errors.Is(err, ErrClass) || errors.Is(err, ErrContent) || errors.Is(err, ErrMissingRecord) ||
			errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTruncated) || errors.Is(err, ErrCorrupt) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return obj, end, nil
}

// describe names the Go type a pickled value decoded to, in Python terms.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case int, *big.Int:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a str"
	case bool:
		return "a bool"
	case []byte:
		return "bytes"
	case *types.Tuple:
		return "a tuple"
	case *types.List:
		return "a list"
	case *types.Dict, *types.OrderedDict:
		return "a dict"
	case *tensor:
		return "a tensor"
	case *storage:
		return "a storage"
	case *storageClass:
		return "the class torch." + x.name
	case *types.GenericObject:
		return "an object of class " + x.Class.Module + "." + x.Class.Name
	}
	return fmt.Sprintf("a value of type %T", v)
}
