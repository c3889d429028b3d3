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

	"rnnserve/models/safetensors"
	"rnnserve/models/sniff"
)

// MaxPickleBytes bounds the pickle of a checkpoint (data.pkl, or the
// five pickles of the legacy format): it holds names and shapes, not
// weights, and is kilobytes for a state_dict, a few megabytes for a
// training checkpoint with long lists in it.
const MaxPickleBytes = 16 << 20

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

// Read parses a checkpoint held in memory; see ReadAt. The tensors
// share memory with data, which the caller must not modify while they
// are in use.
func Read(data []byte) (*File, error) { return ReadAt(bytes.NewReader(data), int64(len(data))) }

// ReadAt parses the checkpoint of size bytes that r holds. It never
// panics and never runs code from the file; see the package
// documentation for what it accepts. Only the pickles are read into
// memory: each tensor's elements stay in r (safetensors.Tensor.Section)
// until they are read, straight into the caller's buffer, except those of
// a view that is not contiguous, which are gathered at once. r must not
// change while the tensors are in use.
func ReadAt(r io.ReaderAt, size int64) (*File, error) {
	var (
		obj any
		err error
	)
	ctx := &loadContext{fileSize: size}
	f := sniff.DetectAt(r, size)
	switch f {
	case sniff.TorchZip, sniff.Zip:
		obj, err = readZip(r, size, ctx)
		f = sniff.TorchZip
	case sniff.TorchLegacy:
		obj, err = readLegacy(r, size)
	default:
		return nil, fmt.Errorf("%w: this is %v", ErrFormat, f)
	}
	if err != nil {
		return nil, err
	}
	file, err := collect(obj, size)
	if err != nil {
		return nil, err
	}
	file.Format = f
	return file, nil
}

// readZip decodes data.pkl of a zip checkpoint, finding storages in the
// records beside it.
func readZip(r io.ReaderAt, size int64, ctx *loadContext) (any, error) {
	z, err := zip.NewReader(r, size)
	if err != nil {
		if errors.Is(err, zip.ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: zip archive: %v (truncated or damaged)", ErrTruncated, err)
		}
		return nil, fmt.Errorf("%w: zip archive: %v", ErrCorrupt, err)
	}
	// Records are <archive>/data.pkl, <archive>/data/<key>, ...; the
	// archive name is whatever the writer chose (the file's stem, or
	// "archive").
	var pkl *zip.File
	records := map[string]*zip.File{}
	for _, f := range z.File {
		dir, rest, ok := strings.Cut(f.Name, "/")
		if !ok || dir == "" {
			continue
		}
		if _, dup := records[rest]; dup {
			return nil, fmt.Errorf("%w: record %s twice in the zip archive", ErrCorrupt, clipName(f.Name))
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
		b, err := readRecord(r, size, bo, 16, "")
		if err != nil {
			return nil, err
		}
		if string(b) != "little" {
			return nil, fmt.Errorf("%w: byte order %q (only little-endian checkpoints are read)", ErrContent, b)
		}
	}
	pickled, err := readRecord(r, size, pkl, MaxPickleBytes, "MaxPickleBytes")
	if err != nil {
		return nil, err
	}
	loaded := map[string]*storage{}
	obj, _, err := loadPickle(pickled, ctx, func(u *unpickler, pid any) (any, error) {
		key, dtype, numel, err := storageID(pid, 5)
		if err != nil {
			return nil, err
		}
		if st, ok := loaded[key]; ok {
			if st.dtype != dtype || st.numel != numel {
				return nil, fmt.Errorf("%w: storage %q referred to as two different storages", ErrContent, key)
			}
			return st, nil
		}
		rec, ok := records[path.Join("data", key)]
		if !ok {
			return nil, fmt.Errorf("%w: storage %q has no record data/%s in the zip archive", ErrMissingRecord, key, key)
		}
		want := uint64(numel) * uint64(dtype.Size())
		if rec.UncompressedSize64 != want {
			return nil, fmt.Errorf("%w: record data/%s holds %d bytes, storage of %d %s elements needs %d",
				ErrCorrupt, key, rec.UncompressedSize64, numel, dtype, want)
		}
		sec, err := recordSection(r, size, rec)
		if err != nil {
			return nil, err
		}
		if err := u.charge(96 + int64(len(key))); err != nil {
			return nil, err
		}
		st := &storage{key: key, dtype: dtype, numel: numel, data: sec}
		loaded[key] = st
		return st, nil
	})
	return obj, err
}

// recordSection is where a stored (uncompressed) zip record's bytes are
// in the archive.
func recordSection(r io.ReaderAt, size int64, f *zip.File) (*io.SectionReader, error) {
	// torch.save stores every record uncompressed; refusing compression
	// keeps a small file from inflating into a large allocation, and lets
	// a record be read in place.
	if f.Method != zip.Store || f.CompressedSize64 != f.UncompressedSize64 {
		return nil, fmt.Errorf("%w: record %s is compressed (method %d); torch.save stores records uncompressed (was the archive re-zipped?)",
			ErrCorrupt, clipName(f.Name), f.Method)
	}
	off, err := f.DataOffset()
	if err != nil {
		return nil, fmt.Errorf("%w: record %s: %v", ErrCorrupt, clipName(f.Name), err)
	}
	if off < 0 || f.UncompressedSize64 > uint64(size) || off > size-int64(f.UncompressedSize64) {
		return nil, fmt.Errorf("%w: record %s of %d bytes at offset %d runs past the end of the file (%d bytes)",
			ErrTruncated, clipName(f.Name), f.UncompressedSize64, off, size)
	}
	return io.NewSectionReader(r, off, int64(f.UncompressedSize64)), nil
}

// readRecord reads a zip record whole, refusing more than limit bytes
// (the constant named limitName, if any) before it allocates them.
func readRecord(r io.ReaderAt, size int64, f *zip.File, limit int64, limitName string) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		if limitName != "" {
			limitName = " (" + limitName + ")"
		}
		return nil, fmt.Errorf("%w: record %s of %d bytes, limit %d%s", ErrTooLarge, clipName(f.Name), f.UncompressedSize64, limit, limitName)
	}
	sec, err := recordSection(r, size, f)
	if err != nil {
		return nil, err
	}
	b := make([]byte, sec.Size())
	if n, err := sec.ReadAt(b, 0); n < len(b) {
		return nil, fmt.Errorf("%w: record %s: %v", ErrTruncated, clipName(f.Name), err)
	}
	return b, nil
}

