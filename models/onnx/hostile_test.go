package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/childtest"
	"rnnserve/internal/fuzzbound"
	b "rnnserve/models/internal/onnxbuild"
	pb "rnnserve/models/onnx/onnxpb"
)

// hostileBound is what Read may spend on one hostile file in the child
// process: 2 s of CPU time, and 32 MiB plus 2 bytes per byte of the file
// allocated (fuzzbound counts every heap allocation, so this bounds the
// peak too).
// Reading the file into memory comes before and is not counted.
var hostileBound = fuzzbound.Limits{CPU: 2 * time.Second, Bytes: 32 << 20, PerByte: 2}

// maxRSS is the child process's peak resident memory (VmHWM) allowed for
// a file of size bytes: the test binary, the file, and the bound above,
// with room for the race detector's shadow memory.
func maxRSS(size int) int64 { return 128<<20 + 3*int64(size) }

// hostileWant is the sentinel each hostile file must be refused with,
// and a word of the message.
var hostileWant = map[string]struct {
	err  error
	says string
}{
	"identity_cycle":   {ErrUnsupported, "is on a cycle"},
	"dangling_reverse": {nil, ""}, // sorted, then loaded
	"data_cycle":       {ErrUnsupported, "is on a cycle"},
	"many_nodes":       {ErrLimit, "MaxNodes"},
	"many_outputs":     {ErrLimit, "DecodeFactor"}, // 82 bytes each decoded, 2 in the file: MaxMessages is tested by TestMaxMessages
	"packed_varints":   {ErrLimit, "DecodeFactor"},
	"deep_groups":      {ErrFormat, "parse error"},
	"huge_dims":        {ErrLimit, "MaxElements"},
	"shared_external":  {ErrLimit, "more than twice the"},
	"long_name":        {ErrUnsupported, "(8388608 bytes)"},
}

