package pytorch

import (
	"fmt"
	"io"

	"rnnserve/models/safetensors"
)

// MaxTensorBytesPerFileByte bounds the bytes the tensors of a state_dict
// may claim in all, per byte of the file: torch.save writes each storage
// once, and names that share one (tied weights, or one tensor under
// several names) claim it each time. A view that is not contiguous also
// claims the span of its storage it is gathered from, which may be far
// larger than its elements (two elements a storage apart). Checked before
// anything is read for a tensor, so reading and gathering the tensors
// handles at most this many bytes per byte of file. Each tensor also
// claims tensorEntryBytes, what its entry in the File takes, so that
// names of empty tensors cannot make the File many times the pickle.
const MaxTensorBytesPerFileByte = 4

// tensorEntryBytes is about what one name's tensor takes in a File (its
// safetensors.Tensor, shape, map entry and name), beside its data. A
// state_dict's pickle spends some 100 bytes a tensor on its name, storage
// and rebuild call, so a real one never comes near the bound by it.
const tensorEntryBytes = 256

// storageClasses are the torch.<Type>Storage classes and their dtypes.
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

// inertGlobals are built-in names that pickles of old Python objects use
// (copy_reg's protocol-0/1 object reconstruction). They build nothing:
// REDUCE of one yields an *inert value, which collect refuses inside a
// state_dict but tolerates elsewhere in a training checkpoint.
var inertGlobals = map[string]bool{
	"builtins.list": true, "builtins.dict": true, "__builtin__.object": true,
	"array._array_reconstructor": true, "copy_reg._reconstructor": true,
}

// findGlobal is the allow list; every other name is a *ClassError.
func findGlobal(module, name string) (*global, error) {
	g := &global{module: module, name: name}
	switch {
	case module == "torch._utils" && name == "_rebuild_tensor_v2":
		g.call = rebuildTensor
	case module == "torch._utils" && name == "_rebuild_parameter":
		g.call = rebuildParameter
	case module == "collections" && name == "OrderedDict":
		g.call = newOrderedDict
	case module == "torch" && storageClasses[name] != "":
		// A storage class is only named, in a persistent id.
	case inertGlobals[module+"."+name]:
		from := module + "." + name
		g.call = func(u *unpickler, _ tuple) (any, error) { return &inert{from: from}, nil }
	default:
		return nil, &ClassError{Module: module, Name: name}
	}
	return g, nil
}

// storageDType is the dtype of a storage class, or "".
func (g *global) storageDType() safetensors.DType {
	if g.module != "torch" {
		return ""
	}
	return storageClasses[g.name]
}

func newOrderedDict(u *unpickler, args tuple) (any, error) {
	if len(args) != 0 {
		return nil, fmt.Errorf("%w: collections.OrderedDict called with %d arguments, want none", ErrContent, len(args))
	}
	return &dict{}, u.charge(48)
}

// storage is a storage of a checkpoint: numel elements of dtype,
// little-endian, in the file at data (set when the storage's record is
// found: at once in a zip archive, after the object in the legacy
// format).
type storage struct {
	key   string
	dtype safetensors.DType
	numel int
	data  *io.SectionReader
}

// tensor is what _rebuild_tensor_v2 returns: a checked view of a storage.
type tensor struct {
	st           *storage
	offset       int
	size, stride []int
	numel        int
}

// loadContext is what decoding a checkpoint's object needs to know of
// the file.
type loadContext struct {
	fileSize int64
}

// maxDims bounds a tensor's rank.
const maxDims = 16

// rebuildTensor is torch._utils._rebuild_tensor_v2(storage,
// storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
func rebuildTensor(u *unpickler, args tuple) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("%w: _rebuild_tensor_v2 with %d arguments", ErrContent, len(args))
	}
	st, ok := args[0].(*storage)
	if !ok {
		return nil, fmt.Errorf("%w: _rebuild_tensor_v2 of %s, not a storage", ErrContent, summary(args[0]))
	}
	offset, ok := smallInt(args[1])
	if !ok || offset < 0 {
		return nil, fmt.Errorf("%w: tensor storage offset is %s", ErrContent, summary(args[1]))
	}
	size, err := intTuple(args[2], "size")
	if err != nil {
		return nil, err
	}
	stride, err := intTuple(args[3], "stride")
	if err != nil {
		return nil, err
	}
	if err := u.charge(int64(64 + 16*len(size))); err != nil {
		return nil, err
	}
	t, err := newView(st, offset, size, stride)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// rebuildParameter is torch._utils._rebuild_parameter(data,
