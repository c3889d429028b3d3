package server

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"rnnserve/models"
	"rnnserve/schedule"
	"rnnserve/server/internal/infer"
)

// ModelConfig is a model's optional serving config, config.yaml beside
// its model.yaml in the repository.
type ModelConfig struct {
	// Schedule for whole-request plans: auto (default), A, A+ or P (the
	// partitioned schedule, on GOMAXPROCS cores). auto models the traffic
	// of every candidate at the host's cache sizes and picks the fastest
	// (the rule is in docs/api.md, "Health and metadata").
	Schedule string `yaml:"schedule,omitempty"`
	// Precision of the stored recurrent weights: f32 (default), bf16 or
	// int8. bf16 allows P-bf16 (P with bf16 weights, outputs within about
	// 2e-2 of float32), int8 allows P-int8 (int8 weights and dynamically
	// quantized activations, docs/models.md "Precision"): with schedule P
	// it is what runs, with auto it is one more candidate. A and A+ have
	// neither form. When P-int8 runs, batched steps use int8 weights too.
	Precision string `yaml:"precision,omitempty"`
	// Batching overrides the server's batching.enabled for this model.
	Batching *bool `yaml:"batching,omitempty"`
}

// ErrModelConfig is wrapped by every error about the values of a model's
// config.yaml.
var ErrModelConfig = errors.New("server: invalid model config")

// Validate reports the first invalid value, naming config.yaml and its key.
func (c ModelConfig) Validate() error {
	_, _, err := c.parseSchedule()
	return err
}

// parseSchedule returns the schedule c asks for (0 for auto) and the weight
// precision it allows.
func (c ModelConfig) parseSchedule() (schedule.Schedule, schedule.Precision, error) {
	prec, err := schedule.ParsePrecision(c.Precision)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: config.yaml: precision %q: want f32, bf16 or int8", ErrModelConfig, c.Precision)
	}
	if c.Schedule == "" || c.Schedule == "auto" {
		return 0, prec, nil
	}
	s, err := schedule.Parse(c.Schedule)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: config.yaml: schedule %q: want auto, A, A+ or P", ErrModelConfig, c.Schedule)
	}
	if prec != schedule.F32 && s != schedule.Partitioned {
		return 0, 0, fmt.Errorf("%w: config.yaml: precision %v with schedule %v: only P stores %v weights (use schedule P or auto, or precision f32)", ErrModelConfig, prec, s, prec)
	}
	return s, prec, nil
}

// Entry is one model of a repository, loaded.
type Entry struct {
	Name   string
	Model  *models.Model
	Tree   *models.TreeModel // set instead of Model for a tree model (kind: tree)
	Config ModelConfig
}

// ErrRepository is wrapped by errors about the repository's layout.
var ErrRepository = errors.New("server: model repository")

// specFile is the file that makes a directory of the repository a model.
const specFile = "model.yaml"

// Repository is a model repository: a directory with one folder per
// model, named after the model, or (KServe's single-model layout, where a
// storageUri names one model) a directory that is itself one model's
// folder. A model folder holds a model.yaml (and what it names), or one
// weights file whose spec is inferred, and an optional config.yaml.
//
// Names that come from requests pick one entry of the repository's root:
// checkModelName refuses a separator, "." and "..", so a request cannot
// reach past the root. What the operator put in the root is trusted: a
// folder that is a symbolic link is followed wherever it points (give
// NewRepository os.DirFS, not os.Root's FS, for that), while a path
// written in a spec is read through the same fs.FS and may not climb out
// with "..". Nothing in a Repository changes after NewRepository.
type Repository struct {
	fsys fs.FS
	// single names the one model when the root is itself a model folder.
	single string
}

// NewRepository returns the repository in fsys. When fsys's root is
// itself a model folder (it holds a model.yaml or exactly one weights
// file) the repository is that one model, named single, which must then
// be a valid model name; otherwise every model folder below the root is a
// model.
func NewRepository(fsys fs.FS, single string) (*Repository, error) {
	if !models.IsModelFolder(fsys, ".") {
		return &Repository{fsys: fsys}, nil
	}
	if err := checkModelName(single); err != nil {
		return nil, fmt.Errorf("%w: the folder is one model's (it holds a %s or one weights file): name it (-model-name, KServe's --model_name): %w",
			ErrRepository, specFile, err)
	}
	return &Repository{fsys: fsys, single: single}, nil
}

