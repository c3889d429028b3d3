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
	"rnnserve/schedule"
)

// ModelConfig is a model's optional serving config, config.yaml beside
// its model.yaml in the repository.
type ModelConfig struct {
	// Schedule for whole-request plans: auto (default), A, A+ or P (the
	// partitioned schedule, on GOMAXPROCS cores). auto models the traffic
	// of every candidate at the host's cache sizes and picks the fastest
	// (the rule is in docs/api.md, "Health and metadata").
	Schedule string `yaml:"schedule"`
	// Precision of the stored recurrent weights: f32 (default) or bf16.
	// bf16 allows P-bf16 (P with bf16 weights, outputs within about 2e-2
	// of float32): with schedule P it is what runs, with auto it is one
	// more candidate. A and A+ have no bf16 form.
	Precision string `yaml:"precision"`
	// Batching overrides the server's batching.enabled for this model.
	Batching *bool `yaml:"batching"`
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
		return 0, 0, fmt.Errorf("%w: config.yaml: precision %q: want f32 or bf16", ErrModelConfig, c.Precision)
	}
	if c.Schedule == "" || c.Schedule == "auto" {
		return 0, prec, nil
	}
	s, err := schedule.Parse(c.Schedule)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: config.yaml: schedule %q: want auto, A, A+ or P", ErrModelConfig, c.Schedule)
	}
	if prec == schedule.BF16 && s != schedule.Partitioned {
		return 0, 0, fmt.Errorf("%w: config.yaml: precision bf16 with schedule %v: only P stores bf16 weights (use schedule P or auto, or precision f32)", ErrModelConfig, s)
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
			if err := e.Config.Validate(); err != nil {
				return nil, fmt.Errorf("%w: model %q: %w", ErrRepository, d.Name(), err)
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
