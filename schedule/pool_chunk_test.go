package schedule

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// chunkLog records a chunked job's runs: how often each chunk ran, and
// whether one began before the phase before it had ended.
type chunkLog struct {
	chunks [][]int // [phase][part]
	ran    [][][]atomic.Int32
	left   []atomic.Int32 // chunks of each phase not yet finished
	early  atomic.Bool
}

func newChunkLog(chunks [][]int) *chunkLog {
	l := &chunkLog{chunks: chunks, ran: make([][][]atomic.Int32, len(chunks)), left: make([]atomic.Int32, len(chunks))}
	for ph, parts := range chunks {
		l.ran[ph] = make([][]atomic.Int32, len(parts))
		for q, k := range parts {
			l.ran[ph][q] = make([]atomic.Int32, k)
			l.left[ph].Add(int32(k))
		}
	}
	return l
}

func (l *chunkLog) count(ph, q int) int { return l.chunks[ph][q] }

func (l *chunkLog) run(ph, q, c int) {
	if ph > 0 && l.left[ph-1].Load() != 0 {
		l.early.Store(true)
	}
	l.ran[ph][q][c].Add(1)
	l.left[ph].Add(-1)
}

func (l *chunkLog) check(t *testing.T, what string) {
	t.Helper()
	if l.early.Load() {
		t.Errorf("%s: a chunk began before the phase before it had ended", what)
	}
	for ph := range l.ran {
		for q := range l.ran[ph] {
			for c := range l.ran[ph][q] {
				if n := l.ran[ph][q][c].Load(); n != 1 {
					t.Fatalf("%s: chunk %d of part %d of phase %d ran %d times, want once", what, c, q, ph, n)
				}
			}
		}
	}
}

// TestChunkedPhases runs jobs of chunked parts (0 to 7 chunks each, of
// random lengths up to 100 µs) on a pool of three: every chunk runs once,
// none before the phase before it has ended, and the pool runs other
// jobs after.
func TestChunkedPhases(t *testing.T) {
	p := testPool(t, 3)
	rng := rand.New(rand.NewPCG(3, 9))
	for round := range 30 {
		chunks := make([][]int, 1+rng.IntN(4))
		for ph := range chunks {
			chunks[ph] = []int{rng.IntN(8), rng.IntN(8), rng.IntN(8)}
		}
		delay := time.Duration(rng.IntN(100)) * time.Microsecond
		l := newChunkLog(chunks)
		p.chunkedPhases(len(chunks), l.count, func(ph, q, c int) {
			if (ph+q+c)%3 == 0 {
				spinFor(delay)
			}
			l.run(ph, q, c)
		})
		l.check(t, fmt.Sprintf("round %d", round))
	}
	var n atomic.Int32
	p.Phases(2, func(int, int) { n.Add(1) })
	if n.Load() != 6 {
		t.Errorf("Phases after chunked jobs ran %d parts, want 6", n.Load())
	}
}

// TestChunkedTakesFromTheBack gives the caller's part of a pool of two
// eight chunks and the helper's none, and holds the caller's first chunk
// until the last has run: only the helper can run it, taking it from
// the back of a part another worker is running.
func TestChunkedTakesFromTheBack(t *testing.T) {
	p := testPool(t, 2)
	chunks := [][]int{{8, 0}}
	l := newChunkLog(chunks)
	var last atomic.Bool
	timedOut := false
	before := p.Stolen()
	p.chunkedPhases(1, l.count, func(ph, q, c int) {
		switch c {
		case 0:
			end := time.Now().Add(10 * time.Second)
			for !last.Load() && time.Now().Before(end) {
			}
			timedOut = !last.Load()
		case 7:
			last.Store(true)
		}
		l.run(ph, q, c)
	})
	if timedOut {
		t.Fatal("the caller's part's last chunk did not run while its first was running")
	}
	l.check(t, "one part of eight")
	if p.Stolen() == before {
		t.Error("Stolen() did not count the chunks taken from the caller's part")
	}
}

// TestChunkedAbsentWorkers runs chunked jobs on a pool whose helpers
// never come: the caller runs every chunk, each once, phase by phase,
// each part's from its first, and counts the parts it took over.
func TestChunkedAbsentWorkers(t *testing.T) {
	p := &Pool{n: 3}
	p.wake.init()
	chunks := [][]int{{3, 0, 2}, {1, 4, 1}, {0, 0, 5}}
	var order [][3]int
	p.chunkedPhases(len(chunks), func(ph, q int) int { return chunks[ph][q] }, func(ph, q, c int) {
		order = append(order, [3]int{ph, q, c})
	})
	var want [][3]int
	for ph, parts := range chunks {
		for q, k := range parts {
			for c := range k {
				want = append(want, [3]int{ph, q, c})
			}
		}
	}
	if len(order) != len(want) {
		t.Fatalf("ran chunks %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("ran chunks %v, want %v", order, want)
		}
	}
	if got := p.Stolen(); got != 6 {
		t.Errorf("Stolen() = %d, want 6 (the absent workers' parts)", got)
	}
}

// TestChunkedPanic panics in a chunk of a helper's part: chunkedPhases
// panics in its caller with a *PanicError, and the pool runs the next
// job.
func TestChunkedPanic(t *testing.T) {
	p := testPool(t, 2)
	chunks := [][]int{{3, 3}, {3, 3}}
	pe := func() (pe *PanicError) {
		defer func() { pe, _ = recover().(*PanicError) }()
		p.chunkedPhases(2, func(ph, q int) int { return chunks[ph][q] }, func(ph, q, c int) {
			if ph == 0 && q == 1 && c == 1 {
				panic("chunk blew up")
			}
		})
		return nil
	}()
	if pe == nil || pe.Value != "chunk blew up" {
		t.Fatalf("chunkedPhases with a panicking chunk: %v, want its *PanicError", pe)
	}
	l := newChunkLog(chunks)
	p.chunkedPhases(2, l.count, l.run)
	l.check(t, "after the panic")
}

// spinFor keeps the thread busy for d.
func spinFor(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