// Single is the name of the repository's one model when its root is a
// model folder, or "".
func (r *Repository) Single() string { return r.single }

// Skipped is an entry of the repository's root that is no model, and why.
type Skipped struct {
	Name   string
	Reason string
	// Hidden is set for a name starting with a dot (.git, Kubernetes'
	// ..data links): skipped without a warning.
	Hidden bool
}

// maxListed bounds the file names an explanation lists.
const maxListed = 8

// Scan lists the repository's models by name, sorted, and the entries of
// its root that are not models with the reason. It stats entries (and
// follows symbolic links) but opens no file.
func (r *Repository) Scan() (names []string, skipped []Skipped, err error) {
	if r.single != "" {
		return []string{r.single}, nil, nil
	}
	dirs, err := fs.ReadDir(r.fsys, ".")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrRepository, err)
	}
	for _, d := range dirs {
		name := d.Name()
		skip := func(format string, a ...any) {
			skipped = append(skipped, Skipped{Name: name, Reason: fmt.Sprintf(format, a...), Hidden: strings.HasPrefix(name, ".")})
		}
		if strings.HasPrefix(name, ".") {
			skip("hidden: its name starts with a dot")
			continue
		}
		if err := checkModelName(name); err != nil {
			skip("not a model name: %v", err)
			continue
		}
		isDir := d.IsDir()
		if d.Type()&fs.ModeSymlink != 0 {
			fi, err := fs.Stat(r.fsys, name)
			if err != nil {
				skip("a symbolic link that cannot be followed: %v", err)
				continue
			}
			isDir = fi.IsDir()
		}
		if !isDir {
			skip("a file, not a folder (a model is a folder holding a %s or one weights file)", specFile)
			continue
		}
		if models.IsModelFolder(r.fsys, name) {
			names = append(names, name)
			continue
		}
		files, err := fs.ReadDir(r.fsys, name)
		if err != nil {
			skip("cannot list it: %v", err)
			continue
		}
		var listed []string
		for _, f := range files[:min(len(files), maxListed)] {
			listed = append(listed, f.Name())
		}
		if len(files) > maxListed {
			listed = append(listed, fmt.Sprintf("and %d more", len(files)-maxListed))
		}
		skip("holds no %s and not exactly one weights file (.safetensors, .pt, .pth, .bin, .ckpt, .onnx); it holds %d entries: %s",
			specFile, len(files), strings.Join(listed, ", "))
	}
	return names, skipped, nil
}

// Has reports whether the repository has a model folder called name.
func (r *Repository) Has(name string) bool {
	if r.single != "" || checkModelName(name) != nil {
		return name == r.single
	}
	fi, err := fs.Stat(r.fsys, name)
	return err == nil && fi.IsDir() && models.IsModelFolder(r.fsys, name)
}

// Load loads model name: LoadModel on its folder.
func (r *Repository) Load(name string) (Entry, error) {
	if err := checkModelName(name); err != nil {
		return Entry{}, err
	}
	if r.single != "" {
		if name != r.single {
			return Entry{}, fmt.Errorf("%w: the repository is the one model %q", ErrNotInRepository, r.single)
		}
		return loadFolder(r.fsys, ".", name)
	}
	return LoadModel(r.fsys, name)
}

// Failure is a model that did not load, and why.
type Failure struct {
	Name string
	Err  error
}

// LoadAll loads the named models, returning those that loaded and those
// that did not.
func (r *Repository) LoadAll(names []string) ([]Entry, []Failure) {
	var entries []Entry
	var failed []Failure
	for _, name := range names {
		e, err := r.Load(name)
		if err != nil {
			failed = append(failed, Failure{Name: name, Err: err})
			continue
		}
		entries = append(entries, e)
	}
	return entries, failed
}

// maxStampFiles bounds the files a poll looks at in one model folder.
const maxStampFiles = 1024

