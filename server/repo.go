package server

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"gopkg.in/yaml.v3"

	"rnnserve/models"
)

// ModelConfig is a model's optional serving config, config.yaml beside
// its model.yaml in the repository.
type ModelConfig struct {
	// Schedule for whole-request plans: auto (default), A or A+. auto
	// simulates both at the host's cache size and picks the one that
	// moves fewer DRAM bytes.
	Schedule string `yaml:"schedule"`
	// Batching overrides the server's batching.enabled for this model.
	Batching *bool `yaml:"batching"`
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

// LoadRepository loads every model of a repository: each top-level
// directory holding a model.yaml (and its weights, and optionally a
// config.yaml) is one model named after the directory.
func LoadRepository(fsys fs.FS) ([]Entry, error) {
	dirs, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRepository, err)
	}
	var entries []Entry
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		spec := path.Join(d.Name(), "model.yaml")
		if _, err := fs.Stat(fsys, spec); err != nil {
			continue
		}
		e := Entry{Name: d.Name()}
		if data, err := fs.ReadFile(fsys, spec); err == nil && models.IsTreeSpec(data) {
			if e.Tree, err = models.LoadTreeFS(fsys, spec); err != nil {
				return nil, fmt.Errorf("%w: model %q: %w", ErrRepository, d.Name(), err)
			}
		} else if e.Model, err = models.LoadFS(fsys, spec); err != nil {
			return nil, fmt.Errorf("%w: model %q: %w", ErrRepository, d.Name(), err)
		}
		if data, err := fs.ReadFile(fsys, path.Join(d.Name(), "config.yaml")); err == nil {
			dec := yaml.NewDecoder(bytes.NewReader(data))
			dec.KnownFields(true)
			if err := dec.Decode(&e.Config); err != nil {
				return nil, fmt.Errorf("%w: model %q: config.yaml: %w", ErrRepository, d.Name(), err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: model %q: %w", ErrRepository, d.Name(), err)
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: no model directories with a model.yaml", ErrRepository)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return entries, nil
}
