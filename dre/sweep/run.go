package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// RunOptions configure one run of a sweep.
type RunOptions struct {
	Out      string // output directory, created if needed
	File     string // the sweep file, recorded in the manifest
	Shard    Shard  // zero value: the whole sweep
	Jobs     int    // workers; 0 means runtime.NumCPU()
	Figures  bool   // write the figures at the end (or on interrupt)
	Progress io.Writer
	// OnRows, if set, is called (from the writing goroutine) after each
	// unit's rows are written; tests use it to interrupt a sweep.
	OnRows func(written int)
}

// Summary is how a run ended.
type Summary struct {
	Rows, Want  int
	Interrupted bool
	Wall        time.Duration
}

// ErrInterrupted is returned by Run when its context was cancelled before
// every row was done; the rows finished by then are in the output.
var ErrInterrupted = errors.New("dresim: interrupted")

type result struct {
	pos  int // position in the shard's unit list
	rows []Row
	err  error
}

// Run analyses the sweep's units of opt.Shard on opt.Jobs workers and
// writes the rows to opt.Out in the sweep's order as they complete. sw
// must have its defaults applied (ParseSweep does). When
// ctx is cancelled it stops handing out work, waits for the analyses under
// way, writes every finished row (still in order, with gaps), results.json
// and the figures, and returns ErrInterrupted.
func Run(ctx context.Context, sw *Sweep, opt RunOptions) (Summary, error) {
	start := time.Now()
	jobs := opt.Jobs
	if jobs <= 0 {
		jobs = runtime.NumCPU()
	}
	if opt.Shard.N == 0 {
		opt.Shard = Shard{K: 0, N: 1}
	}
	if opt.Shard.K < 0 || opt.Shard.K >= opt.Shard.N {
		return Summary{}, fmt.Errorf("dresim: shard %v out of range", opt.Shard)
	}
	if err := sw.Validate(); err != nil {
		return Summary{}, err
	}
	var mine []unit
	for _, u := range sw.units() {
		if opt.Shard.has(u.Index) {
			mine = append(mine, u)
		}
	}
	nc := len(sw.Caches)
	want := len(mine) * nc
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return Summary{}, err
	}
	m := Manifest{Sweep: sw, File: opt.File, Fingerprint: sw.Fingerprint(),
		TotalRows: sw.Rows(), ShardRows: int64(want), Started: now()}
	if opt.Shard.N > 1 {
		sh := opt.Shard
		m.Shard = &sh
	}
	os.Remove(filepath.Join(opt.Out, ResultsFile)) // a stale one would describe another run
	if err := writeJSONFile(filepath.Join(opt.Out, ManifestFile), &m); err != nil {
		return Summary{}, err
	}
	w, err := newRowWriter(opt.Out)
	if err != nil {
		return Summary{}, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	results := make(chan result, jobs)
	var wg sync.WaitGroup
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pos := range work {
				u := &mine[pos]
				b, err := build(u, sw.Batch, sw.Seed)
				var rows []Row
				if err == nil {
					rows, err = analyze(u, b, sw)
				}
				results <- result{pos: pos, rows: rows, err: err}
			}
		}()
	}
	go func() {
		defer close(work)
		for pos := range mine {
			select {
			case work <- pos:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()

	bar := newProgress(opt.Progress, want)
	pending := map[int][]Row{}
	next, written := 0, 0
	var firstErr error
	for res := range results {
		if res.err != nil {
			if firstErr == nil {
				firstErr = res.err
				cancel()
			}
			continue
		}
		pending[res.pos] = res.rows
		for pending[next] != nil && firstErr == nil {
			if err := w.Write(pending[next]); err != nil {
				firstErr = fmt.Errorf("write rows: %w", err)
				cancel()
				break
			}
			written += len(pending[next])
			delete(pending, next)
			next++
			if opt.OnRows != nil {
				opt.OnRows(written)
			}
		}
		bar.update(written + len(pending)*nc)
	}
	// Interrupted or failed: the rows finished out of order follow, in order.
	for _, pos := range slices.Sorted(maps.Keys(pending)) {
		if err := w.Write(pending[pos]); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("write rows: %w", err)
		}
		written += len(pending[pos])
	}
	bar.done(written)
	if err := w.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	sum := Summary{Rows: written, Want: want, Wall: time.Since(start)}
	sum.Interrupted = firstErr == nil && written < want
	res := Results{Manifest: m, Complete: written == want, Interrupted: sum.Interrupted,
		WallSeconds: sum.Wall.Seconds(), Rows: w.rows}
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	if err := writeJSONFile(filepath.Join(opt.Out, ResultsFile), &res); err != nil && firstErr == nil {
		firstErr = err
	}
	if opt.Figures && len(w.rows) > 0 {
		if _, err := Plot(sw, w.rows, filepath.Join(opt.Out, FiguresDir)); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("figures: %w", err)
		}
	}
	switch {
	case firstErr != nil:
		return sum, firstErr
	case sum.Interrupted:
		return sum, ErrInterrupted
	}
	return sum, nil
}