// TestHostile reads each hostile file (onnxbuild.All: a GRU whose
// initial state comes from an Identity cycle, 20,000 dangling nodes in
// reverse order, ...) in a child process, where a fatal stack overflow
// or an out-of-memory kill fails the test instead of ending it, and
// checks that it is refused with the right error (the dangling nodes in
// reverse order are sorted, in linear time, and load), within
// hostileBound's time and allocation, and under maxRSS of peak resident
// memory. The
// figures are logged (go test -v -run TestHostile ./models/onnx).
func TestHostile(t *testing.T) {
	dir := t.TempDir()
	for _, h := range b.All() {
		t.Run(h.Name, func(t *testing.T) {
			want, ok := hostileWant[h.Name]
			if !ok {
				t.Fatalf("no expectation for %s", h.Name)
			}
			file := filepath.Join(dir, h.Name+".onnx")
			if err := os.WriteFile(file, h.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			env := []string{"ONNX_HOSTILE_FILE=" + file, "GORACE=atexit_sleep_ms=0"}
			if h.External != nil {
				ext := filepath.Join(dir, h.Name+".bin")
				os.WriteFile(ext, h.External, 0o644)
				env = append(env, "ONNX_HOSTILE_EXTERNAL="+ext)
			}
			r := childtest.Run(t, "TestHostileChild", "read", time.Minute, env...)
			if r.Code != 0 {
				t.Fatalf("the child reading %s (%s) ended with %d after %v:\n%s", h.Name, h.Why, r.Code, r.Elapsed, tail(r.Output))
			}
			// The child's own peak, VmHWM (getrusage's, r.MaxRSS, counts
			// the parent's memory at the fork too).
			var rss int64
			if _, hwm, ok := strings.Cut(r.Output, "VmHWM:"); ok {
				fmt.Sscan(hwm, &rss)
				rss <<= 10
			} else {
				t.Fatalf("the child did not report its peak memory:\n%s", tail(r.Output))
			}
			_, refusal, found := strings.Cut(r.Output, "refused: ")
			refusal, _, _ = strings.Cut(refusal, "\n")
			switch {
			case want.err == nil && (found || !strings.Contains(r.Output, "loaded")):
				t.Fatalf("%s (%s) did not load:\n%s", h.Name, h.Why, tail(r.Output))
			case want.err == nil:
				refusal = "loaded"
			case !found:
				t.Fatalf("%s (%s) was not refused:\n%s", h.Name, h.Why, tail(r.Output))
			case !strings.Contains(refusal, want.err.Error()) || !strings.Contains(refusal, want.says):
				t.Errorf("refused with %q, want %v saying %q", refusal, want.err, want.says)
			}
			if len(refusal) > 600 {
				t.Errorf("a refusal of %d bytes: %.200s...", len(refusal), refusal)
			}
			if rss > maxRSS(len(h.Data)) {
				t.Errorf("peak resident memory %d MiB, more than %d MiB", rss>>20, maxRSS(len(h.Data))>>20)
			}
			t.Logf("%s, %d bytes (%s): in %v (child process), peak RSS %d MiB: %s",
				h.Name, len(h.Data), h.Why, r.Elapsed.Round(time.Millisecond), rss>>20, refusal)
		})
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// TestHostileChild is TestHostile's child: it reads the file named by
// $ONNX_HOSTILE_FILE under hostileBound and prints the refusal.
func TestHostileChild(t *testing.T) {
	childtest.Role(t)
	data, err := os.ReadFile(os.Getenv("ONNX_HOSTILE_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	var ext []byte
	if e := os.Getenv("ONNX_HOSTILE_EXTERNAL"); e != "" {
		if ext, err = os.ReadFile(e); err != nil {
			t.Fatal(err)
		}
	}
	hostileBound.Run(t, len(data), func() {
		_, err = Read(data, func(string) ([]byte, error) {
			if ext == nil {
				return nil, errors.New("no external data")
			}
			return ext, nil
		})
	})
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				fmt.Println(line)
			}
		}
	}
	if err == nil {
		fmt.Println("loaded")
		return
	}
	fmt.Printf("refused: %v\n", err)
}

// TestDanglingForward: the 20,000 dangling nodes of DanglingReverse,
// in order, are shape computations that nothing reads: the model loads,
// in time linear in them (a sweep per node took 40 s reversed).
func TestDanglingForward(t *testing.T) {
	data := b.DanglingForward(20000)
	start := time.Now()
	hostileBound.Run(t, len(data), func() {
		m, err := Read(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Layers) != 1 || m.Layers[0].Cell != "gru" {
			t.Errorf("layers %+v", m.Layers)
		}
	})
	t.Logf("%d bytes, 20,000 dangling nodes: loaded in %v", len(data), time.Since(start).Round(time.Millisecond))
}

// TestConcatStatesBound: a Concat of final states makes a list of the
// entries it joins, up to 4096; a chain of Concats each joining the
// previous one's 4096 entries made 32 KiB of list per node of some 20
// bytes (8,192 nodes: 256 MiB from a file of 200 KB; MaxNodes of them
// 2 GiB). All the Concats of a graph together may join at most
// maxJoinedStates entries, and the file is refused within hostileBound's
// allocation.
func TestConcatStatesBound(t *testing.T) {
	const in, H, n = 2, 3, 8192
	g := &pb.GraphProto{
		Input: []*pb.ValueInfoProto{b.Value("x", pb.TensorProto_FLOAT)},
		Initializer: []*pb.TensorProto{
			b.Fill("W", []int64{1, 3 * H, in}, 0.1, 0.01), b.Fill("R", []int64{1, 3 * H, H}, 0.2, 0.01),
			b.Fill("B", []int64{1, 6 * H}, 0.3, 0.01), b.Ints("axes", 1),
		},
		Node: []*pb.NodeProto{
			b.Node("gru", "GRU", []string{"x", "W", "R", "B"}, []string{"y", "h"}, b.Int("hidden_size", H), b.Int("linear_before_reset", 1)),
			b.Node("squeeze", "Squeeze", []string{"y", "axes"}, []string{"out"}),
			b.Node("", "Concat", slices.Repeat([]string{"h"}, 4096), []string{"c0"}, b.Int("axis", 0)),
		},
		Output: []*pb.ValueInfoProto{b.Value("out", pb.TensorProto_FLOAT)},
	}
	for i := 1; i < n; i++ {
		g.Node = append(g.Node, b.Node("", "Concat", []string{fmt.Sprint("c", i-1)}, []string{fmt.Sprint("c", i)}))
	}
	data := b.Model(g, 14)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	_, err := Read(data, nil)
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("%d Concats in %d bytes: %d KiB allocated: %v", n, len(data), alloc>>10, err)
	if limit := uint64(hostileBound.Bytes) + uint64(hostileBound.PerByte)*uint64(len(data)); alloc > limit {
		t.Errorf("%d Concats of 4096 final states in %d bytes: allocated %d MiB, limit %d MiB", n, len(data), alloc>>20, limit>>20)
	}
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "maxJoinedStates") {
		t.Errorf("%d Concats of 4096 final states: %v, want ErrLimit naming maxJoinedStates", n, err)
	}
}

// TestExternalFilesBound: every external data file a model reads stays
// open until its weights are read, so a stack of GRU layers each naming
// files of its own would hold one descriptor per tensor, up to MaxNodes.
// The loader opens at most MaxExternalFiles of them and refuses the
// model.
func TestExternalFilesBound(t *testing.T) {
	const layers, H = MaxExternalFiles/2 + 1, 1
	g := &pb.GraphProto{Input: []*pb.ValueInfoProto{b.Value("x", pb.TensorProto_FLOAT)}}
	files := map[string][]byte{}
	cur := "x"
	for k := range layers {
		w := b.Fill(fmt.Sprint("W", k), []int64{1, 3 * H, H}, 0.1, 0.01)
		r := b.Fill(fmt.Sprint("R", k), []int64{1, 3 * H, H}, 0.2, 0.01)
		files[fmt.Sprint("w", k)] = b.External(w, fmt.Sprint("w", k), 0)
		files[fmt.Sprint("r", k)] = b.External(r, fmt.Sprint("r", k), 0)
		y, out := fmt.Sprint("y", k), fmt.Sprint("out", k)
		g.Initializer = append(g.Initializer, w, r, b.Ints(fmt.Sprint("axes", k), 1))
		g.Node = append(g.Node,
			b.Node(fmt.Sprint("gru", k), "GRU", []string{cur, w.GetName(), r.GetName()}, []string{y, ""}, b.Int("hidden_size", H), b.Int("linear_before_reset", 1)),
			b.Node("", "Squeeze", []string{y, fmt.Sprint("axes", k)}, []string{out}))
		cur = out
	}
	g.Output = []*pb.ValueInfoProto{b.Value(cur, pb.TensorProto_FLOAT)}
	opened := 0
	_, err := Read(b.Model(g, 14), func(loc string) ([]byte, error) {
		opened++
		if d, ok := files[loc]; ok {
			return d, nil
		}
		return nil, os.ErrNotExist
	})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxExternalFiles") {
		t.Errorf("%d layers with files of their own: %v, want ErrLimit naming MaxExternalFiles", layers, err)
	}
	if opened > MaxExternalFiles {
		t.Errorf("opened %d external data files, limit %d", opened, MaxExternalFiles)
	}
}
