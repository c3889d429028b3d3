package pytorch

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/nlpodyssey/gopickle/types"

	"rnnserve/models/safetensors"
	"rnnserve/models/sniff"
)

// MaxPickleBytes bounds the pickle of a checkpoint (data.pkl): it holds
// names and shapes, not weights, and is a few kilobytes for real models.
const MaxPickleBytes = 64 << 20

// File is the tensors of a checkpoint.
type File struct {
	// Format is sniff.TorchZip or sniff.TorchLegacy.
	Format  sniff.Format
	tensors map[string]*safetensors.Tensor
	names   []string // in the file's order
}

// Names lists the tensor names in the order the file lists them (a
// state_dict's order: module by module, as registered).
func (f *File) Names() []string { return slices.Clone(f.names) }

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (*safetensors.Tensor, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// Read parses a checkpoint held in memory. It never panics and never runs
// code from the file; see the package documentation for what it accepts.
// The tensors are copies: data may be reused after Read returns.
func Read(data []byte) (*File, error) {
	var (
		obj any
		err error
	)
	f := sniff.Detect(data)
	switch f {
	case sniff.TorchZip, sniff.Zip:
		obj, err = readZip(data)
		f = sniff.TorchZip
	case sniff.TorchLegacy:
		obj, err = readLegacy(data)
	default:
		return nil, fmt.Errorf("%w: this is %v", ErrFormat, f)
	}
	if err != nil {
		return nil, err
	}
	file, err := collect(obj)
	if err != nil {
		return nil, err
	}
	file.Format = f
	return file, nil
}

// readZip decodes data.pkl of a zip checkpoint, loading storages from
// the records beside it.
func readZip(data []byte) (any, error) {
	z, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		if errors.Is(err, zip.ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: zip archive: %v (truncated or damaged)", ErrTruncated, err)
		}
		return nil, fmt.Errorf("%w: zip archive: %v", ErrCorrupt, err)
	}
	// Records are named <archive>/<path>; the archive name is whatever the
	// writer chose (the file's stem, or "archive").
	var pkl *zip.File
	records := map[string]*zip.File{}
	for _, f := range z.File {
		dir, rest, ok := strings.Cut(f.Name, "/")
		if !ok || dir == "" {
			continue
		}
		records[rest] = f
		if rest == "data.pkl" {
			pkl = f
		}
	}
	if pkl == nil {
		return nil, fmt.Errorf("%w: no <archive>/data.pkl in the zip archive (not written by torch.save, or damaged)", ErrMissingRecord)
	}
	if bo, ok := records["byteorder"]; ok {
		b, err := readRecord(bo, 16)
		if err != nil {
			return nil, err
		}
		if string(b) != "little" {
			return nil, fmt.Errorf("%w: byte order %q (only little-endian checkpoints are read)", ErrContent, b)
		}
	}
	pickled, err := readRecord(pkl, MaxPickleBytes)
	if err != nil {
		return nil, err
	}
	loaded := map[string]*storage{}
	obj, _, err := unpickle(pickled, func(pid any) (any, error) {
		key, cls, numel, err := storageID(pid, 5)
		if err != nil {
			return nil, err
		}
		if st, ok := loaded[key]; ok {
			if st.dtype != cls.dtype || st.numel != numel {
				return nil, fmt.Errorf("%w: storage %q referred to as two different storages", ErrContent, key)
			}
			return st, nil
		}
		rec, ok := records[path.Join("data", key)]
		if !ok {
			return nil, fmt.Errorf("%w: storage %q has no record data/%s in the zip archive", ErrMissingRecord, key, key)
		}
		want := uint64(numel) * uint64(cls.dtype.Size())
		if rec.UncompressedSize64 != want {
			return nil, fmt.Errorf("%w: record data/%s holds %d bytes, storage of %d %s elements needs %d",
				ErrCorrupt, key, rec.UncompressedSize64, numel, cls.dtype, want)
		}
		b, err := readRecord(rec, int64(want))
		if err != nil {
			return nil, err
		}
		st := &storage{dtype: cls.dtype, numel: numel, data: b}
		loaded[key] = st
		return st, nil
	})
	return obj, err
}

// readRecord reads a zip record whole, refusing more than limit bytes.
func readRecord(f *zip.File, limit int64) ([]byte, error) {
	// torch.save stores every record uncompressed; refusing compression
	// keeps a small file from inflating into a large allocation.
	if f.Method != zip.Store {
		return nil, fmt.Errorf("%w: record %s is compressed (method %d); torch.save stores records uncompressed (was the archive re-zipped?)",
			ErrCorrupt, f.Name, f.Method)
	}
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%w: record %s of %d bytes, limit %d", ErrTooLarge, f.Name, f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: record %s: %v", ErrCorrupt, f.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: record %s: %v", ErrTruncated, f.Name, err)
	case err != nil:
		return nil, fmt.Errorf("%w: record %s: %v", ErrCorrupt, f.Name, err)
	case int64(len(b)) > limit:
		return nil, fmt.Errorf("%w: record %s over %d bytes", ErrTooLarge, f.Name, limit)
	}
	return b, nil
}

