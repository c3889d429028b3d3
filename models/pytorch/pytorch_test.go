package pytorch

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rnnserve/models/safetensors"
	"rnnserve/models/sniff"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestReadMatchesTorch reads checkpoints written by torch.save (zip,
// legacy, and a training checkpoint nesting the state_dict) and compares
// every tensor, byte for byte, with torch's contiguous copy of it in
// reference.safetensors: dtypes, transposed and strided views, a slice at
// a storage offset, scalars and empty tensors.
func TestReadMatchesTorch(t *testing.T) {
	ref, err := safetensors.Read(readFixture(t, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file   string
		format sniff.Format
	}{{"state_dict.pt", sniff.TorchZip}, {"legacy.pt", sniff.TorchLegacy}, {"training.pt", sniff.TorchZip}} {
		t.Run(c.file, func(t *testing.T) {
			f, err := Read(readFixture(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if f.Format != c.format {
				t.Errorf("format %v, want %v", f.Format, c.format)
			}
			wantNames := []string{"lstm.weight_ih_l0", "lstm.weight_hh_l0", "fc.bias", "half", "bf16", "double",
				"steps", "mask", "scalar", "empty", "every_other"}
			if !slices.Equal(f.Names(), wantNames) {
				t.Errorf("names %v, want %v (file order)", f.Names(), wantNames)
			}
			sameAsReference(t, f, ref)
		})
	}
}

// rezip rewrites a zip archive, dropping the records drop says to and
// replacing the contents of those in replace.
func rezip(t *testing.T, data []byte, drop func(name string) bool, replace map[string][]byte) []byte {
	t.Helper()
	z, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, f := range z.File {
		if drop != nil && drop(f.Name) {
			continue
		}
		rc, _ := f.Open()
		body, _ := io.ReadAll(rc)
		rc.Close()
		for suffix, b := range replace {
			if strings.HasSuffix(f.Name, suffix) {
				body = b
			}
		}
		fw, _ := w.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		fw.Write(body)
	}
	w.Close()
	return buf.Bytes()
}

// zipWithPickle is a minimal zip checkpoint whose data.pkl is pkl.
func zipWithPickle(pkl string) []byte {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	f, _ := w.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	f.Write([]byte(pkl))
	w.Close()
	return buf.Bytes()
}

func TestReadErrors(t *testing.T) {
	good := readFixture(t, "state_dict.pt")
	st := readFixture(t, "reference.safetensors")
	for _, c := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"safetensors handed as checkpoint", st, ErrFormat, "this is a safetensors file"},
		{"onnx handed as checkpoint", []byte{0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'}, ErrFormat, "this is an ONNX model"},
		{"text", []byte("hello"), ErrFormat, "unknown format"},
		{"torchscript", readFixture(t, "torchscript.pt"), ErrFormat, "TorchScript"},
		{"whole module", readFixture(t, "whole_module.pt"), ErrClass, "torch.nn.modules.linear.Linear is not allowed"},
		{"os.system", zipWithPickle("\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00echoq\x01\x85q\x02Rq\x03."), ErrClass, "class os.system is not allowed"},
		{"builtins.eval via STACK_GLOBAL", zipWithPickle("\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x011\x85R."), ErrClass, "builtins.eval"},
		{"numpy scalar", zipWithPickle("\x80\x02cnumpy.core.multiarray\nscalar\n."), ErrClass, "numpy objects"},
		{"missing data record", rezip(t, good, func(n string) bool { return strings.HasSuffix(n, "/data/0") }, nil), ErrMissingRecord, "data/0"},
		{"missing data.pkl", rezip(t, good, func(n string) bool { return strings.HasSuffix(n, "data.pkl") }, nil), ErrMissingRecord, "data.pkl"},
		{"short storage record", rezip(t, good, nil, map[string][]byte{"/data/0": {1, 2, 3}}), ErrCorrupt, "holds 3 bytes"},
		{"not a dict", zipWithPickle("\x80\x02K\x05."), ErrContent, "holds the int 5"},
		{"dict of ints", zipWithPickle("\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s."), ErrContent, "holds no tensors"},
		{"unknown opcode", zipWithPickle("\x80\x02\xff."), ErrCorrupt, "unknown pickle opcode"},
		{"forged length", zipWithPickle("\x80\x04\x8e\xff\xff\xff\xff\xff\xff\x00\x00."), ErrTruncated, "declares"},
		{"no STOP", zipWithPickle("\x80\x02}"), ErrTruncated, "without STOP"},
		{"odd SETITEMS", zipWithPickle("\x80\x02}(K\x01u."), ErrCorrupt, "1 values for a dict's keys and values"},
		{"bytes dict key", zipWithPickle("\x80\x03ccollections\nOrderedDict\n)R(C\x01aK\x01u."), ErrContent, "a key of the dict is bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(c.data)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("Read error %v, want %v saying %q", err, c.want, c.msg)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "pytorch: ") && !strings.HasPrefix(err.Error(), "legacy checkpoint") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// TestReadTruncated cuts the checkpoints at many lengths: every cut is an
// error, never a panic or a silently shorter state_dict.
func TestReadTruncated(t *testing.T) {
	for _, name := range []string{"state_dict.pt", "legacy.pt"} {
		data := readFixture(t, name)
		for n := 0; n < len(data); n += 1 + n/50 {
			if f, err := Read(data[:n]); err == nil {
				t.Errorf("%s cut to %d of %d bytes: read %d tensors without error", name, n, len(data), len(f.Names()))
			}
		}
	}
}

// TestReadInterop reads the state_dict of the reference in the containers
// PyTorch users save it in (scripts/model_files.py): every pickle
// protocol torch.save takes, a Lightning checkpoint beside optimizer,
// loop and callback states, training checkpoints with Adam's state, in
// the zip and the legacy format.
func TestReadInterop(t *testing.T) {
	ref, err := safetensors.Read(readFixture(t, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("testdata/interop/*.*")
	n := 0
	for _, p := range files {
		if strings.HasSuffix(p, ".md") {
			continue
		}
		n++
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := Read(readFixture(t, strings.TrimPrefix(p, "testdata/")))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Names()) != len(ref.Names()) {
				t.Errorf("names %v", f.Names())
			}
			sameAsReference(t, f, ref)
		})
	}
	if n < 7 {
		t.Errorf("%d interop files; run scripts/model_files.py", n)
	}
}

// sameAsReference compares every tensor of ref, byte for byte, with f's.
func sameAsReference(t *testing.T, f *File, ref *safetensors.File) {
	t.Helper()
	for _, name := range ref.Names() {
		want, _ := ref.Tensor(name)
		got, ok := f.Tensor(name)
		if !ok {
			t.Errorf("tensor %q missing", name)
			continue
		}
		data, err := got.Bytes()
		if err != nil || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(data, want.Data) {
			t.Errorf("tensor %q: %s %v %x (%v), want %s %v %x", name, got.DType, got.Shape, data, err, want.DType, want.Shape, want.Data)
		}
	}
}
