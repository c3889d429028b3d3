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

	"go.yaml.in/yaml/v3"

	"rnnserve/models"
	"rnnserve/schedule"
	"rnnserve/server/api"
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

// A model repository is a directory with one sub-directory per model,
// named after the model. LoadModel hands a model's directory to the
// models package and reads its serving config; it is the one place that
// knows what a model directory holds.

// RepositoryModels lists the names of the repository's model directories
// (those holding a model.yaml), sorted.
func RepositoryModels(fsys fs.FS) ([]string, error) {
	dirs, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRepository, err)
	}
	var names []string
	for _, d := range dirs {
		if !d.IsDir() || checkModelName(d.Name()) != nil {
			continue
		}
		if models.IsModelFolder(fsys, d.Name()) {
			names = append(names, d.Name())
		}
	}
	return names, nil
}

// checkModelName refuses a name that is not one directory of the
// repository: empty, ".", "..", or holding a path separator or NUL.
func checkModelName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return badRequest("model name %q is not a directory name", clip(name))
	case strings.ContainsAny(name, `/\`+"\x00"):
		return badRequest("model name %q holds a path separator", clip(name))
	case !fs.ValidPath(name):
		return badRequest("model name %q is not a valid path element", clip(name))
	}
	return nil
}

// LoadModel loads the model in directory name of the repository: its
// spec (model.yaml: a sequence model or, with kind: tree, a tree model),
// the weights the spec names, and the optional config.yaml. Files are
// read through fsys only; give it an fs.FS rooted at the repository that
// refuses to leave it (os.Root's FS refuses symlinks out of the root).
func LoadModel(fsys fs.FS, name string) (Entry, error) {
	if err := checkModelName(name); err != nil {
		return Entry{}, err
	}
	spec := path.Join(name, specFile)
	data, err := fs.ReadFile(fsys, spec)
	e := Entry{Name: name}
	switch {
	case err == nil && models.IsTreeSpec(data):
		e.Tree, err = models.LoadTreeFS(fsys, spec)
	case err == nil:
		e.Model, err = models.LoadFS(fsys, spec)
	case !errors.Is(err, fs.ErrNotExist):
	case !models.IsModelFolder(fsys, name):
		err = fmt.Errorf("%w: directory %q holds no %s and not exactly one weights file (safetensors, PyTorch checkpoint or ONNX)",
			ErrNotInRepository, clip(name), specFile)
	default:
		// A folder holding only a weights file: its spec is inferred.
		e.Model, err = models.OpenFS(fsys, name)
	}
	if err != nil {
		return Entry{}, err
	}
	if data, err := fs.ReadFile(fsys, path.Join(name, "config.yaml")); err == nil {
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

// LoadRepository loads every model of a repository.
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

// RepositoryIndex lists the repository's models, loaded or not, and the
// loaded ones the repository no longer has: READY when loaded, else
// UNAVAILABLE with the reason (unloaded, a failed load, never loaded).
// With ready, only the loaded ones.
func (s *Server) RepositoryIndex(ready bool) ([]api.RepositoryModel, error) {
	table := s.table()
	names := slices.Collect(maps.Keys(table))
	if s.repo != nil {
		inRepo, err := RepositoryModels(s.repo)
		if err != nil {
			return nil, err
		}
		for _, n := range inRepo {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []api.RepositoryModel{}
	for _, n := range names {
		e := api.RepositoryModel{Name: n, Version: version, State: "READY"}
		if _, ok := table[n]; !ok {
			if ready {
				continue
			}
			e.State, e.Reason = "UNAVAILABLE", "not loaded"
			if _, ok := s.gone[n]; ok {
				e.Reason = "unloaded"
			}
			if why, ok := s.failed[n]; ok {
				e.Reason = why
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// Load loads (or reloads) model name from the repository and swaps it in.
// Requests in flight on the old version finish on it; new ones go to the
// new version. A load that fails leaves the old version serving. Live
// sequences move to the new version when their state has the same shape;
// otherwise they end with ErrSequenceEnded.
func (s *Server) Load(name string) error {
	if s.repo == nil {
		return ErrNoRepository
	}
	if s.draining.Load() {
		return ErrDraining
	}
	e, err := LoadModel(s.repo, name)
	if err == nil {
		var m model
		if m, err = s.newModel(e); err == nil {
			s.swap(name, m)
			return nil
		}
	}
	err = loadError(name, err)
	if checkModelName(name) == nil {
		s.mu.Lock()
		s.failed[name] = clip(err.Error())
		s.mu.Unlock()
	}
	return err
}

// swap puts m in the table under name, retiring the model it replaces.
func (s *Server) swap(name string, m model) {
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
	table := maps.Clone(s.table())
	table[name] = m
	s.models.Store(&table)
	s.metrics.forget(name)
	nb.describe()
	if s.stop != nil && !s.draining.Load() {
		s.startLocked(m)
	}
	if old != nil {
		s.retireLocked(old)
	}
}

// Unload removes model name. Requests in flight finish; its live
// sequences end, and a later request for one is told the model was
// unloaded.
func (s *Server) Unload(name string) error {
	if s.repo == nil {
		return ErrNoRepository
	}
	if err := checkModelName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.table()[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownModel, clip(name))
	}
	ob := old.base()
	if n := ob.seqs.endAll(fmt.Errorf("%w: model %q was unloaded", ErrSequenceEnded, name)); n > 0 {
		s.log.Info("unloaded a model with live sequences; they ended", "model", name, "sequences", n)
	}
	s.gone[name] = ob.seqs
	table := maps.Clone(s.table())
	delete(table, name)
	s.models.Store(&table)
	s.metrics.forget(name)
	s.retireLocked(old)
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
