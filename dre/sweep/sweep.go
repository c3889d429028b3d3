package sweep

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"rnnserve/cachesim"
	"rnnserve/dre"
	"rnnserve/models"
	"rnnserve/rnn"
	"rnnserve/schedule"
)

// Sweep is a sweep file: which models, input lengths, schedules and caches
// to analyse. Zero values mean the defaults noted; see the package
// documentation for an example.
type Sweep struct {
	Name      string      `yaml:"name" json:"name"`           // default: the file's base name
	Runs      int         `yaml:"runs" json:"runs"`           // back-to-back inferences AvgRW averages; default 100
	Seed      uint64      `yaml:"seed" json:"seed"`           // seed of the token ids; default 1
	Batch     int         `yaml:"batch" json:"batch"`         // batch size; default 1
	Schedules []string    `yaml:"schedules" json:"schedules"` // A, A+, P, P-bf16, P-int8; default [A, A+]
	Caches    []CacheSpec `yaml:"caches" json:"caches"`       // default one 12 MiB fully associative LRU
	// OPT adds Belady's MIN bound to rows whose trace has at most
	// OPTMaxAccesses line accesses (default 200,000: the bound costs tens
	// of microseconds per access, so larger traces would dominate the
	// sweep); the rows of larger ones say why they have none.
	OPT            bool      `yaml:"opt" json:"opt"`
	OPTMaxAccesses int64     `yaml:"opt_max_accesses" json:"opt_max_accesses"`
	Grid           *Grid     `yaml:"grid" json:"grid,omitempty"`
	Apps           *AppsGrid `yaml:"apps" json:"apps,omitempty"`
	Plots          Plots     `yaml:"plots" json:"plots"`
}

// CacheSpec is one simulated last-level cache: write-back,
// write-allocate, LRU.
type CacheSpec struct {
	Name     string `yaml:"name" json:"name"`           // default: the size, e.g. "12MiB"
	Size     Size   `yaml:"size" json:"size"`           // bytes, or with a unit: 12MiB, 512KiB
	LineSize int64  `yaml:"line_size" json:"line_size"` // default 64
	// Ways is the associativity: 0 (or -1) is fully associative, the
	// paper's model; N > 0 is N-way set-associative and must divide the
	// number of lines.
	Ways int `yaml:"ways" json:"ways"`
}

// Grid is the paper's Table I: every combination of its lists, each a
// stack with an embedding of width hidden on the input and a head over
// the vocabulary on every step. A vocabulary of 0 means neither: the
// stack reads float features of width hidden (the paper's Section IV
// example).
type Grid struct {
	Name           string   `yaml:"name" json:"name"` // the rows' model column; default "table1"
	Cells          []string `yaml:"cells" json:"cells"`
	Hidden         []int    `yaml:"hidden" json:"hidden"`
	Layers         []int    `yaml:"layers" json:"layers"`
	InputLengths   []int    `yaml:"input_lengths" json:"input_lengths"`
	Vocab          []int    `yaml:"vocab" json:"vocab"`
	HeadActivation string   `yaml:"head_activation" json:"head_activation"` // default softmax
}

// AppsGrid is the applications of the paper's Section V, from the
// catalog in package models, at each input length.
type AppsGrid struct {
	Names        []string `yaml:"names" json:"names"`
	InputLengths []int    `yaml:"input_lengths" json:"input_lengths"`
	// NoHead lists applications of Names to run a second time with their
	// softmax head left out: what the recurrent layers (and the
	// embedding) move alone. Their rows have the app's name and head_out
	// 0. An app whose head is its decoder's (GNMT) cannot be listed.
	NoHead []string `yaml:"no_head" json:"no_head,omitempty"`
}

// Plots chooses what the figures show.
type Plots struct {
	// DRECache names the cache of Figures 3-5; default the first cache.
	DRECache string `yaml:"dre_cache" json:"dre_cache"`
	// TrafficCache names the cache of Figure 6; default the first cache.
	TrafficCache string `yaml:"traffic_cache" json:"traffic_cache"`
	// Thresholds are the DRE values of Figures 3-5's bars; default
	// 1, 2, 4, 10, 20, 50.
	Thresholds []float64 `yaml:"thresholds" json:"thresholds"`
	// Cell restricts Figures 3-5 to one cell type (the paper's are LSTM);
	// empty means every cell of the grid.
	Cell string `yaml:"cell" json:"cell"`
}

