package pytorch

import (
	"archive/zip"
	"encoding/json"
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