// clipName shortens a name from the file for a message.
func clipName(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%q... (%d bytes)", s[:200], len(s))
	}
	return s
}

// storageID unpacks a persistent id ('storage', StorageClass, key,
// location, numel, ...) with at least n fields.
func storageID(pid any, n int) (key string, dtype safetensors.DType, numel int, err error) {
	tup, ok := pid.(tuple)
	if !ok || len(tup) < n {
		return "", "", 0, fmt.Errorf("%w: persistent id is %s, want a storage tuple of %d items", ErrContent, summary(pid), n)
	}
	if kind, _ := tup[0].(string); kind != "storage" {
		return "", "", 0, fmt.Errorf("%w: persistent id of kind %s, want \"storage\"", ErrContent, summary(tup[0]))
	}
	g, ok := tup[1].(*global)
	if ok {
		dtype = g.storageDType()
	}
	if dtype == "" {
		return "", "", 0, fmt.Errorf("%w: storage of %s, want a torch storage class", ErrContent, summary(tup[1]))
	}
	key, ok = tup[2].(string)
	if !ok || key == "" || len(key) > 256 || strings.ContainsAny(key, "/\\") || key == "." || key == ".." {
		return "", "", 0, fmt.Errorf("%w: storage key is %s", ErrContent, summary(tup[2]))
	}
	numel, ok = smallInt(tup[4])
	if !ok || numel < 0 {
		return "", "", 0, fmt.Errorf("%w: storage size is %s", ErrContent, summary(tup[4]))
	}
	return key, dtype, numel, nil
}

// legacyHead is how much of a legacy checkpoint readLegacy reads first
// to find its pickles; it doubles while they run past it.
const legacyHead = 64 << 10

