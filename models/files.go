package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// Model files are hostile until read: a named pipe called model.pt would
// block a plain open(2) or read(2) forever, and a device would never end.
// Every file the loaders read is therefore stat'ed first and refused unless
// it is a regular file, then opened without blocking (O_NONBLOCK, which
// does nothing to a regular file) and stat'ed again through the open
// descriptor, so a file swapped for a pipe between the two is refused too.
// Folders are only listed.
//
// Symlinks are followed: the files of a model folder and the paths given
// on the command line or in a spec are the operator's, and so are the
// links among them (a Hugging Face cache keeps snapshots/<rev>/model.pt as
// a link to ../../blobs/<sha256>). What a request names is confined by the
// name itself: DirFS takes only slash-separated paths below its folder
// (fs.ValidPath: no "..", nothing absolute).

// ErrNotRegular is matched by every *NotRegularError.
var ErrNotRegular = errors.New("models: not a regular file")

// NotRegularError is a model file that is not a regular file: a named
// pipe, a device, a socket, or a folder where a file was wanted. Nothing
// was read from it.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("models: %s is %s, not a regular file: model files must be regular files (copy or link the file itself there)",
		e.Path, modeKind(e.Mode))
}

// Is makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

func modeKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a special file (" + m.Type().String() + ")"
}

func checkRegular(name string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Path: name, Mode: fi.Mode()}
	}
	return nil
}

// openRegular opens the regular file at path (symlinks followed) for
// reading, refusing anything else before it opens it.
func openRegular(p string) (*os.File, fs.FileInfo, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRegular(p, fi); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi2, err := f.Stat()
	if err == nil {
		err = checkRegular(p, fi2)
	}
	if err == nil && !os.SameFile(fi, fi2) {
		err = fmt.Errorf("models: %s was replaced while being opened", p)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi2, nil
}

// DirFS returns the files below folder dir as an fs.FS for the loaders
// (OpenFS, LoadFS, LoadTreeFS) and for anything else that reads a model
// folder, such as a serving config beside the spec. Names are
// slash-separated and fs.ValidPath (below dir, no ".."); symlinks met on
// the way are followed wherever they lead, since they are the operator's.
// Open refuses a named pipe, a device or a socket at once with a
// *NotRegularError and never blocks on one; folders open for listing.
//
// The file system also implements fs.StatFS, fs.ReadDirFS and
// fs.ReadFileFS. dir itself may be a symlink.
func DirFS(dir string) fs.FS { return dirFS(dir) }

type dirFS string

func (d dirFS) path(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return filepath.Join(string(d), filepath.FromSlash(name)), nil
}

// Open opens a regular file or a folder.
func (d dirFS) Open(name string) (fs.File, error) {
	p, err := d.path("open", name)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return os.Open(p)
	}
	f, _, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (d dirFS) Stat(name string) (fs.FileInfo, error) {
	p, err := d.path("stat", name)
	if err != nil {
		return nil, err
	}
	return os.Stat(p)
}

func (d dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	p, err := d.path("readdir", name)
	if err != nil {
		return nil, err
	}
	return os.ReadDir(p)
}

func (d dirFS) ReadFile(name string) ([]byte, error) {
	p, err := d.path("read", name)
	if err != nil {
		return nil, err
	}
	f, fi, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readSized(f, fi.Size(), p)
}

// readSized reads a file of the given size whole, refusing one that has
// grown since it was stat'ed.
func readSized(r io.Reader, size int64, name string) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("models: read %s: %w (the file shrank while being read?)", name, err)
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("models: read %s: the file grew while being read", name)
	}
	return b, nil
}

// modelFile is an open regular file that a loader reads by offset: a
// weights file's tensors are read from it straight into the network.
type modelFile struct {
	io.ReaderAt
	name  string // as the spec or the caller named it
	size  int64
	close func() error
	// also are files its tensors read from too (an ONNX model's external
	// data), closed with it.
	also []*modelFile
}

