package sweep

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Row is one model at one input length, under one schedule, through one
// cache: its DRAM traffic per inference, working set and DRE. Byte counts
// are per inference, averaged over Runs back-to-back inferences.
type Row struct {
	Index         int    `json:"index"` // position in the whole (unsharded) sweep
	Kind          string `json:"kind"`  // grid or app
	Model         string `json:"model"` // the grid's name, or the app's
	Cell          string `json:"cell"`
	Hidden        int    `json:"hidden"`
	Proj          int    `json:"proj"`
	Layers        int    `json:"layers"`
	Bidirectional bool   `json:"bidirectional"`
	Vocab         int    `json:"vocab"`    // embedding rows, 0 for float features
	HeadOut       int    `json:"head_out"` // softmax outputs per step
	T             int    `json:"t"`        // input length
	B             int    `json:"b"`
	Schedule      string `json:"schedule"`
	Cache         string `json:"cache"` // the cache's name in the sweep
	CacheBytes    int64  `json:"cache_bytes"`
	LineSize      int64  `json:"line_size"`
	Ways          int    `json:"ways"` // -1: fully associative
	Runs          int    `json:"runs"`

	AvgReadBytes    float64 `json:"avg_read_bytes"`
	AvgWriteBytes   float64 `json:"avg_write_bytes"`
	AvgRW           float64 `json:"avg_rw_bytes"`
	WorkingSetBytes int64   `json:"working_set_bytes"`
	DRE             float64 `json:"dre"`
	FootprintBytes  int64   `json:"footprint_bytes"` // distinct lines one inference touches
	OPTReadBytes    *int64  `json:"opt_read_bytes"`  // Belady's MIN bound on read bytes, when computed
	OPTSkipped      string  `json:"opt_skipped"`     // why the bound is missing, when it was asked for
	SimSeconds      float64 `json:"sim_seconds"`     // wall time of this row's simulation
	Note            string  `json:"note"`
}

var csvHeader = []string{
	"index", "kind", "model", "cell", "hidden", "proj", "layers", "bidirectional", "vocab", "head_out",
	"t", "b", "schedule", "cache", "cache_bytes", "line_size", "ways", "runs",
	"avg_read_bytes", "avg_write_bytes", "avg_rw_bytes", "working_set_bytes", "dre", "footprint_bytes",
	"opt_read_bytes", "opt_skipped", "sim_seconds", "note",
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func (r *Row) record() []string {
	opt := ""
	if r.OPTReadBytes != nil {
		opt = strconv.FormatInt(*r.OPTReadBytes, 10)
	}
	i, i64 := strconv.Itoa, func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{
		i(r.Index), r.Kind, r.Model, r.Cell, i(r.Hidden), i(r.Proj), i(r.Layers), strconv.FormatBool(r.Bidirectional),
		i(r.Vocab), i(r.HeadOut), i(r.T), i(r.B), r.Schedule, r.Cache, i64(r.CacheBytes), i64(r.LineSize), i(r.Ways), i(r.Runs),
		ftoa(r.AvgReadBytes), ftoa(r.AvgWriteBytes), ftoa(r.AvgRW), i64(r.WorkingSetBytes), ftoa(r.DRE), i64(r.FootprintBytes),
		opt, r.OPTSkipped, ftoa(r.SimSeconds), r.Note,
	}
}

// parseRecord is the inverse of record.
func parseRecord(rec []string) (Row, error) {
	var r Row
	var err error
	at := 0
	next := func() string { at++; return rec[at-1] }
	num := func(p *int) {
		if err == nil {
			f := next()
			if *p, err = strconv.Atoi(f); err != nil {
				err = fmt.Errorf("column %s: %q is not an integer", csvHeader[at-1], f)
			}
		}
	}
	num64 := func(p *int64) {
		if err == nil {
			f := next()
			if *p, err = strconv.ParseInt(f, 10, 64); err != nil {
				err = fmt.Errorf("column %s: %q is not an integer", csvHeader[at-1], f)
			}
		}
	}
	flt := func(p *float64) {
		if err == nil {
			f := next()
			if *p, err = strconv.ParseFloat(f, 64); err != nil {
				err = fmt.Errorf("column %s: %q is not a number", csvHeader[at-1], f)
			}
		}
	}
	str := func(p *string) {
		if err == nil {
			*p = next()
		}
	}
	num(&r.Index)
	str(&r.Kind)
	str(&r.Model)
	str(&r.Cell)
	num(&r.Hidden)
	num(&r.Proj)
	num(&r.Layers)
	if err == nil {
		f := next()
		if r.Bidirectional, err = strconv.ParseBool(f); err != nil {
			err = fmt.Errorf("column bidirectional: %q is not a boolean", f)
		}
	}
	num(&r.Vocab)
	num(&r.HeadOut)
	num(&r.T)
	num(&r.B)
	str(&r.Schedule)
	str(&r.Cache)
	num64(&r.CacheBytes)
	num64(&r.LineSize)
	num(&r.Ways)
	num(&r.Runs)
	flt(&r.AvgReadBytes)
	flt(&r.AvgWriteBytes)
	flt(&r.AvgRW)
	num64(&r.WorkingSetBytes)
	flt(&r.DRE)
	num64(&r.FootprintBytes)
	if err == nil {
		if f := next(); f != "" {
			v, perr := strconv.ParseInt(f, 10, 64)
			if perr != nil {
				err = fmt.Errorf("column opt_read_bytes: %q is not an integer", f)
			}
			r.OPTReadBytes = &v
		}
	}
	str(&r.OPTSkipped)
	flt(&r.SimSeconds)
	str(&r.Note)
	return r, err
}

// MaxRowBytes bounds one row of rows.jsonl or rows.csv: a row dresim
// writes takes well under a kilobyte, its longest field being a note.
const MaxRowBytes = 16 << 10

// MaxManifestBytes bounds sweep.json: a sweep file is at most
// MaxSweepBytes of YAML, and its JSON form is of the same order.
const MaxManifestBytes = 4 * MaxSweepBytes

// ReadCSV reads the rows of a CSV file written by dresim: at most max
// rows (the manifest's ShardRows), each at most MaxRowBytes.
func ReadCSV(r io.Reader, max int64) ([]Row, error) {
	cr := csv.NewReader(&lineBound{r: bufio.NewReader(r)})
	cr.FieldsPerRecord = len(csvHeader)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read CSV header: %w", err)
	}
	if !slices.Equal(head, csvHeader) {
		return nil, fmt.Errorf("CSV header %v is not dresim's", head)
	}
	var rows []Row
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read CSV: %w", err)
		}
		if int64(len(rows)) >= max {
			line, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("CSV line %d: more than the %d rows the manifest names", line, max)
		}
		row, err := parseRecord(rec)
		if err != nil {
			line, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("CSV line %d: %w", line, err)
		}
		rows = append(rows, row)
	}
}

