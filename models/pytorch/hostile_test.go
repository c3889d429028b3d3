package pytorch

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/childtest"
)

// hostileFiles are the checkpoints of ../testdata/hostile with what the
// refusal must say (scripts/model_files.py writes both).
func hostileFiles(t testing.TB) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../testdata/hostile/expect.json")
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]string
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	pt := map[string]string{}
	for name, says := range all {
		if strings.HasSuffix(name, ".pt") {
			pt[name] = says
		}
	}
	return pt
}

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestReadHostile refuses each hostile checkpoint with the message it
// must give, in bounded time and allocating at most the pickle budget of
// its file (PickleMemoryBase plus PickleMemoryPerByte per byte) and
// twice the file.
func TestReadHostile(t *testing.T) {
	files := hostileFiles(t)
	if len(files) < 8 {
		t.Fatalf("%d hostile checkpoints; run scripts/model_files.py", len(files))
	}
	for name, says := range files {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("../testdata/hostile", name))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			alloc := allocated(func() { _, err = Read(data) })
			elapsed := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), says) {
				t.Fatalf("error %v, want one saying %q", err, says)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("a message of %d bytes", len(err.Error()))
			}
			limit := uint64(PickleMemoryBase + PickleMemoryPerByte*len(data) + 2*len(data))
			t.Logf("%v, %d KiB allocated (limit %d KiB): %.200v", elapsed.Round(time.Microsecond), alloc>>10, limit>>10, err)
			if alloc > limit {
				t.Errorf("allocated %d bytes, limit %d", alloc, limit)
			}
			// The race detector slows decoding about tenfold (dict_flood.pt:
			// 6 s under -race on a loaded 2-core machine).
			bound := 5 * time.Second
			if childtest.Race {
				bound = 30 * time.Second
			}
			if elapsed > bound {
				t.Errorf("took %v, limit %v", elapsed, bound)
			}
		})
	}
}

// TestPickleChargesWhatItAllocates: the memory the unpickler charges
// against its budget is what it allocates, within a margin, on the
// pickles torch.save writes and on the floods made to exhaust it.
func TestPickleChargesWhatItAllocates(t *testing.T) {
	paths := []string{"testdata/state_dict.pt", "testdata/interop/lightning.ckpt", "testdata/interop/training_adam.pt",
		"../testdata/hostile/dict_flood.pt", "../testdata/hostile/memo_flood.pt", "../testdata/hostile/mark_flood.pt"}
	for _, p := range paths {
		z, err := zip.OpenReader(p)
		if err != nil {
			t.Fatal(err)
		}
		var pkl []byte
		for _, f := range z.File {
			if strings.HasSuffix(f.Name, "/data.pkl") {
				rc, _ := f.Open()
				pkl, _ = io.ReadAll(rc)
				rc.Close()
			}
		}
		z.Close()
		u := newUnpickler(pkl, &loadContext{fileSize: 1 << 40})
		u.persistent = func(u *unpickler, pid any) (any, error) {
			_, dt, n, err := storageID(pid, 5)
			return &storage{dtype: dt, numel: n}, err
		}
		runtime.GC()
		alloc := allocated(func() { u.load() })
		spent := uint64(min(u.spent, u.budget))
		t.Logf("%s: %d bytes of pickle, charged %d (%.1f per byte), allocated %d", p, len(pkl), spent, float64(spent)/float64(len(pkl)), alloc)
		if alloc > spent+spent/2+64<<10 {
			t.Errorf("%s: allocated %d bytes, charged %d", p, alloc, spent)
		}
	}
}

// sparseFile is a file of size bytes that holds head and then zeros: a
// sparse file, which costs its owner nothing on disk.
type sparseFile struct {
	head []byte
	size int64
}

func (f *sparseFile) ReadAt(b []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), f.size-off))
	clear(b[:n])
	if off < int64(len(f.head)) {
		copy(b[:n], f.head[off:])
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// TestViewElementCountOverflow: a view's element count is the product of
// its sizes, each at most 2^40; over a storage of more than 2^31.5
// elements (a sparse legacy checkpoint of 4 GiB), two sizes of 2^32 - 1
// multiply past 2^63. The view is refused as having more elements than
// its storage, not taken with a negative element count (which panicked
// gathering it) or, for two sizes of 2^32, with none.
func TestViewElementCountOverflow(t *testing.T) {
	const numel = 1 << 32
	for _, n := range []int{1<<32 - 1, 1 << 32} {
		var b pickleWriter
		b.WriteString("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.") // magic number
		b.WriteString("\x80\x02M\xe9\x03.")                                        // protocol version 1001
		b.WriteString("\x80\x02}.")                                                // system info
		b.WriteString("\x80\x02}")
		b.str("w")
		b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n((")
		b.str("storage")
		b.WriteString("ctorch\nByteStorage\n")
		b.str("0")
		b.str("cpu")
		fmt.Fprintf(&b, "I%d\nNtQK\x00", numel)
		fmt.Fprintf(&b, "(I%d\nI%d\nt", n, n)
		b.tuple(0, 0)
		b.WriteString("\x89}tRs.")
		b.WriteString("\x80\x02]")
		b.str("0")
		b.WriteString("a.")
		b.WriteString("\x00\x00\x00\x00\x01\x00\x00\x00") // the storage's element count, 2^32
		head := []byte(b.String())
		f := &sparseFile{head: head, size: int64(len(head)) + numel}
		_, err := ReadAt(f, f.size)
		if !errors.Is(err, ErrContent) || !strings.Contains(err.Error(), "more elements than its storage") {
			t.Errorf("a view of size [%d %d] over %d elements: %v, want ErrContent saying it has more elements than its storage", n, n, numel, err)
		}
	}
}

// TestClassErrorMessageBound: STACK_GLOBAL takes the module and class
// names from the stack, strs of any length (GLOBAL's lines are at most
// 256 bytes); the refusal quotes at most their first 200 bytes, not the
// 8 MiB the pickle gave.
func TestClassErrorMessageBound(t *testing.T) {
	var b pickleWriter
	b.WriteString("\x80\x04")
	b.str(strings.Repeat("m", 8<<20))
	b.str("Evil")
	b.WriteString("\x93.")
	_, err := Read(zipCheckpoint(t, b.String(), nil))
	if !errors.Is(err, ErrClass) || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "(8388608 bytes)") {
		t.Errorf("a class of a module named by 8 MiB: a message of %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
}