// Close releases the file and those in also.
func (f *modelFile) Close() error {
	var err error
	for _, a := range f.also {
		err = errors.Join(err, a.Close())
	}
	if f.close != nil {
		err = errors.Join(err, f.close())
	}
	return err
}

// readAll reads the whole file, refusing more than limit bytes before it
// allocates them.
func (f *modelFile) readAll(limit int64, what string) ([]byte, error) {
	name := ""
	switch limit {
	case MaxSpecBytes:
		name = "MaxSpecBytes"
	case MaxVocabBytes:
		name = "MaxVocabBytes"
	case MaxWeightsBytes:
		name = "MaxWeightsBytes"
	}
	return f.readAllNamed(limit, what, name)
}

// readAllNamed is readAll with the limit's name for the message ("": none).
func (f *modelFile) readAllNamed(limit int64, what, limitName string) ([]byte, error) {
	if f.size > limit {
		if limitName != "" {
			limitName = " (" + limitName + ")"
		}
		return nil, fmt.Errorf("%w: %s %s has %d bytes, limit %d%s", ErrTooLarge, what, f.name, f.size, limit, limitName)
	}
	return readSized(io.NewSectionReader(f, 0, f.size), f.size, f.name)
}

// ReadFileFS reads the file name of fsys whole as the loaders read a
// spec: anything but a regular file is refused before it is opened (a
// named pipe would block), and one of more than limit bytes is refused
// unread with ErrTooLarge, the message naming it as what and the limit as
// limitName. A server reads a model folder's other small files with it.
func ReadFileFS(fsys fs.FS, name string, limit int64, what, limitName string) ([]byte, error) {
	f, err := openFSFile(fsys, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.readAllNamed(limit, what, limitName)
}

// memFile is a modelFile over bytes already in memory.
func memFile(name string, data []byte) *modelFile {
	return &modelFile{ReaderAt: bytes.NewReader(data), name: name, size: int64(len(data))}
}

// opener opens a file that a spec names (or the spec itself), relative to
// the spec.
type opener func(name string) (*modelFile, error)

// osOpener opens from the operating system's file system: relative paths
// relative to the spec's folder, symlinks followed.
func osOpener(specPath string) opener {
	return func(name string) (*modelFile, error) {
		p := name
		if !filepath.IsAbs(name) && name != specPath {
			p = filepath.Join(filepath.Dir(specPath), name)
		}
		f, fi, err := openRegular(p)
		if err != nil {
			return nil, err
		}
		return &modelFile{ReaderAt: f, name: name, size: fi.Size(), close: f.Close}, nil
	}
}

// fsOpener opens from fsys, paths relative to the spec's folder.
func fsOpener(fsys fs.FS, specPath string) opener {
	return func(name string) (*modelFile, error) {
		if name != specPath {
			name = path.Join(path.Dir(specPath), name)
		}
		return openFSFile(fsys, name)
	}
}

// openFSFile opens a regular file of fsys. It refuses any other kind by its
// fs.Stat before opening it, so an fs.FS that does not refuse them itself
// (os.Root's FS, os.DirFS) is safe against a named pipe that is there
// before the load starts; DirFS is safe against one swapped in during the
// load as well. A file that is not an io.ReaderAt is read into memory.
func openFSFile(fsys fs.FS, name string) (*modelFile, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(name, fi); err != nil {
		return nil, err
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	fi2, err := f.Stat()
	if err == nil {
		err = checkRegular(name, fi2)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if ra, ok := f.(io.ReaderAt); ok {
		return &modelFile{ReaderAt: ra, name: name, size: fi2.Size(), close: f.Close}, nil
	}
	defer f.Close()
	if err := checkWeightsSize(&modelFile{name: name, size: fi2.Size()}); err != nil {
		return nil, err
	}
	data, err := readSized(f, fi2.Size(), name)
	if err != nil {
		return nil, err
	}
	return memFile(name, data), nil
}
