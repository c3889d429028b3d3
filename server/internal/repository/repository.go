// Package repository reads a model repository: a directory with one
// folder per model, or a folder that is itself one model (KServe's
// single-model layout). It finds the models (Scan), confines the names
// requests give to one entry of the root (CheckName), loads a folder's
// spec, weights and config.yaml through an fs.FS (Load, LoadModel), and
// stamps a folder so that a poll sees it change (Stamp). It knows files
// and models, not the server: package server swaps what it loads in and
// out, and maps its errors (infer.ErrBadRequest for a bad name,
// infer.ErrNotInRepository for a name it does not have) to statuses.
package repository

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"rnnserve/models"
	"rnnserve/server/internal/infer"
)

// Entry is one model of a repository, loaded.
type Entry struct {
	Name   string
	Model  *models.Model
	Tree   *models.TreeModel // set instead of Model for a tree model (kind: tree)
	Config Config
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
// CheckName refuses a separator, "." and "..", so a request cannot reach
// past the root. What the operator put in the root is trusted: a folder
// that is a symbolic link is followed wherever it points (give New
// os.DirFS, not os.Root's FS, for that), while a path written in a spec
// is read through the same fs.FS and may not climb out with "..".
// Nothing in a Repository changes after New.
type Repository struct {
	fsys fs.FS
	// single names the one model when the root is itself a model folder.
	single string
}

// New returns the repository in fsys. When fsys's root is itself a
// model folder (it holds a model.yaml or exactly one weights file) the
// repository is that one model, named single, which must then be a valid
// model name; otherwise every model folder below the root is a model.
func New(fsys fs.FS, single string) (*Repository, error) {
	if !models.IsModelFolder(fsys, ".") {
		return &Repository{fsys: fsys}, nil
	}
	if err := CheckName(single); err != nil {
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
		if err := CheckName(name); err != nil {
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
	if CheckName(name) != nil {
		return false
	}
	if r.single != "" {
		return name == r.single
	}
	fi, err := fs.Stat(r.fsys, name)
	return err == nil && fi.IsDir() && models.IsModelFolder(r.fsys, name)
}

// Load loads model name: LoadModel on its folder.
func (r *Repository) Load(name string) (Entry, error) {
	if err := CheckName(name); err != nil {
		return Entry{}, err
	}
	if r.single != "" {
		if name != r.single {
			return Entry{}, fmt.Errorf("%w: the repository is the one model %q", infer.ErrNotInRepository, r.single)
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

// Stamp is what a poll compares to see that a model folder changed: the
// name, size and modification time of each file in it and one level
// below (symbolic links followed), at most maxStampFiles of them.
func (r *Repository) Stamp(name string) (string, error) {
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

// Models lists the names of the model folders of fsys, sorted (a
// Repository's Scan without the reasons).
func Models(fsys fs.FS) ([]string, error) {
	names, _, err := (&Repository{fsys: fsys}).Scan()
	return names, err
}

// CheckName refuses a name that is not one directory of the repository:
// empty, ".", "..", or holding a path separator or NUL (an
// infer.ErrBadRequest).
func CheckName(name string) error {
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
	if err := CheckName(name); err != nil {
		return Entry{}, err
	}
	return loadFolder(fsys, name, name)
}

// loadFolder loads the model folder dir of fsys ("." for the root) as
// model name.
func loadFolder(fsys fs.FS, dir, name string) (Entry, error) {
	spec := path.Join(dir, specFile)
	data, err := models.ReadFileFS(fsys, spec, models.MaxSpecBytes, "spec", "MaxSpecBytes")
	e := Entry{Name: name}
	switch {
	case err == nil && models.IsTreeSpec(data):
		e.Tree, err = models.LoadTreeFS(fsys, spec)
	case err == nil:
		e.Model, err = models.LoadFS(fsys, spec)
	case !errors.Is(err, fs.ErrNotExist):
	case !models.IsModelFolder(fsys, dir):
		err = fmt.Errorf("%w: directory %q holds no %s and not exactly one weights file (safetensors, PyTorch checkpoint or ONNX)",
			infer.ErrNotInRepository, infer.Clip(name), specFile)
	default:
		// A folder holding only a weights file: its spec is inferred.
		e.Model, err = models.OpenFS(fsys, dir)
	}
	if err != nil {
		return Entry{}, err
	}
	if data, err := models.ReadFileFS(fsys, path.Join(dir, "config.yaml"), MaxConfigBytes, "config", "MaxConfigBytes"); err == nil {
		if e.Config, err = ParseConfig(data); err != nil {
			return Entry{}, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Entry{}, err
	}
	return e, nil
}

// LoadEvery loads every model of a multi-model repository, failing on
// the first that does not load (tests and tools that want all or
// nothing; serve uses Repository.LoadAll).
func LoadEvery(fsys fs.FS) ([]Entry, error) {
	names, err := Models(fsys)
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