// requires_grad, backward_hooks): an nn.Parameter is its data here.
func rebuildParameter(_ *unpickler, args tuple) (any, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("%w: _rebuild_parameter without arguments", ErrContent)
	}
	t, ok := args[0].(*tensor)
	if !ok {
		return nil, fmt.Errorf("%w: _rebuild_parameter of %s, not a tensor", ErrContent, summary(args[0]))
	}
	return t, nil
}

// newView checks that the strided view (offset, size, stride) lies
// inside st and holds no more elements than st.
func newView(st *storage, offset int, size, stride []int) (*tensor, error) {
	if len(size) != len(stride) || len(size) > maxDims {
		return nil, fmt.Errorf("%w: tensor of %d sizes and %d strides (at most %d dimensions)", ErrContent, len(size), len(stride), maxDims)
	}
	numel := 1
	for i, n := range size {
		if n < 0 || stride[i] < 0 {
			return nil, fmt.Errorf("%w: tensor of size %v and stride %v", ErrContent, size, stride)
		}
		// Saturating at st.numel+1: two factors of up to 2^40 would
		// overflow an int.
		if m := min(n, st.numel+1); m > 0 && numel > (st.numel+1)/m {
			numel = st.numel + 1
		} else {
			numel *= m
		}
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

// claim is the bytes reading the view handles: its elements, and for a
// view that is not contiguous the span of its storage it is gathered from
// as well.
func (t *tensor) claim() int64 {
	es := int64(t.st.dtype.Size())
	n := int64(t.numel) * es
	if t.numel > 0 && !contiguous(t.size, t.stride) {
		lo, hi := t.span()
		n += int64(hi-lo+1) * es
	}
	return n
}

// span is the range of storage elements [lo, hi] the view reads.
func (t *tensor) span() (lo, hi int) {
	hi = t.offset
	for i, n := range t.size {
		hi += (n - 1) * t.stride[i]
	}
	return t.offset, hi
}

// safetensor makes the view a safetensors.Tensor: a contiguous view stays
// in the file (a section of its storage's record), another is gathered
// into memory in row-major order from the span of its storage it reads.
func (t *tensor) safetensor(name string) (*safetensors.Tensor, error) {
	es := t.st.dtype.Size()
	out := &safetensors.Tensor{Name: name, DType: t.st.dtype, Shape: t.size}
	if t.numel == 0 {
		out.Data = []byte{}
		return out, nil
	}
	if t.st.data == nil {
		return nil, fmt.Errorf("%w: storage %q of tensor %q has no data", ErrMissingRecord, t.st.key, name)
	}
	if contiguous(t.size, t.stride) {
		out.Section = io.NewSectionReader(t.st.data, int64(t.offset)*int64(es), int64(t.numel)*int64(es))
		return out, nil
	}
	lo, hi := t.span()
	src := make([]byte, (hi-lo+1)*es)
	if _, err := t.st.data.ReadAt(src, int64(lo)*int64(es)); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%w: storage %q: %v", ErrTruncated, t.st.key, err)
	}
	dst := make([]byte, t.numel*es)
	idx := make([]int, len(t.size))
	for i := 0; i < t.numel; i++ {
		at := t.offset - lo
		for d, k := range idx {
			at += k * t.stride[d]
		}
		copy(dst[i*es:(i+1)*es], src[at*es:])
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < t.size[d] {
				break
			}
			idx[d] = 0
		}
	}
	out.Data = dst
	return out, nil
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

// smallInt converts a pickled int within ±2^40.
func smallInt(v any) (int, bool) {
	x, ok := v.(int64)
	if !ok || x < -(1<<40) || x > 1<<40 {
		return 0, false
	}
	return int(x), true
}

func intTuple(v any, what string) ([]int, error) {
	tup, ok := v.(tuple)
	if !ok {
		return nil, fmt.Errorf("%w: tensor %s is %s, not a tuple", ErrContent, what, summary(v))
	}
	if len(tup) > maxDims {
		return nil, fmt.Errorf("%w: tensor %s has %d dimensions (at most %d)", ErrContent, what, len(tup), maxDims)
	}
	out := make([]int, len(tup))
	for i, x := range tup {
		n, ok := smallInt(x)
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s[%d] is %s", ErrContent, what, i, summary(x))
		}
		out[i] = n
	}
	return out, nil
}

// loadPickle decodes the pickle at the start of data, resolving
// persistent ids (storages) through persistent, and returns the object
// and the offset past the pickle's STOP.
func loadPickle(data []byte, ctx *loadContext, persistent func(u *unpickler, pid any) (any, error)) (any, int, error) {
	u := newUnpickler(data, ctx)
	u.persistent = persistent
	return u.load()
}