// ReadJSONL reads rows written one JSON object per line: at most max
// rows (the manifest's ShardRows), each on a line of its own of at most
// MaxRowBytes. Blank lines are skipped.
func ReadJSONL(r io.Reader, max int64) ([]Row, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), MaxRowBytes)
	var rows []Row
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if int64(len(rows)) >= max {
			return nil, fmt.Errorf("read JSON lines: line %d: more than the %d rows the manifest names", line, max)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var row Row
		if err := dec.Decode(&row); err != nil {
			return nil, fmt.Errorf("read JSON lines: line %d: %w", line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("read JSON lines: line %d: more than one row", line)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("read JSON lines: row %d: longer than %d bytes (MaxRowBytes)", len(rows)+1, MaxRowBytes)
		}
		return nil, fmt.Errorf("read JSON lines: %w", err)
	}
	return rows, nil
}

// lineBound passes a reader on and fails a line longer than MaxRowBytes
// (a CSV record may span lines: a quoted note with line breaks).
type lineBound struct {
	r   *bufio.Reader
	run int // bytes since the last line break
}

func (l *lineBound) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, c := range p[:n] {
		if l.run++; c == '\n' {
			l.run = 0
		} else if l.run > MaxRowBytes {
			return 0, fmt.Errorf("a line longer than %d bytes (MaxRowBytes)", MaxRowBytes)
		}
	}
	return n, err
}

// Output file names inside an output directory.
const (
	ManifestFile = "sweep.json"   // the sweep and the shard, written first
	CSVFile      = "rows.csv"     // rows, appended and flushed as they complete, in order
	JSONLFile    = "rows.jsonl"   // the same rows, one JSON object per line
	ResultsFile  = "results.json" // everything, written at the end or on interrupt
	FiguresDir   = "figures"
)

// Manifest says which sweep (and which shard of it) an output directory holds.
type Manifest struct {
	Sweep       *Sweep `json:"sweep"`
	File        string `json:"file"`
	Fingerprint string `json:"fingerprint"`
	Shard       *Shard `json:"shard,omitempty"` // nil: the whole sweep
	TotalRows   int64  `json:"total_rows"`      // rows of the whole sweep
	ShardRows   int64  `json:"shard_rows"`      // rows this directory should hold
	Started     string `json:"started"`
}