// stamp is what a poll compares to see that a model folder changed: the
// name, size and modification time of each file in it and one level
// below (symbolic links followed), at most maxStampFiles of them.
func (r *Repository) stamp(name string) (string, error) {
	dir := name
	if r.single != "" {
		dir = "."
	}
	var b strings.Builder
	n := 0
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		files, err := fs.ReadDir(r.fsys, dir)
		if err != nil {
			return err
		}
		for _, f := range files {
			if n++; n > maxStampFiles {
				return fmt.Errorf("more than %d files in model folder %q", maxStampFiles, name)
			}
			p := path.Join(dir, f.Name())
			fi, err := fs.Stat(r.fsys, p)
			if err != nil {
				fmt.Fprintf(&b, "%s:%v\n", p, err)
				continue
			}
			fmt.Fprintf(&b, "%s:%d:%d:%v\n", p, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
			if fi.IsDir() && depth < 1 {
				if err := walk(p, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(dir, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

// RepositoryModels lists the names of the model folders of fsys, sorted
// (a Repository's Scan without the reasons).
func RepositoryModels(fsys fs.FS) ([]string, error) {
	names, _, err := (&Repository{fsys: fsys}).Scan()
	return names, err
}

// checkModelName refuses a name that is not one directory of the
// repository: empty, ".", "..", or holding a path separator or NUL.
func checkModelName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return infer.BadRequest("model name %q is not a directory name", infer.Clip(name))
	case strings.ContainsAny(name, `/\`+"\x00"):
		return infer.BadRequest("model name %q holds a path separator", infer.Clip(name))
	case !fs.ValidPath(name):
		return infer.BadRequest("model name %q is not a valid path element", infer.Clip(name))
	}
	return nil
}

// LoadModel loads the model in directory name of a multi-model
// repository fsys: its spec (model.yaml: a sequence model or, with kind:
// tree, a tree model), the weights the spec names, and the optional
// config.yaml. Files are read through fsys only.
func LoadModel(fsys fs.FS, name string) (Entry, error) {
	if err := checkModelName(name); err != nil {
		return Entry{}, err
	}
	return loadFolder(fsys, name, name)
}

// loadFolder loads the model folder dir of fsys ("." for the root) as
// model name.
func loadFolder(fsys fs.FS, dir, name string) (Entry, error) {
	spec := path.Join(dir, specFile)
	data, err := fs.ReadFile(fsys, spec)
	e := Entry{Name: name}
	switch {
	case err == nil && models.IsTreeSpec(data):
		e.Tree, err = models.LoadTreeFS(fsys, spec)
	case err == nil:
		e.Model, err = models.LoadFS(fsys, spec)
	case !errors.Is(err, fs.ErrNotExist):
	case !models.IsModelFolder(fsys, dir):
		err = fmt.Errorf("%w: directory %q holds no %s and not exactly one weights file (safetensors, PyTorch checkpoint or ONNX)",
			ErrNotInRepository, infer.Clip(name), specFile)
	default:
		// A folder holding only a weights file: its spec is inferred.
		e.Model, err = models.OpenFS(fsys, dir)
	}
	if err != nil {
		return Entry{}, err
	}
	if data, err := fs.ReadFile(fsys, path.Join(dir, "config.yaml")); err == nil {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&e.Config); err != nil {
			return Entry{}, fmt.Errorf("config.yaml: %w", err)
		}
		if err := e.Config.Validate(); err != nil {
			return Entry{}, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Entry{}, err
	}
	return e, nil
}

// LoadRepository loads every model of a multi-model repository, failing
// on the first that does not load (tests and tools that want all or
// nothing; serve uses Repository.LoadAll).
func LoadRepository(fsys fs.FS) ([]Entry, error) {
	names, err := RepositoryModels(fsys)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no model directories (a %s or one weights file each)", ErrRepository, specFile)
	}
	entries := make([]Entry, 0, len(names))
	for _, name := range names {
		e, err := LoadModel(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("%w: model %q: %w", ErrRepository, name, err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// Load loads (or reloads) model name from the repository and swaps it in,
// as an explicit load call does: once loaded, the model is one the server
// should serve. Requests in flight on the old version finish on it; new
// ones go to the new version. A load that fails leaves the old version
// serving. Live sequences move to the new version when their state has
// the same shape; otherwise they end with ErrSequenceEnded. Front ends
// call it after authorize.
func (s *Server) Load(name string) error {
	if s.repo == nil {
		return ErrNoRepository
	}
	st, _ := s.repo.stamp(name)
	return s.loadAs(name, st, true)
}

// load loads model name for a poll: it should be served whether or not
// it loads.
func (s *Server) load(name, stamp string) error { return s.loadAs(name, stamp, false) }

func (s *Server) loadAs(name, stamp string, byRequest bool) error {
	if s.draining.Load() {
		return ErrDraining
	}
	start := time.Now()
	e, err := s.repo.Load(name)
	if err == nil {
		// Reading the files may outlast Stop (a stalled mount), which
		// does not wait for it; building the model uses the server's
		// workers, so a build starts only before Stop, which waits for it.
		if !s.enterBuild() {
			return ErrDraining
		}
		defer s.wg.Done()
		var m model
		if m, err = s.newModel(e); err == nil {
			event := "load"
			if _, ok := s.table()[name]; ok {
				event = "reload"
			}
			s.swap(name, m, stamp)
			s.event(event, name, name, time.Since(start), nil)
			s.readinessChanged()
			return nil
		}
	}
	err = loadError(name, err)
	label := ""
	if checkModelName(name) == nil && !errors.Is(err, ErrNotInRepository) {
		label = name
		s.mu.Lock()
		s.failed[name] = loadFailure{reason: errorText(err), at: time.Now(), stamp: stamp}
		if !byRequest || s.wanted[name] {
			s.setWantedLocked(name, true)
		}
		s.mu.Unlock()
	}
	s.event("load_failed", name, label, time.Since(start), err)
	s.readinessChanged()
	return err
}

// enterBuild counts a model's build among what Stop waits for, unless the
// server is stopping (then it returns false).
func (s *Server) enterBuild() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.wg.Add(1)
	return true
}

// swap puts m in the table under name, retiring the model it replaces.
func (s *Server) swap(name string, m model, stamp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nb := m.base()
	old := s.table()[name]
	switch {
	case old != nil:
		ob := old.base()
		if sameState(old, m) {
			nb.seqs = ob.seqs
		} else {
			ob.seqs.endAll(fmt.Errorf("%w: model %q was reloaded with a different state shape", ErrSequenceEnded, name))
			nb.seqs.adoptGone(ob.seqs)
		}
	case s.gone[name] != nil:
		nb.seqs.adoptGone(s.gone[name])
	}
	delete(s.gone, name)
	delete(s.failed, name)
	s.stamps[name] = stamp
	table := maps.Clone(s.table())
	table[name] = m
	s.models.Store(&table)
	s.setWantedLocked(name, true)
	s.metrics.forget(name)
	nb.describe()
	if s.stop != nil && !s.draining.Load() {
		s.startLocked(m)
	}
	if old != nil {
		s.retireLocked(old)
	}
}

// Unload removes model name, as an explicit unload call does: the server
// no longer should serve it. Requests in flight finish; its live
// sequences end, and a later request for one is told the model was
// unloaded. Front ends call it after authorize.
func (s *Server) Unload(name string) error {
	if s.repo == nil {
		return ErrNoRepository
	}
	if err := checkModelName(name); err != nil {
		return err
	}
	return s.unload(name, "")
}

// unload removes model name; why, when set, says what unloaded it.
func (s *Server) unload(name, why string) error {
	s.mu.Lock()
	old, ok := s.table()[name]
	if !ok {
		s.mu.Unlock()
		return s.unknownModel(name)
	}
	ob := old.base()
	n := ob.seqs.endAll(fmt.Errorf("%w: model %q was unloaded", ErrSequenceEnded, name))
	s.gone[name] = ob.seqs
	delete(s.failed, name)
	delete(s.stamps, name)
	table := maps.Clone(s.table())
	delete(table, name)
	s.models.Store(&table)
	s.setWantedLocked(name, false)
	s.metrics.forget(name)
	s.retireLocked(old)
	s.mu.Unlock()
	attrs := []any{"event", "unload", "model", name}
	if why != "" {
		attrs = append(attrs, "why", why)
	}
	if n > 0 {
		attrs = append(attrs, "sequences_ended", n)
	}
	s.ctl.events.WithLabelValues(name, "unload").Inc()
	s.log.Info("model event", attrs...)
	s.readinessChanged()
	return nil
}

// retireLocked stops m's batcher once the requests holding it have left;
// s.mu is held.
func (s *Server) retireLocked(m model) {
	idle := m.base().retire()
	stop, running := s.stops[m]
	if !running {
		return
	}
	delete(s.stops, m)
	s.wg.Go(func() {
		<-idle
		close(stop)
	})
}

// sameState reports whether two models keep sequence state of one shape.
func sameState(a, b model) bool {
	x, ok1 := a.(*seqModel)
	y, ok2 := b.(*seqModel)
	if !ok1 || !ok2 {
		return false
	}
	n, o := x.net, y.net
	return slices.Equal(n.Stack(), o.Stack())
}