// Size is a byte count. In a sweep file it is an integer or a number with
// a unit: B, KiB, MiB, GiB, or KB, MB, GB, which mean the same powers of
// 1024 (cache sizes are quoted that way: a "25 MB" LLC holds 25 MiB).
type Size int64

// Limits on a sweep, so that a typo cannot start a week of work.
const (
	maxRows      = 10_000_000
	maxBatch     = 1024
	maxInputLen  = 100_000
	maxListLen   = 10_000
	maxDimension = 1 << 20
)

// ErrSweep is matched (errors.Is) by every *SweepError.
var ErrSweep = errors.New("dresim: invalid sweep")

// SweepError names the key of a sweep file that is wrong, its value, and why.
type SweepError struct {
	File  string
	Line  int // 0 if unknown
	Key   string
	Value string
	Msg   string
}

func (e *SweepError) Error() string {
	var b strings.Builder
	b.WriteString("dresim: ")
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		if e.Value != "" {
			fmt.Fprintf(&b, " = %s", e.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrSweep) true.
func (e *SweepError) Is(target error) bool { return target == ErrSweep }

func sweepErr(key string, value any, format string, a ...any) *SweepError {
	v := ""
	if value != nil {
		v = fmt.Sprint(value)
	}
	return &SweepError{Key: key, Value: v, Msg: fmt.Sprintf(format, a...)}
}

// ParseSize reads a byte count: an integer, optionally followed by a unit
// (see Size).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a byte count (want e.g. 2097152, 512KiB, 12MiB)", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	shift := 0
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	default:
		return 0, fmt.Errorf("%q has an unknown unit (want B, KiB, MiB or GiB)", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n << shift, nil
}

// UnmarshalYAML reads a Size from a scalar.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a size must be a number or a string such as 12MiB", n.Line)
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	if v <= 0 {
		return fmt.Errorf("line %d: size `%s` is not positive", n.Line, n.Value)
	}
	*s = Size(v)
	return nil
}

// String formats s with the largest unit that divides it.
func (s Size) String() string {
	n := int64(s)
	for _, u := range []struct {
		shift int
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// MaxSweepBytes bounds a sweep file.
const MaxSweepBytes = 1 << 20

// ParseSweep decodes a sweep file strictly (an unknown key is an error
// naming it), applies defaults and validates it. file is used in error
// messages and, without a name in the file, as the sweep's name.
func ParseSweep(file string, data []byte) (*Sweep, error) {
	fail := func(e *SweepError) error {
		e.File = file
		return e
	}
	if len(data) > MaxSweepBytes {
		return nil, fail(sweepErr("", nil, "more than %d bytes (MaxSweepBytes)", MaxSweepBytes))
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail(sweepErr("", nil, "empty file"))
		}
		return nil, fail(sweepErr("", nil, "%s", yamlMsg(err)))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fail(sweepErr("", nil, "more than one YAML document"))
	}
	w := keyWalk{budget: 100_000, scalars: map[int][]scalarAt{}}
	if e := w.check(&root, reflect.TypeFor[Sweep](), "", 0); e != nil {
		return nil, fail(e)
	}
	var s Sweep
	if err := root.Decode(&s); err != nil {
		return nil, fail(w.typeError(err))
	}
	if s.Name == "" {
		s.Name = baseName(file)
	}
	s.EnsureDefaults()
	if e := s.validate(); e != nil {
		return nil, fail(e)
	}
	return &s, nil
}

func yamlMsg(err error) string {
	return strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n ", ""), "yaml: ")
}

func baseName(file string) string {
	if i := strings.LastIndexAny(file, `/\`); i >= 0 {
		file = file[i+1:]
	}
	for _, ext := range []string{".yaml", ".yml"} {
		file = strings.TrimSuffix(file, ext)
	}
	if file == "" {
		return "sweep"
	}
	return file
}

// yamlKey is the key a struct field has in a sweep file.
func yamlKey(f reflect.StructField) string {
	if tag := f.Tag.Get("yaml"); tag != "" {
		return strings.Split(tag, ",")[0]
	}
	return strings.ToLower(f.Name)
}

// keyWalk checks a YAML document against the Go type it decodes into.
type keyWalk struct {
	budget  int                // nodes left to visit, against alias bombs
	scalars map[int][]scalarAt // by line: the scalar values there and their keys
}

type scalarAt struct {
	key, value string
}

// check walks n against t and reports the first mapping key that t does
// not have, with its path and the keys it does have. It records where
// each scalar value is, for typeError.
func (w *keyWalk) check(n *yaml.Node, t reflect.Type, path string, depth int) *SweepError {
	w.budget--
	if depth > 32 || w.budget < 0 {
		return &SweepError{Key: path, Line: n.Line, Msg: "nested too deeply or too large"}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 1 {
			return w.check(n.Content[0], t, path, depth+1)
		}
	case yaml.AliasNode:
		return w.check(n.Alias, t, path, depth+1)
	case yaml.ScalarNode:
		w.scalars[n.Line] = append(w.scalars[n.Line], scalarAt{path, n.Value})
	case yaml.MappingNode:
		if t.Kind() != reflect.Struct {
			return nil // a type error, which decoding reports
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			k := yamlKey(f)
			fields[k] = f.Type
			names = append(names, k)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			key := k.Value
			if path != "" {
				key = path + "." + k.Value
			}
			ft, ok := fields[k.Value]
			if !ok {
				return &SweepError{Key: key, Line: k.Line, Msg: fmt.Sprintf("unknown key (known here: %s)", strings.Join(names, ", "))}
			}
			if e := w.check(n.Content[i+1], ft, key, depth+1); e != nil {
				return e
			}
		}
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice {
			return nil
		}
		for i, c := range n.Content {
			if e := w.check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), depth+1); e != nil {
				return e
			}
		}
	}
	return nil
}

// typeError turns a decoding error into a SweepError naming the key and
// value of the first problem: the scalar on the line the error gives
// whose value it quotes (yaml quotes values in backquotes), or the only
// scalar there.
func (w *keyWalk) typeError(err error) *SweepError {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		_, rest, _ := strings.Cut(msg, ": ")
		quoted := ""
		if _, after, ok := strings.Cut(rest, "`"); ok {
			quoted, _, _ = strings.Cut(after, "`")
		}
		at := w.scalars[line]
		for _, a := range at {
			if a.key != "" && (len(at) == 1 || a.value == quoted) {
				return &SweepError{Line: line, Key: a.key, Value: strconv.Quote(a.value), Msg: rest}
			}
		}
	}
	return sweepErr("", nil, "%s", yamlMsg(err))
}

// Defaults applied by EnsureDefaults.
const defaultOPTMaxAccesses = 200_000

var defaultThresholds = []float64{1, 2, 4, 10, 20, 50}

// EnsureDefaults fills zero values with their defaults.
func (s *Sweep) EnsureDefaults() {
	if s.Runs == 0 {
		s.Runs = dre.DefaultRuns
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Batch == 0 {
		s.Batch = 1
	}
	if len(s.Schedules) == 0 {
		s.Schedules = []string{"A", "A+"}
	}
	if len(s.Caches) == 0 {
		s.Caches = []CacheSpec{{Size: dre.DefaultCacheSize}}
	}
	for i := range s.Caches {
		c := &s.Caches[i]
		if c.LineSize == 0 {
			c.LineSize = cachesim.DefaultLineSize
		}
		if c.Ways == 0 {
			c.Ways = cachesim.FullyAssociative
		}
		if c.Name == "" {
			c.Name = c.Size.String()
		}
	}
	if s.OPTMaxAccesses == 0 {
		s.OPTMaxAccesses = defaultOPTMaxAccesses
	}
	if s.Grid != nil {
		if s.Grid.Name == "" {
			s.Grid.Name = "table1"
		}
		if s.Grid.HeadActivation == "" {
			s.Grid.HeadActivation = "softmax"
		}
	}
	if s.Plots.DRECache == "" && len(s.Caches) > 0 {
		s.Plots.DRECache = s.Caches[0].Name
	}
	if s.Plots.TrafficCache == "" && len(s.Caches) > 0 {
		s.Plots.TrafficCache = s.Caches[0].Name
	}
	if len(s.Plots.Thresholds) == 0 {
		s.Plots.Thresholds = slices.Clone(defaultThresholds)
	}
}

// checkInts validates a non-empty list of distinct values in lo..hi.
func checkInts(key string, v []int, lo, hi int) *SweepError {
	if len(v) == 0 {
		return sweepErr(key, nil, "missing or empty list")
	}
	if len(v) > maxListLen {
		return sweepErr(key, nil, "%d values, more than %d", len(v), maxListLen)
	}
	for i, x := range v {
		k := fmt.Sprintf("%s[%d]", key, i)
		if x < lo || x > hi {
			return sweepErr(k, x, "want %d..%d", lo, hi)
		}
		if slices.Contains(v[:i], x) {
			return sweepErr(k, x, "listed twice")
		}
	}
	return nil
}

// Validate reports the first invalid setting of a sweep whose defaults
// have been applied, naming its key and value.
func (s *Sweep) Validate() error {
	if e := s.validate(); e != nil {
		return e
	}
	return nil
}

func (s *Sweep) validate() *SweepError {
	switch {
	case s.Runs < 1 || s.Runs > dre.MaxRuns:
		return sweepErr("runs", s.Runs, "want 1..%d", dre.MaxRuns)
	case s.Batch < 1 || s.Batch > maxBatch:
		return sweepErr("batch", s.Batch, "want 1..%d", maxBatch)
	case s.OPTMaxAccesses < 1 || s.OPTMaxAccesses >= math.MaxInt32:
		return sweepErr("opt_max_accesses", s.OPTMaxAccesses, "want 1..%d", math.MaxInt32-1)
	case s.Grid == nil && s.Apps == nil:
		return sweepErr("", nil, "nothing to do: give a grid, apps, or both")
	}
	for i, name := range s.Schedules {
		k := fmt.Sprintf("schedules[%d]", i)
		if _, err := schedule.ParseVariant(name); err != nil {
			return sweepErr(k, strconv.Quote(name), "want A, A+, P, P-bf16 or P-int8")
		}
		if slices.Contains(s.Schedules[:i], name) {
			return sweepErr(k, strconv.Quote(name), "listed twice")
		}
	}
	for i, c := range s.Caches {
		if e := c.validate(fmt.Sprintf("caches[%d]", i)); e != nil {
			return e
		}
		for _, d := range s.Caches[:i] {
			if d.Name == c.Name {
				return sweepErr(fmt.Sprintf("caches[%d].name", i), strconv.Quote(c.Name), "two caches have this name")
			}
		}
	}
	if g := s.Grid; g != nil {
		if len(g.Cells) == 0 {
			return sweepErr("grid.cells", nil, "missing or empty list")
		}
		for i, c := range g.Cells {
			k := fmt.Sprintf("grid.cells[%d]", i)
			if _, err := rnn.ParseCell(c); err != nil {
				return sweepErr(k, strconv.Quote(c), "want lstm, gru, rnn_tanh or rnn_relu")
			}
			if slices.Contains(g.Cells[:i], c) {
				return sweepErr(k, strconv.Quote(c), "listed twice")
			}
		}
		for _, l := range []struct {
			key    string
			v      []int
			lo, hi int
		}{
			{"grid.hidden", g.Hidden, 1, maxDimension},
			{"grid.layers", g.Layers, 1, 1024},
			{"grid.input_lengths", g.InputLengths, 1, maxInputLen},
			{"grid.vocab", g.Vocab, 0, maxDimension},
		} {
			if e := checkInts(l.key, l.v, l.lo, l.hi); e != nil {
				return e
			}
		}
		if _, err := rnn.ParseActivation(g.HeadActivation); err != nil {
			return sweepErr("grid.head_activation", strconv.Quote(g.HeadActivation), "want none, softmax or log_softmax")
		}
		// The largest combination must be a network the engine can build.
		cfg := rnn.Config{Cell: rnn.LSTM, Input: slices.Max(g.Hidden), Hidden: slices.Max(g.Hidden),
			Layers: slices.Max(g.Layers), Vocab: slices.Max(g.Vocab), HeadOut: slices.Max(g.Vocab)}
		if err := cfg.Validate(); err != nil {
			return sweepErr("grid", nil, "%v", err)
		}
	}
	if a := s.Apps; a != nil {
		if len(a.Names) == 0 {
			return sweepErr("apps.names", nil, "missing or empty list (known: %s)", strings.Join(models.AppNames(), ", "))
		}
		for i, n := range a.Names {
			k := fmt.Sprintf("apps.names[%d]", i)
			if _, err := models.LookupApp(n); err != nil {
				return sweepErr(k, strconv.Quote(n), "unknown application (known: %s)", strings.Join(models.AppNames(), ", "))
			}
			if slices.Contains(a.Names[:i], n) {
				return sweepErr(k, strconv.Quote(n), "listed twice")
			}
		}
		if e := checkInts("apps.input_lengths", a.InputLengths, 1, maxInputLen); e != nil {
			return e
		}
		for i, n := range a.NoHead {
			k := fmt.Sprintf("apps.no_head[%d]", i)
			switch app, err := models.LookupApp(n); {
			case !slices.Contains(a.Names, n):
				return sweepErr(k, strconv.Quote(n), "not in apps.names (%s)", strings.Join(a.Names, ", "))
			case slices.Contains(a.NoHead[:i], n):
				return sweepErr(k, strconv.Quote(n), "listed twice")
			case err != nil || app.Decoder != nil:
				return sweepErr(k, strconv.Quote(n), "its head is its decoder's, which feeds the tokens it picks back")
			case app.Encoder.Head == nil:
				return sweepErr(k, strconv.Quote(n), "the application has no head")
			}
		}
	}
	if rows := s.Rows(); rows > maxRows {
		return sweepErr("", nil, "%d rows, more than %d", rows, maxRows)
	}
	return s.Plots.validate(s)
}

// Validate reports the first invalid setting of a cache, naming it as
// key. Every field must be set as Sweep.EnsureDefaults leaves them: Ways
// is cachesim.FullyAssociative or the associativity, never 0.
func (c CacheSpec) Validate(key string) error {
	if e := c.validate(key); e != nil {
		return e
	}
	return nil
}

func (c CacheSpec) validate(key string) *SweepError {
	size := int64(c.Size)
	switch {
	case c.LineSize <= 0 || bits.OnesCount64(uint64(c.LineSize)) != 1:
		return sweepErr(key+".line_size", c.LineSize, "want a power of two")
	case size <= 0:
		return sweepErr(key+".size", c.Size, "want a positive size")
	case size < c.LineSize:
		return sweepErr(key+".size", c.Size, "smaller than one line (line_size %d)", c.LineSize)
	case size%c.LineSize != 0:
		return sweepErr(key+".size", c.Size, "not a whole number of %d-byte lines", c.LineSize)
	case size/c.LineSize > math.MaxInt32:
		return sweepErr(key+".size", c.Size, "more than %d lines", math.MaxInt32)
	}
	lines := size / c.LineSize
	switch {
	case c.Ways == cachesim.FullyAssociative:
	case c.Ways == 0:
		return sweepErr(key+".ways", c.Ways, "unset: want %d (fully associative) or the associativity", cachesim.FullyAssociative)
	case c.Ways < 0:
		return sweepErr(key+".ways", c.Ways, "want 0 (fully associative) or a positive associativity")
	case int64(c.Ways) > lines:
		return sweepErr(key+".ways", c.Ways, "more ways than the %d lines of %v", lines, c.Size)
	case lines%int64(c.Ways) != 0:
		return sweepErr(key+".ways", c.Ways, "does not divide the %d lines of %v (%d-byte lines) into whole sets", lines, c.Size, c.LineSize)
	}
	if err := c.config().Validate(); err != nil {
		return sweepErr(key, nil, "%v", err)
	}
	return nil
}

func (c CacheSpec) config() cachesim.Config {
	return cachesim.Config{Size: int64(c.Size), LineSize: c.LineSize, Ways: c.Ways}
}

func (p *Plots) validate(s *Sweep) *SweepError {
	has := func(name string) bool {
		return slices.ContainsFunc(s.Caches, func(c CacheSpec) bool { return c.Name == name })
	}
	switch {
	case !has(p.DRECache):
		return sweepErr("plots.dre_cache", strconv.Quote(p.DRECache), "no cache has this name")
	case !has(p.TrafficCache):
		return sweepErr("plots.traffic_cache", strconv.Quote(p.TrafficCache), "no cache has this name")
	case len(p.Thresholds) > 32:
		return sweepErr("plots.thresholds", nil, "%d values, more than 32", len(p.Thresholds))
	}
	for i, t := range p.Thresholds {
		if !(t > 0) || math.IsInf(t, 0) || i > 0 && t <= p.Thresholds[i-1] {
			return sweepErr(fmt.Sprintf("plots.thresholds[%d]", i), t, "want positive, increasing values")
		}
	}
	if p.Cell != "" {
		if _, err := rnn.ParseCell(p.Cell); err != nil {
			return sweepErr("plots.cell", strconv.Quote(p.Cell), "want lstm, gru, rnn_tanh, rnn_relu or empty")
		}
	}
	return nil
}

// Rows is the number of rows the sweep produces: one per model, input
// length, schedule and cache.
func (s *Sweep) Rows() int64 {
	return s.Units() * int64(len(s.Caches))
}

// Units is the number of (model, input length, schedule) combinations.
func (s *Sweep) Units() int64 {
	var n int64
	sched := int64(len(s.Schedules))
	if g := s.Grid; g != nil {
		n += int64(len(g.Cells)) * int64(len(g.Hidden)) * int64(len(g.Layers)) * int64(len(g.InputLengths)) * int64(len(g.Vocab)) * sched
	}
	if a := s.Apps; a != nil {
		n += int64(len(a.Names)+len(a.NoHead)) * int64(len(a.InputLengths)) * sched
	}
	return n
}

// Fingerprint identifies the rows a sweep produces: shards of one sweep
// share it and merge refuses shards that do not. Plots do not enter it.
func (s *Sweep) Fingerprint() string {
	c := *s
	c.Name, c.Plots = "", Plots{}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // plain data
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// TableISpec is a model of the paper's Table I: a stack of layers cells
// of width hidden with, for a vocabulary above 0, an embedding of width
// hidden on the input and a head over the vocabulary (activation head) on
// every step; with vocabulary 0 the stack reads float features of width
// hidden.
func TableISpec(cell string, hidden, layers, vocab int, head string) models.Spec {
	spec := models.Spec{Cell: cell, InputSize: hidden, HiddenSize: hidden, NumLayers: layers}
	if vocab > 0 {
		spec.Embedding = &models.Embedding{VocabSize: vocab}
		spec.Head = &models.Head{OutFeatures: vocab, Activation: head}
	}
	return spec
}

// unit is one model at one input length under one schedule: a plan, which
// is analysed through every cache of the sweep, one row per cache.
type unit struct {
	Index    int // position among all the sweep's units
	Kind     string
	Model    string
	Spec     models.Spec // grid point or the app's encoder
	App      *models.App // nil for a grid point
	T        int
	Schedule schedule.Variant
	NoHead   bool   // the app's head left out (apps.no_head)
	Note     string // said in every row of the unit
}

// units lists the sweep's units in row order: the grid (cells, hidden
// sizes, layer counts, vocabularies, input lengths, schedules, outermost
// first), then the applications (name, input length, schedule; an app of
// no_head again without its head after its own units).
func (s *Sweep) units() []unit {
	var us []unit
	var scheds []schedule.Variant
	for _, name := range s.Schedules {
		sc, err := schedule.ParseVariant(name)
		if err != nil {
			panic(err) // validated
		}
		scheds = append(scheds, sc)
	}
	add := func(u unit) {
		for _, sc := range scheds {
			u.Index, u.Schedule = len(us), sc
			us = append(us, u)
		}
	}
	if g := s.Grid; g != nil {
		for _, cell := range g.Cells {
			for _, h := range g.Hidden {
				for _, l := range g.Layers {
					for _, v := range g.Vocab {
						for _, t := range g.InputLengths {
							add(unit{Kind: "grid", Model: g.Name, T: t, Spec: TableISpec(cell, h, l, v, g.HeadActivation)})
						}
					}
				}
			}
		}
	}
	if a := s.Apps; a != nil {
		for _, name := range a.Names {
			app, err := models.LookupApp(name)
			if err != nil {
				panic(err) // validated
			}
			for _, t := range a.InputLengths {
				add(unit{Kind: "app", Model: app.Name, Spec: app.Encoder, App: &app, T: t})
			}
			if slices.Contains(a.NoHead, name) {
				spec := app.Encoder
				spec.Head = nil
				for _, t := range a.InputLengths {
					add(unit{Kind: "app", Model: app.Name, Spec: spec, App: &app, T: t, NoHead: true, Note: "head left out (apps.no_head)"})
				}
			}
		}
	}
	return us
}

// Shard is a deterministic part of a sweep: unit i belongs to shard
// i mod N. K counts from 0, like an indexed batch job's index.
type Shard struct {
	K, N int
}

// ParseShard reads "k/N" with 0 <= k < N.
func ParseShard(s string) (Shard, error) {
	ks, ns, ok := strings.Cut(s, "/")
	k, err1 := strconv.Atoi(ks)
	n, err2 := strconv.Atoi(ns)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return Shard{}, fmt.Errorf("--shard %q: want k/N, e.g. 0/4", s)
	case n < 1:
		return Shard{}, fmt.Errorf("--shard %q: N = %d, want at least 1", s, n)
	case k < 0 || k >= n:
		return Shard{}, fmt.Errorf("--shard %q: k = %d is out of range, want 0..%d", s, k, n-1)
	}
	return Shard{K: k, N: n}, nil
}

func (sh Shard) String() string { return fmt.Sprintf("%d/%d", sh.K, sh.N) }

// has reports whether unit i belongs to the shard. Units alternate between
// shards, so that each gets a share of the large models.
func (sh Shard) has(i int) bool { return sh.N <= 1 || i%sh.N == sh.K }
