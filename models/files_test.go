package models

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"rnnserve/internal/childtest"
	"rnnserve/models/internal/onnxbuild"
	pb "rnnserve/models/onnx/onnxpb"
	"rnnserve/models/safetensors"
)

// within runs f and fails t if it has not returned after d: a loader that
// blocks on a named pipe would otherwise hang the test binary.
func within(t *testing.T, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
		return nil
	}
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

func writeFile(t *testing.T, p, text string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNotRegularFilesRefused puts a named pipe, a device and a socket
// where the loaders look for model files: each is refused at once, with
// a message naming the file and what it is, and nothing blocks.
func TestNotRegularFilesRefused(t *testing.T) {
	dir := t.TempDir()
	fifoDir := filepath.Join(dir, "fifo")
	os.Mkdir(fifoDir, 0o755)
	mkfifo(t, filepath.Join(fifoDir, "model.pt"))

	devDir := filepath.Join(dir, "dev")
	os.Mkdir(devDir, 0o755)
	if err := os.Symlink("/dev/zero", filepath.Join(devDir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}

	sockDir := filepath.Join(dir, "sock")
	os.Mkdir(sockDir, 0o755)
	l, err := net.Listen("unix", filepath.Join(sockDir, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	specDir := filepath.Join(dir, "spec")
	os.Mkdir(specDir, 0o755)
	mkfifo(t, filepath.Join(specDir, "weights.safetensors"))
	writeFile(t, filepath.Join(specDir, SpecFile), "cell: lstm\ninput_size: 2\nhidden_size: 3\nweights: weights.safetensors\n")

	fifoSpec := filepath.Join(dir, "spec.yaml")
	mkfifo(t, fifoSpec)

	treeDir := filepath.Join(dir, "tree")
	os.Mkdir(treeDir, 0o755)
	mkfifo(t, filepath.Join(treeDir, "vocab.txt"))
	writeFile(t, filepath.Join(treeDir, SpecFile), "kind: tree\ncell: childsum_treelstm\nembedding_size: 2\nhidden_size: 2\nclasses: 2\nvocab_file: vocab.txt\nunk: x\n")

	for _, c := range []struct {
		name, kind string
		load       func() error
	}{
		{"FIFO model.pt in a folder", "named pipe (FIFO)", func() error { _, err := Open(fifoDir); return err }},
		{"FIFO model.pt named", "named pipe (FIFO)", func() error { _, err := Open(filepath.Join(fifoDir, "model.pt")); return err }},
		{"device behind a symlink", "character device", func() error { _, err := Open(devDir); return err }},
		{"socket", "socket", func() error { _, err := Open(sockDir); return err }},
		{"FIFO weights named by a spec", "named pipe (FIFO)", func() error { _, err := Open(specDir); return err }},
		{"FIFO weights through Load", "named pipe (FIFO)", func() error { _, err := Load(filepath.Join(specDir, SpecFile)); return err }},
		{"FIFO spec", "named pipe (FIFO)", func() error { _, err := Load(fifoSpec); return err }},
		{"FIFO tree vocabulary", "named pipe (FIFO)", func() error { _, err := LoadTree(filepath.Join(treeDir, SpecFile)); return err }},
		{"FIFO through DirFS", "named pipe (FIFO)", func() error { _, err := OpenFS(DirFS(dir), "fifo"); return err }},
		{"FIFO through os.DirFS", "named pipe (FIFO)", func() error { _, err := OpenFS(os.DirFS(dir), "fifo"); return err }},
		{"FIFO through os.Root", "named pipe (FIFO)", func() error {
			root, err := os.OpenRoot(dir)
			if err != nil {
				return err
			}
			defer root.Close()
			_, err = LoadFS(root.FS(), "spec/"+SpecFile)
			return err
		}},
		{"FIFO read by DirFS.ReadFile", "named pipe (FIFO)", func() error {
			_, err := fs.ReadFile(DirFS(dir), "fifo/model.pt")
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			err := within(t, 5*time.Second, c.load)
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), c.kind) || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("error %v, want ErrNotRegular saying %q", err, c.kind)
			}
			if time.Since(start) > time.Second {
				t.Errorf("took %v to refuse", time.Since(start))
			}
		})
	}
}

// TestDirFSNames: DirFS takes only names below its folder.
func TestDirFSNames(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "a")
	fsys := DirFS(filepath.Join(dir, "sub"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	for _, name := range []string{"../a.txt", "/etc/passwd", "x/../../a.txt", "", "a//b"} {
		if _, err := fsys.Open(name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q): %v, want fs.ErrInvalid", name, err)
		}
		if _, err := fs.ReadFile(fsys, name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("ReadFile(%q): %v, want fs.ErrInvalid", name, err)
		}
	}
	if _, err := fs.ReadDir(fsys, "."); err != nil {
		t.Errorf("ReadDir: %v", err)
	}
}

// lstmLayer is the tensors (zero weights) of an LSTM layer of the
// given sizes and dtype, under nn.LSTM's names.
func lstmLayer(input, hidden int, dt safetensors.DType) []safetensors.Tensor {
	var ts []safetensors.Tensor
	for _, w := range []struct {
		name  string
		shape []int
	}{{"rnn.weight_ih_l0", []int{4 * hidden, input}}, {"rnn.weight_hh_l0", []int{4 * hidden, hidden}},
		{"rnn.bias_ih_l0", []int{4 * hidden}}, {"rnn.bias_hh_l0", []int{4 * hidden}}} {
		n := dt.Size()
		for _, d := range w.shape {
			n *= d
		}
		ts = append(ts, safetensors.Tensor{Name: w.name, DType: dt, Shape: w.shape, Data: make([]byte, n)})
	}
	return ts
}

// writeLSTM writes a safetensors file of an LSTM layer (zero weights) of
// the given sizes and dtype.
func writeLSTM(t *testing.T, p string, input, hidden int, dt safetensors.DType) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := safetensors.Write(f, lstmLayer(input, hidden, dt), nil); err != nil {
		t.Fatal(err)
	}
}