// storageID unpacks a persistent id ('storage', StorageClass, key,
// location, numel, ...) with at least n fields.
func storageID(pid any, n int) (key string, cls *storageClass, numel int, err error) {
	tup, ok := pid.(*types.Tuple)
	if !ok || tup.Len() < n {
		return "", nil, 0, fmt.Errorf("%w: persistent id %s, want a storage tuple", ErrContent, describe(pid))
	}
	if kind, _ := tup.Get(0).(string); kind != "storage" {
		return "", nil, 0, fmt.Errorf("%w: persistent id of kind %v, want storage", ErrContent, tup.Get(0))
	}
	cls, ok = tup.Get(1).(*storageClass)
	if !ok {
		return "", nil, 0, fmt.Errorf("%w: storage of %s, want a torch storage class", ErrContent, describe(tup.Get(1)))
	}
	key, ok = tup.Get(2).(string)
	if !ok || key == "" || strings.ContainsAny(key, "/\\") || key == "." || key == ".." {
		return "", nil, 0, fmt.Errorf("%w: storage key %v", ErrContent, tup.Get(2))
	}
	numel, ok = smallInt(tup.Get(4))
	if !ok || numel < 0 {
		return "", nil, 0, fmt.Errorf("%w: storage size %v", ErrContent, tup.Get(4))
	}
	return key, cls, numel, nil
}

// readLegacy decodes the legacy format: magic number, protocol version
// and system info pickles, the object's pickle, the list of storage keys,
// then each storage's element count and bytes in that order.
func readLegacy(data []byte) (any, error) {
	pos := 0
	next := func(what string) (any, error) {
		obj, n, err := unpickle(data[pos:], nil)
		if err != nil {
			return nil, fmt.Errorf("legacy checkpoint %s: %w", what, err)
		}
		pos += n
		return obj, nil
	}
	if _, err := next("magic number"); err != nil {
		return nil, err
	}
	if v, err := next("protocol version"); err != nil {
		return nil, err
	} else if p, _ := smallInt(v); p != 1001 {
		return nil, fmt.Errorf("%w: legacy protocol version %v, want 1001", ErrContent, v)
	}
	if _, err := next("system info"); err != nil {
		return nil, err
	}

	// The object refers to storages by key; their bytes come after it, so
	// the object is decoded with placeholders that are filled in later.
	type pending struct {
		st  *storage
		cls *storageClass
	}
	byKey := map[string]*pending{}
	obj, n, err := unpickle(data[pos:], func(pid any) (any, error) {
		key, cls, numel, err := storageID(pid, 6)
		if err != nil {
			return nil, err
		}
		if tup := pid.(*types.Tuple); tup.Get(5) != nil {
			return nil, fmt.Errorf("%w: storage %q is a view of another storage (legacy view metadata)", ErrContent, key)
		}
		if p, ok := byKey[key]; ok {
			return p.st, nil
		}
		if uint64(numel)*uint64(cls.dtype.Size()) > uint64(len(data)) {
			return nil, fmt.Errorf("%w: storage %q of %d elements is larger than the file", ErrTruncated, key, numel)
		}
		p := &pending{st: &storage{dtype: cls.dtype, numel: numel}, cls: cls}
		byKey[key] = p
		return p.st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("legacy checkpoint object: %w", err)
	}
	pos += n
	keysObj, err := next("storage keys")
	if err != nil {
		return nil, err
	}
	keys, ok := keysObj.(*types.List)
	if !ok {
		return nil, fmt.Errorf("%w: legacy storage keys are %s, want a list", ErrContent, describe(keysObj))
	}
	for i := range keys.Len() {
		key, _ := keys.Get(i).(string)
		p, ok := byKey[key]
		if !ok {
			return nil, fmt.Errorf("%w: legacy storage key %v is not used by the object", ErrContent, keys.Get(i))
		}
		if len(data)-pos < 8 {
			return nil, fmt.Errorf("%w: storage %q: no element count", ErrTruncated, key)
		}
		count := binary.LittleEndian.Uint64(data[pos:])
		pos += 8
		if count != uint64(p.st.numel) {
			return nil, fmt.Errorf("%w: storage %q holds %d elements, the object says %d", ErrCorrupt, key, count, p.st.numel)
		}
		size := p.st.numel * p.cls.dtype.Size()
		if len(data)-pos < size {
			return nil, fmt.Errorf("%w: storage %q: %d bytes, %d remain", ErrTruncated, key, size, len(data)-pos)
		}
		p.st.data = data[pos : pos+size : pos+size]
		pos += size
	}
	for key, p := range byKey {
		if p.st.data == nil && p.st.numel > 0 {
			return nil, fmt.Errorf("%w: storage %q is not in the file", ErrMissingRecord, key)
		}
	}
	return obj, nil
}