// Results is results.json: the manifest, how the run ended, and every row.
type Results struct {
	Manifest
	Complete    bool    `json:"complete"`
	Interrupted bool    `json:"interrupted"`
	Error       string  `json:"error,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
	Rows        []Row   `json:"rows"`
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadManifest reads the manifest of an output directory and checks it
// as dresim wrote it: at most MaxManifestBytes, no unknown key, a sweep
// that validates, its fingerprint and row counts, and a shard k/N with
// 0 <= k < N.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func decodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("more than %d bytes (MaxManifestBytes)", MaxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the manifest")
	}
	if m.Sweep == nil {
		return nil, errors.New("no sweep")
	}
	if err := m.Sweep.Validate(); err != nil {
		return nil, err
	}
	switch fp := m.Sweep.Fingerprint(); {
	case m.Fingerprint != fp:
		return nil, fmt.Errorf("fingerprint %q, but its sweep's is %q", m.Fingerprint, fp)
	case m.TotalRows != m.Sweep.Rows():
		return nil, fmt.Errorf("total_rows %d, but its sweep has %d", m.TotalRows, m.Sweep.Rows())
	case m.Shard != nil && (m.Shard.N < 1 || m.Shard.K < 0 || m.Shard.K >= m.Shard.N):
		return nil, fmt.Errorf("shard %d/%d: want k/N with 0 <= k < N", m.Shard.K, m.Shard.N)
	case m.ShardRows < 0 || m.ShardRows > m.TotalRows:
		return nil, fmt.Errorf("shard_rows %d: want 0..%d", m.ShardRows, m.TotalRows)
	}
	return &m, nil
}

// ReadRows reads the rows of an output directory (its JSONLFile): at
// most max of them (the manifest's ShardRows).
func ReadRows(dir string, max int64) ([]Row, error) {
	f, err := os.Open(filepath.Join(dir, JSONLFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := ReadJSONL(f, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return rows, nil
}

// ReadOutput reads an output directory's manifest and rows, and checks
// that every row's index lies inside the sweep.
func ReadOutput(dir string) (*Manifest, []Row, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	rows, err := ReadRows(dir, m.ShardRows)
	if err != nil {
		return nil, nil, err
	}
	if err := checkIndices(m, rows); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, JSONLFile), err)
	}
	return m, rows, nil
}

// checkIndices fails a row whose index is outside m's sweep.
func checkIndices(m *Manifest, rows []Row) error {
	for i, r := range rows {
		if r.Index < 0 || int64(r.Index) >= m.TotalRows {
			return fmt.Errorf("row %d: index %d outside the sweep's %d rows", i+1, r.Index, m.TotalRows)
		}
	}
	return nil
}

// rowWriter appends rows to rows.csv and rows.jsonl, flushing both after
// every batch, so that the files are valid whenever the process stops.
type rowWriter struct {
	csvF, jsonF *os.File
	csv         *csv.Writer
	json        *bufio.Writer
	rows        []Row // everything written, for results.json and the figures
}

func newRowWriter(dir string) (*rowWriter, error) {
	cf, err := os.Create(filepath.Join(dir, CSVFile))
	if err != nil {
		return nil, err
	}
	jf, err := os.Create(filepath.Join(dir, JSONLFile))
	if err != nil {
		cf.Close()
		return nil, err
	}
	w := &rowWriter{csvF: cf, jsonF: jf, csv: csv.NewWriter(cf), json: bufio.NewWriter(jf)}
	if err := w.csv.Write(csvHeader); err != nil {
		w.Close()
		return nil, err
	}
	w.csv.Flush()
	return w, w.csv.Error()
}

// Write appends rows and flushes them to both files.
func (w *rowWriter) Write(rows []Row) error {
	for i := range rows {
		if err := w.csv.Write(rows[i].record()); err != nil {
			return err
		}
		b, err := json.Marshal(&rows[i])
		if err != nil {
			return err
		}
		w.json.Write(b)
		w.json.WriteByte('\n')
	}
	w.rows = append(w.rows, rows...)
	w.csv.Flush()
	if err := w.csv.Error(); err != nil {
		return err
	}
	return w.json.Flush()
}

func (w *rowWriter) Close() error {
	w.csv.Flush()
	err := errors.Join(w.csv.Error(), w.json.Flush())
	return errors.Join(err, w.csvF.Close(), w.jsonF.Close())
}

// WriteDir writes res (its rows in order) as a complete output directory
// without figures: CSV, JSON lines, the manifest and results.json. dir
// must exist.
func WriteDir(dir string, res *Results) error {
	w, err := newRowWriter(dir)
	if err != nil {
		return err
	}
	if err := w.Write(res.Rows); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := writeJSONFile(filepath.Join(dir, ManifestFile), &res.Manifest); err != nil {
		return err
	}
	return writeJSONFile(filepath.Join(dir, ResultsFile), res)
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }
