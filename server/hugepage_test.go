package server

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/hugepage"
)

// bigMatrix is the bytes of W_hh of lmSpec(1024, ...): 4×1024 rows of
// 1024 float32s, on huge pages wherever a schedule keeps a copy of it.
const bigMatrix = 4 * 1024 * 1024 * 4

// TestHugePageMetric: loading a model whose W_hh is 16 MiB maps it on
// huge pages, which rnnserve_hugepage_mapped_bytes shows (the Go heap's
// figures do not), and the W_hh is held once: not on the heap as well,
// the mapped bytes and the heap's growth together no more than the heap
// grows with mapping off. Unloading it gives the mappings back once
// collected. With mapping off (a host without huge pages) the model
// loads on the heap and the gauge does not move.
func TestHugePageMetric(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	thp := runtime.GOOS == "linux" && err == nil && !strings.Contains(string(mode), "[never]")
	type growth struct{ mapped, heap float64 }
	grew := map[bool]growth{}
	for _, on := range []bool{true, false} {
		t.Run("mapping="+strconv.FormatBool(on), func(t *testing.T) {
			was := hugepage.Enable(on)
			defer hugepage.Enable(was)
			c := startControl(t, map[string]string{"small/model.yaml": lmSpec(8, 1), "big/model.yaml": lmSpec(1024, 2)}, []string{"small"},
				func(o *Options, _ *Deps) { o.ModelControlMode = ControlExplicit })
			mapped := func() float64 {
				v, err := strconv.ParseFloat(metric(t, c.rest, "rnnserve_hugepage_mapped_bytes"), 64)
				if err != nil {
					t.Fatalf("rnnserve_hugepage_mapped_bytes: %v", err)
				}
				return v
			}
			// Earlier tests' mappings go first, so that only this
			// model's come and go below.
			before := settled(mapped)
			heapBefore := heapLive()
			if code, body, _ := c.call(t, c.rest, "/v2/repository/models/big/load", ""); code != 200 {
				t.Fatalf("load: %d %s", code, body)
			}
			loaded := settled(mapped)
			grew[on] = growth{loaded - before, float64(heapLive() - heapBefore)}
			switch {
			case on && thp && loaded-before < bigMatrix:
				t.Fatalf("with the model loaded %.0f bytes mapped, %.0f before: want at least its %d-byte W_hh more", loaded, before, bigMatrix)
			case !(on && thp) && loaded > before:
				t.Fatalf("without huge pages %.0f bytes mapped, %.0f before", loaded, before)
			}
			t.Logf("%.0f bytes mapped before the load, %.0f with the model; the heap grew %.0f bytes", before, loaded, grew[on].heap)
			if code, body, _ := c.call(t, c.rest, "/v2/repository/models/big/unload", ""); code != 200 {
				t.Fatalf("unload: %d %s", code, body)
			}
			deadline := time.Now().Add(20 * time.Second)
			for mapped() > before {
				if time.Now().After(deadline) {
					t.Fatalf("unloaded and collected, %.0f bytes still mapped; %.0f before the load, %.0f loaded", mapped(), before, loaded)
				}
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	if on, off := grew[true], grew[false]; thp && (on.heap >= bigMatrix || on.mapped+on.heap > off.heap+bigMatrix/4) {
		t.Errorf("with mapping, %.0f bytes mapped and the heap %.0f bytes larger; without, the heap %.0f bytes larger: want the %d-byte W_hh held once", on.mapped, on.heap, off.heap, bigMatrix)
	}
}

// settled collects garbage until read gives the same figure twice, and
// returns it.
func settled(read func() float64) float64 {
	last := -1.0
	for range 100 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		if v := read(); v == last {
			return v
		} else {
			last = v
		}
	}
	return last
}

// heapLive is the bytes of live Go heap objects after a collection.
func heapLive() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