// statePickle is the pickle (protocol 2) torch.save writes for a
// state_dict of float32 tensors, one storage each, keyed "0", "1", ...: a
// dict of _rebuild_tensor_v2(storage, 0, size, stride, False, {}) whose
// storages are persistent ids ('storage', torch.FloatStorage, key, 'cpu',
// numel), with a sixth item, None, in the legacy format.
func statePickle(ts []safetensors.Tensor, legacy bool) []byte {
	var b bytes.Buffer
	str := func(s string) {
		b.WriteByte('X')
		binary.Write(&b, binary.LittleEndian, uint32(len(s)))
		b.WriteString(s)
	}
	ints := func(v []int) {
		b.WriteByte('(')
		for _, x := range v {
			b.WriteByte('J')
			binary.Write(&b, binary.LittleEndian, int32(x))
		}
		b.WriteByte('t')
	}
	b.WriteString("\x80\x02}(")
	for i, tn := range ts {
		str(tn.Name)
		b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n(")
		b.WriteByte('(')
		str("storage")
		b.WriteString("ctorch\nFloatStorage\n")
		str(strconv.Itoa(i))
		str("cpu")
		b.WriteByte('J')
		binary.Write(&b, binary.LittleEndian, int32(tn.NumElements()))
		if legacy {
			b.WriteByte('N')
		}
		b.WriteString("tQ")
		b.WriteString("K\x00")
		ints(tn.Shape)
		stride := make([]int, len(tn.Shape))
		for d, k := len(tn.Shape)-1, 1; d >= 0; d-- {
			stride[d], k = k, k*tn.Shape[d]
		}
		ints(stride)
		b.WriteString("\x89}tR")
	}
	b.WriteString("u.")
	return b.Bytes()
}

// writeCheckpoint writes float32 tensors as torch.save does: a zip
// archive of data.pkl and one stored record per storage, or the legacy
// format (five pickles, then each storage's element count and bytes).
func writeCheckpoint(t *testing.T, p string, ts []safetensors.Tensor, legacy bool) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	if legacy {
		w.WriteString("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.") // the magic number
		w.WriteString("\x80\x02M\xe9\x03.")                                        // protocol 1001
		w.WriteString("\x80\x02}.")                                                // system info
		w.Write(statePickle(ts, true))
		w.WriteString("\x80\x02(")
		for i := range ts {
			w.WriteString("X")
			binary.Write(w, binary.LittleEndian, uint32(len(strconv.Itoa(i))))
			w.WriteString(strconv.Itoa(i))
		}
		w.WriteString("l.")
		for _, tn := range ts {
			binary.Write(w, binary.LittleEndian, uint64(tn.NumElements()))
			w.Write(tn.Data)
		}
	} else {
		z := zip.NewWriter(w)
		put := func(name string, data []byte) {
			rec, err := z.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
			if err == nil {
				_, err = rec.Write(data)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		put("data.pkl", statePickle(ts, false))
		put("byteorder", []byte("little"))
		for i, tn := range ts {
			put("data/"+strconv.Itoa(i), tn.Data)
		}
		put("version", []byte("3\n"))
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinksFollowed opens a Hugging Face cache snapshot, whose files
// are links into ../../blobs, by file, by folder and through a spec, and
// a repository whose model folder is a link.
func TestSymlinksFollowed(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "models--user--lstm")
	blobs, snap := filepath.Join(cache, "blobs"), filepath.Join(cache, "snapshots", "0123abcd")
	os.MkdirAll(blobs, 0o755)
	os.MkdirAll(snap, 0o755)
	writeLSTM(t, filepath.Join(blobs, "9f86d081884c7d65"), 3, 4, safetensors.F32)
	if err := os.Symlink("../../blobs/9f86d081884c7d65", filepath.Join(snap, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(snap, "model.safetensors"), snap} {
		m, err := Open(p)
		if err != nil {
			t.Fatalf("Open(%s): %v", p, err)
		}
		if m.Spec.HiddenSize != 4 || m.Source.Weights != filepath.Join(snap, "model.safetensors") {
			t.Errorf("Open(%s): spec %+v, source %+v", p, m.Spec, m.Source)
		}
	}
	writeFile(t, filepath.Join(snap, SpecFile), "cell: lstm\ninput_size: 3\nhidden_size: 4\nweights: model.safetensors\n")
	if _, err := Load(filepath.Join(snap, SpecFile)); err != nil {
		t.Errorf("Load through the spec: %v", err)
	}
	if _, err := OpenFS(DirFS(filepath.Dir(snap)), filepath.Base(snap)); err != nil {
		t.Errorf("OpenFS(DirFS) of the snapshot: %v", err)
	}

	repo := t.TempDir()
	if err := os.Symlink(snap, filepath.Join(repo, "lstm")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFS(DirFS(repo), "lstm"); err != nil {
		t.Errorf("a repository's linked model folder: %v", err)
	}
	// os.Root's FS keeps os.Root's rule: no link out of the root.
	root, err := os.OpenRoot(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := OpenFS(root.FS(), "lstm"); err == nil {
		t.Errorf("os.Root followed a link out of its root")
	}
}

// TestPeakHelper is run in a child process by the peak-memory tests: it
// opens $MODEL_FILE and prints the outcome, or writes it (role "write
// NAME", a file of peakWriters).
func TestPeakHelper(t *testing.T) {
	role := childtest.Role(t)
	if name, ok := strings.CutPrefix(role, "write "); ok {
		peakWriters[name](t, os.Getenv("MODEL_FILE"))
		return
	}
	start := time.Now()
	m, err := Open(os.Getenv("MODEL_FILE"))
	switch {
	case role == "refuse" && err != nil:
		fmt.Printf("refused in %v: %v\n", time.Since(start), err)
	case role == "load" && err == nil:
		fmt.Printf("loaded %d weight bytes in %v\n", m.Net.WeightBytes(), time.Since(start))
	default:
		t.Fatalf("role %s: model %v, error %v", role, m != nil, err)
	}
}

// TestUnknownFormatPeak hands the loader 256 MiB of zeros named like a
// weights file: it is told from its first bytes to be of no known format,
// without reading the rest.
func TestUnknownFormatPeak(t *testing.T) {
	p := filepath.Join(t.TempDir(), "model.safetensors")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := childtest.Run(t, "TestPeakHelper", "refuse", time.Minute, "MODEL_FILE="+p)
	if r.Code != 0 || !strings.Contains(r.Output, "unknown format") || !strings.Contains(r.Output, "model.safetensors") {
		t.Fatalf("exit %d:\n%s", r.Code, r.Output)
	}
	t.Logf("256 MiB of zeros refused, peak RSS %d MiB, %v", r.MaxRSS>>20, r.Elapsed)
	if !childtest.Race && r.MaxRSS > 64<<20 {
		t.Errorf("peak RSS %d MiB to refuse a file by its first bytes", r.MaxRSS>>20)
	}
}

// peakInput and peakHidden size the LSTM layer of TestLoadPeak: 4h(in+h)+8h float32s,
// 128.06 MiB.
const peakInput, peakHidden = 2048, 2048

// peakWriters write the files of TestLoadPeak, by name.
var peakWriters = map[string]func(t *testing.T, p string){
	"F32.safetensors": func(t *testing.T, p string) { writeLSTM(t, p, peakInput, peakHidden, safetensors.F32) },
	"F16.safetensors": func(t *testing.T, p string) { writeLSTM(t, p, peakInput, peakHidden, safetensors.F16) },
	"zip.pt": func(t *testing.T, p string) {
		writeCheckpoint(t, p, lstmLayer(peakInput, peakHidden, safetensors.F32), false)
	},
	"legacy.pt": func(t *testing.T, p string) {
		writeCheckpoint(t, p, lstmLayer(peakInput, peakHidden, safetensors.F32), true)
	},
	"F32.onnx":      func(t *testing.T, p string) { writeONNXLSTM(t, p, pb.TensorProto_FLOAT, false) },
	"F16.onnx":      func(t *testing.T, p string) { writeONNXLSTM(t, p, pb.TensorProto_FLOAT16, false) },
	"external.onnx": func(t *testing.T, p string) { writeONNXLSTM(t, p, pb.TensorProto_FLOAT, true) },
}

// writeONNXLSTM writes the LSTM layer of TestLoadPeak (zero weights) as
// torch.onnx.export lays one out: W, R and B in raw_data of the given
// dtype, or as external data in p + ".data".
func writeONNXLSTM(t *testing.T, p string, dt pb.TensorProto_DataType, external bool) {
	t.Helper()
	in, H := int64(peakInput), int64(peakHidden)
	es := int64(4)
	if dt == pb.TensorProto_FLOAT16 {
		es = 2
	}
	tensor := func(name string, dims ...int64) *pb.TensorProto {
		n := es
		for _, d := range dims {
			n *= d
		}
		return &pb.TensorProto{Name: &name, Dims: dims, DataType: proto.Int32(int32(dt)), RawData: make([]byte, n)}
	}
	W, R, B := tensor("W", 1, 4*H, in), tensor("R", 1, 4*H, H), tensor("B", 1, 8*H)
	if external {
		var data []byte
		loc := filepath.Base(p) + ".data"
		for _, w := range []*pb.TensorProto{W, R, B} {
			data = append(data, onnxbuild.External(w, loc, len(data))...)
		}
		if err := os.WriteFile(p+".data", data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &pb.GraphProto{
		Name:        proto.String("lstm"),
		Input:       []*pb.ValueInfoProto{onnxbuild.Value("x", pb.TensorProto_FLOAT)},
		Initializer: []*pb.TensorProto{W, R, B, onnxbuild.Ints("axes", 1)},
		Node: []*pb.NodeProto{
			onnxbuild.Node("lstm", "LSTM", []string{"x", "W", "R", "B"}, []string{"y", "", ""}, onnxbuild.Int("hidden_size", H)),
			onnxbuild.Node("squeeze", "Squeeze", []string{"y", "axes"}, []string{"out"}),
		},
		Output: []*pb.ValueInfoProto{onnxbuild.Value("out", pb.TensorProto_FLOAT)},
	}
	if err := os.WriteFile(p, onnxbuild.Model(g, 14), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadPeak loads LSTMs of 128 MiB of float32 weights from safetensors
// files of F32 and of F16, from PyTorch checkpoints in the zip and the
// legacy format, and from ONNX files (FLOAT and FLOAT16 raw_data, and
// FLOAT external data, as exporters write them): the peak is the network and a constant, the tensors
// being read straight into it. Each file is written by a child process of
// its own: a process started by exec keeps the peak of the process it
// was forked from as its own (Linux's ru_maxrss), so the test process
// holds nothing large itself.
func TestLoadPeak(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 768 MiB of files")
	}
	input, hidden := peakInput, peakHidden
	for _, name := range []string{"F32.safetensors", "F16.safetensors", "zip.pt", "legacy.pt", "F32.onnx", "F16.onnx", "external.onnx"} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "model"+filepath.Ext(name))
			if r := childtest.Run(t, "TestPeakHelper", "write "+name, 2*time.Minute, "MODEL_FILE="+p); r.Code != 0 {
				t.Fatalf("writing %s: exit %d:\n%s", name, r.Code, r.Output)
			}
			r := childtest.Run(t, "TestPeakHelper", "load", 2*time.Minute, "MODEL_FILE="+p)
			want := int64(4 * (4*hidden*(input+hidden) + 8*hidden))
			if r.Code != 0 || !strings.Contains(r.Output, "loaded "+strconv.FormatInt(want, 10)) {
				t.Fatalf("exit %d:\n%s", r.Code, r.Output)
			}
			t.Logf("%s: %d MiB of weights, peak RSS %d MiB, %v", name, want>>20, r.MaxRSS>>20, r.Elapsed)
			if !childtest.Race && r.MaxRSS > want+32<<20 {
				t.Errorf("peak RSS %d MiB for %d MiB of weights", r.MaxRSS>>20, want>>20)
			}
		})
	}
}

// TestWeightsBudget: a weights file over MaxWeightsBytes is refused by its
// size before anything is read, and so is a file whose tensors would load
// to more than MaxWeightsBytes of float32 (F16 tensors of 9.2 GB, sparse
// here, for an LSTM of 18.4 GB), before the network is allocated.
func TestWeightsBudget(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big", "model.safetensors")
	os.Mkdir(filepath.Dir(big), 0o755)
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(MaxWeightsBytes + 1)
	f.Close()
	if err != nil {
		t.Skipf("a sparse file of 16 GiB: %v", err)
	}

	const hidden = 24000
	wide := filepath.Join(dir, "wide", "model.safetensors")
	os.Mkdir(filepath.Dir(wide), 0o755)
	header := `{`
	off := 0
	for i, w := range []struct {
		name  string
		shape []int
	}{{"rnn.weight_ih_l0", []int{4 * hidden, hidden}}, {"rnn.weight_hh_l0", []int{4 * hidden, hidden}},
		{"rnn.bias_ih_l0", []int{4 * hidden}}, {"rnn.bias_hh_l0", []int{4 * hidden}}} {
		n := 2
		for _, d := range w.shape {
			n *= d
		}
		if i > 0 {
			header += ","
		}
		shape := strings.ReplaceAll(fmt.Sprint(w.shape), " ", ",")
		header += fmt.Sprintf(`%q:{"dtype":"F16","shape":%s,"data_offsets":[%d,%d]}`, w.name, shape, off, off+n)
		off += n
	}
	header += "}"
	for len(header)%8 != 0 {
		header += " "
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	if err := os.WriteFile(wide, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(wide, int64(b.Len()+off)); err != nil {
		t.Skipf("a sparse file of 9.2 GB: %v", err)
	}

	for _, c := range []struct{ name, path, says string }{
		{"file", big, "has 17179869185 bytes, limit 17179869184 (MaxWeightsBytes)"},
		{"float32 weights", wide, "the model's weights take 18432768000 bytes as float32, limit 17179869184 (MaxWeightsBytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := childtest.Run(t, "TestPeakHelper", "refuse", time.Minute, "MODEL_FILE="+c.path)
			if r.Code != 0 || !strings.Contains(r.Output, c.says) || !strings.Contains(r.Output, "model.safetensors") {
				t.Fatalf("exit %d after %v, want a refusal saying %q:\n%.2000s", r.Code, r.Elapsed, c.says, r.Output)
			}
			t.Logf("peak RSS %d MiB, %v", r.MaxRSS>>20, r.Elapsed)
			if !childtest.Race && r.MaxRSS > 64<<20 {
				t.Errorf("peak RSS %d MiB", r.MaxRSS>>20)
			}
		})
	}
}