// readLegacy decodes the legacy format: magic number, protocol version
// and system info pickles, the object's pickle, the list of storage keys,
// then each storage's element count and bytes in that order. The five
// pickles together are bounded by MaxPickleBytes, as a zip checkpoint's
// data.pkl is, and decoded under the same limits. They are read from the
// start of the file in a buffer that doubles, from 64 KiB, until they fit.
func readLegacy(r io.ReaderAt, size int64) (any, error) {
	limit := min(size, MaxPickleBytes)
	for n := min(limit, legacyHead); ; n = min(2*n, limit) {
		head := make([]byte, n)
		if got, err := r.ReadAt(head, 0); int64(got) < n {
			return nil, fmt.Errorf("%w: %v", ErrTruncated, err)
		}
		obj, err := readLegacyIn(r, size, head, &loadContext{fileSize: size})
		var end *endError
		switch {
		case errors.As(err, &end) && n < limit:
			continue // a pickle runs past the buffer: read more
		case errors.As(err, &end) && size > MaxPickleBytes:
			return nil, fmt.Errorf("%w: the pickles of a legacy checkpoint must end within its first %d bytes (MaxPickleBytes): %w", ErrTooLarge, MaxPickleBytes, err)
		}
		return obj, err
	}
}

// readLegacyIn decodes a legacy checkpoint whose pickles are in head.
func readLegacyIn(r io.ReaderAt, size int64, head []byte, ctx *loadContext) (any, error) {
	pos := 0
	next := func(what string) (any, error) {
		obj, n, err := loadPickle(head[pos:], ctx, nil)
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
		return nil, fmt.Errorf("%w: legacy protocol version is %s, want 1001", ErrContent, summary(v))
	}
	if _, err := next("system info"); err != nil {
		return nil, err
	}
	// The object refers to storages by key; their bytes come after it, so
	// the object is decoded with storages whose data are found later.
	byKey := map[string]*storage{}
	obj, n, err := loadPickle(head[pos:], ctx, func(u *unpickler, pid any) (any, error) {
		key, dtype, numel, err := storageID(pid, 6)
		if err != nil {
			return nil, err
		}
		if pid.(tuple)[5] != nil {
			return nil, fmt.Errorf("%w: storage %q is a view of another storage (legacy view metadata)", ErrContent, key)
		}
		if st, ok := byKey[key]; ok {
			return st, nil
		}
		if uint64(numel)*uint64(dtype.Size()) > uint64(size) {
			return nil, fmt.Errorf("%w: storage %q of %d elements is larger than the file", ErrCorrupt, key, numel)
		}
		if err := u.charge(96 + int64(len(key))); err != nil {
			return nil, err
		}
		st := &storage{key: key, dtype: dtype, numel: numel}
		byKey[key] = st
		return st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("legacy checkpoint object: %w", err)
	}
	pos += n
	keysObj, err := next("storage keys")
	if err != nil {
		return nil, err
	}
	keys, ok := keysObj.(*list)
	if !ok {
		return nil, fmt.Errorf("%w: legacy storage keys are %s, want a list", ErrContent, summary(keysObj))
	}
	at := int64(pos)
	for _, k := range keys.items {
		key, _ := k.(string)
		st, ok := byKey[key]
		if !ok {
			return nil, fmt.Errorf("%w: legacy storage key %s is not used by the object", ErrContent, summary(k))
		}
		if st.data != nil {
			return nil, fmt.Errorf("%w: legacy storage key %q listed twice", ErrCorrupt, key)
		}
		var count [8]byte
		if n, _ := r.ReadAt(count[:], at); n < 8 {
			return nil, fmt.Errorf("%w: storage %q: no element count", ErrTruncated, key)
		}
		at += 8
		if c := binary.LittleEndian.Uint64(count[:]); c != uint64(st.numel) {
			return nil, fmt.Errorf("%w: storage %q holds %d elements, the object says %d", ErrCorrupt, key, c, st.numel)
		}
		n := int64(st.numel) * int64(st.dtype.Size())
		if size-at < n {
			return nil, fmt.Errorf("%w: storage %q: %d bytes, %d remain", ErrTruncated, key, n, size-at)
		}
		st.data = io.NewSectionReader(r, at, n)
		at += n
	}
	for key, st := range byKey {
		if st.data == nil && st.numel > 0 {
			return nil, fmt.Errorf("%w: storage %q is not in the file", ErrMissingRecord, key)
		}
	}
	return obj, nil
}
