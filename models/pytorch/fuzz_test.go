package pytorch

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/fuzzbound"
)

// fuzzLimits bound one input of the fuzz targets: the hostile seeds of
// 2 MiB run to their pickle budget (80 MiB) in under a second of CPU
// time.
var fuzzLimits = fuzzbound.Limits{CPU: 3 * time.Second}

var sentinels = []error{ErrFormat, ErrCorrupt, ErrTruncated, ErrMissingRecord, ErrClass, ErrContent, ErrTooLarge}

// seeds adds the checkpoints of the fixtures, the interop files and the
// hostile files whose names match.
func seeds(f *testing.F, match func(name string) bool) {
	var paths []string
	for _, glob := range []string{"testdata/*.pt", "testdata/interop/*.*", "../testdata/hostile/*.pt"} {
		found, _ := filepath.Glob(glob)
		paths = append(paths, found...)
	}
	n := 0
	for _, p := range paths {
		if strings.HasSuffix(p, ".md") || !match(filepath.Base(p)) {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(shrink(data))
		n++
	}
	if n == 0 {
		f.Fatal("no seeds")
	}
}

// maxSeed is the largest seed the fuzz targets take whole. The hostile
// floods are 2 MiB of one opcode; as seeds, each mutation of one would
// take a large share of a second, and minimising a new input a minute, so
// they are cut to their first maxSeed bytes, which hold the same opcodes
// and reach the same limits (MaxPickleMarks at 1 KiB). TestReadHostile
// reads them whole.
const maxSeed = 64 << 10

// shrink cuts a seed to maxSeed bytes: a pickle at its end, with a STOP
// after it; a zip checkpoint's data.pkl the same way, in a zip of its
// own; a legacy checkpoint as it is cut.
func shrink(data []byte) []byte {
	if len(data) <= 8*maxSeed {
		return data
	}
	z, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return data[:maxSeed]
	}
	for _, f := range z.File {
		if strings.HasSuffix(f.Name, "/data.pkl") {
			rc, _ := f.Open()
			pkl, _ := io.ReadAll(io.LimitReader(rc, maxSeed))
			rc.Close()
			return zipWithPickle(string(pkl) + ".")
		}
	}
	return data[:maxSeed]
}

// checkRead is what every fuzz target of Read checks: an error matches
// one of the sentinels and says no more than a few hundred bytes; an
// accepted file's tensors read back at their sizes, within what the file
// may claim.
func checkRead(t *testing.T, data []byte, file *File, err error) {
	if err != nil {
		if !slicesContainsErr(sentinels, err) {
			t.Fatalf("error %v matches no sentinel", err)
		}
		if len(err.Error()) > 2000 {
			t.Fatalf("an error of %d bytes", len(err.Error()))
		}
		return
	}
	var claimed int
	for _, name := range file.Names() {
		tn, ok := file.Tensor(name)
		if !ok || tn.Name != name {
			t.Fatalf("tensor %q listed but not returned", name)
		}
		b, err := tn.Bytes()
		if err != nil {
			t.Fatalf("tensor %q: %v", name, err)
		}
		if n := tn.NumElements() * tn.DType.Size(); n != len(b) {
			t.Fatalf("tensor %q: %d bytes for shape %v of %s", name, len(b), tn.Shape, tn.DType)
		}
		claimed += len(b)
	}
	if claimed > MaxTensorBytesPerFileByte*len(data) {
		t.Fatalf("tensors of %d bytes from a file of %d", claimed, len(data))
	}
}

func slicesContainsErr(list []error, err error) bool {
	for _, s := range list {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzRead feeds Read arbitrary bytes, from zip checkpoints (torch.save's
// format, the fixtures, the interop files and the hostile ones) on: it
// must return tensors or an error matching one of the package's
// sentinels, never panic, and keep to fuzzLimits.
//
//	go test -run '^$' -fuzz '^FuzzRead$' -fuzztime 10m -parallel 1 ./models/pytorch
func FuzzRead(f *testing.F) {
	seeds(f, func(name string) bool { return !strings.Contains(name, "legacy") })
	f.Add(zipWithPickle("\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s."))
	fuzzbound.Bytes(f, fuzzLimits, func(t *testing.T, data []byte) {
		file, err := Read(data)
		checkRead(t, data, file, err)
	})
}

// FuzzReadLegacy is FuzzRead from the legacy format's checkpoints
// (torch.save with _use_new_zipfile_serialization=False), whose five
// pickles and raw storages the fuzzer rarely reaches from a zip archive.
//
//	go test -run '^$' -fuzz '^FuzzReadLegacy$' -fuzztime 10m -parallel 1 ./models/pytorch
func FuzzReadLegacy(f *testing.F) {
	seeds(f, func(name string) bool { return strings.Contains(name, "legacy") })
	fuzzbound.Bytes(f, fuzzLimits, func(t *testing.T, data []byte) {
		file, err := Read(data)
		checkRead(t, data, file, err)
	})
}

// FuzzUnpickle feeds the unpickler arbitrary pickles, from the data.pkl
// of the checkpoints above on, with storages made up for any persistent
// id: it must stop at the first STOP or refuse with a sentinel, never
// panic, and charge its budget for what it allocates (fuzzbound measures
// the allocation).
//
//	go test -run '^$' -fuzz '^FuzzUnpickle$' -fuzztime 10m -parallel 1 ./models/pytorch
func FuzzUnpickle(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.pt")
	more, _ := filepath.Glob("testdata/interop/*.*")
	hostile, _ := filepath.Glob("../testdata/hostile/*.pt")
	for _, p := range append(append(paths, more...), hostile...) {
		z, err := zip.OpenReader(p)
		if err != nil {
			continue // legacy, or a hostile archive
		}
		for _, zf := range z.File {
			if strings.HasSuffix(zf.Name, "/data.pkl") && zf.Method == zip.Store {
				rc, _ := zf.Open()
				pkl, _ := io.ReadAll(io.LimitReader(rc, maxSeed))
				rc.Close()
				if zf.UncompressedSize64 > maxSeed {
					pkl = append(pkl, '.') // cut as shrink cuts
				}
				f.Add(pkl)
			}
		}
		z.Close()
	}
	f.Add([]byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x8c\x04eval\x93."))
	fuzzbound.Bytes(f, fuzzLimits, func(t *testing.T, data []byte) {
		u := newUnpickler(data, &loadContext{fileSize: int64(len(data))})
		u.persistent = func(u *unpickler, pid any) (any, error) {
			key, dt, n, err := storageID(pid, 5)
			if err != nil {
				return nil, err
			}
			return &storage{key: key, dtype: dt, numel: n, data: io.NewSectionReader(bytes.NewReader(nil), 0, 0)}, nil
		}
		_, end, err := u.load()
		switch {
		case err != nil && !slicesContainsErr(sentinels, err):
			t.Fatalf("error %v matches no sentinel", err)
		case err != nil && len(err.Error()) > 2000:
			t.Fatalf("an error of %d bytes", len(err.Error()))
		case err == nil && (end < 1 || end > len(data) || data[end-1] != '.'):
			t.Fatalf("ends at %d of %d", end, len(data))
		case u.spent > u.budget && err == nil:
			t.Fatalf("spent %d of a budget of %d without an error", u.spent, u.budget)
		}
	})
}
