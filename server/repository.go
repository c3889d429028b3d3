package server

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/repository"
)

// The model repository is package repository's: finding the models of a
// directory, confining the names requests give to its root, loading a
// model folder's files and stamping it for polls. This file keeps its
// names for the owner, and swaps what it loads in and out of the server.

type (
	// ModelConfig is a model's optional serving config, config.yaml
	// beside its model.yaml in the repository (schedule, precision,
	// batching).
	ModelConfig = repository.Config
	// Entry is one model of a repository, loaded.
	Entry = repository.Entry
	// Repository is a model repository (see package repository).
	Repository = repository.Repository
	// Skipped is an entry of the repository's root that is no model, and
	// why.
	Skipped = repository.Skipped
	// Failure is a model that did not load, and why.
	Failure = repository.Failure
)

var (
	// ErrModelConfig is wrapped by every error about the values of a
	// model's config.yaml.
	ErrModelConfig = repository.ErrConfig
	// ErrRepository is wrapped by errors about the repository's layout.
	ErrRepository = repository.ErrRepository
)

// NewRepository returns the repository in fsys: a folder of model
// folders, or, when fsys's root is itself a model folder, that one model
// named single (see repository.New).
func NewRepository(fsys fs.FS, single string) (*Repository, error) {
	return repository.New(fsys, single)
}

// LoadModel loads the model in directory name of a multi-model
// repository fsys (see repository.LoadModel).
func LoadModel(fsys fs.FS, name string) (Entry, error) { return repository.LoadModel(fsys, name) }

// LoadRepository loads every model of a multi-model repository, failing
// on the first that does not load (tests and tools that want all or
// nothing; serve uses Repository.LoadAll).
func LoadRepository(fsys fs.FS) ([]Entry, error) { return repository.LoadEvery(fsys) }

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
	// The name is the client's: the folder is stamped only once it is
	// one of the repository's.
	st := ""
	if repository.CheckName(name) == nil && s.repo.Has(name) {
		st, _ = s.repo.Stamp(name)
	}
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
	if err != nil && repository.CheckName(name) == nil && !errors.Is(err, ErrNotInRepository) && !s.repo.Has(name) {
		// No model folder of that name (too long for the file system, a
		// file of the root): a name the repository lacks, whatever the
		// file system said.
		err = fmt.Errorf("%w: %q is no model folder of the repository", ErrNotInRepository, infer.Clip(name))
	}
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
	if repository.CheckName(name) == nil && !errors.Is(err, ErrNotInRepository) {
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
	if err := repository.CheckName(name); err != nil {
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
	b := m.base()
	b.weights.Remove()
	idle := b.retire()
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
