package server

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// stall makes the reads of one file block until release is closed.
type stall struct {
	reading chan struct{} // closed when the first read starts
	release chan struct{}
	once    sync.Once
}

func newStall() *stall { return &stall{reading: make(chan struct{}), release: make(chan struct{})} }

func (s *stall) wait() {
	s.once.Do(func() { close(s.reading) })
	<-s.release
}

// stalledFS is a file system whose files named in stalls block every read
// until released, as a model file on a stalled network mount does: it is
// a regular file, so nothing refuses it, and reading it cannot be
// interrupted.
type stalledFS struct {
	fs.FS
	stalls map[string]*stall
}

func (s stalledFS) Open(name string) (fs.File, error) {
	f, err := s.FS.Open(name)
	if st := s.stalls[name]; err == nil && st != nil {
		return &stalledFile{File: f, st: st}, nil
	}
	return f, err
}

type stalledFile struct {
	fs.File
	st *stall
}

func (f *stalledFile) Read(b []byte) (int, error) {
	f.st.wait()
	return f.File.Read(b)
}

func (f *stalledFile) ReadAt(b []byte, off int64) (int, error) {
	f.st.wait()
	return f.File.(io.ReaderAt).ReadAt(b, off)
}

// TestStalledFileLoad loads models whose spec files stall every read (a
// file on a hung mount: regular, so not refused, and its read cannot be
// cut short). While such a load call waits, the other model serves, the
// repository index answers, and another model loads and unloads; once
// the file reads again, its load completes. Stopping the server does not
// wait for a load that stalls, and that load, once its file reads, ends
// with ErrDraining instead of building on the stopped server's workers.
func TestStalledFileLoad(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"a/model.yaml": lmSpec(8, 1), "b/model.yaml": lmSpec(8, 2),
		"stalled/model.yaml": lmSpec(8, 3), "hung/model.yaml": lmSpec(8, 4)} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stalled, hung := newStall(), newStall()
	fsys := stalledFS{FS: os.DirFS(dir), stalls: map[string]*stall{"stalled/model.yaml": stalled, "hung/model.yaml": hung}}
	a, err := LoadModel(os.DirFS(dir), "a")
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes, o.TrafficSteps = 1<<20, 4
	o.ModelControlMode = ControlExplicit
	deps := testDeps(t, o)
	deps.Repository = repoOf(t, fsys)
	s, err := New([]Entry{a}, o, deps)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	var once1, once2 sync.Once
	releaseStalled := func() { once1.Do(func() { close(stalled.release) }) }
	releaseHung := func() { once2.Do(func() { close(hung.release) }) }
	t.Cleanup(func() {
		releaseStalled()
		releaseHung()
		hs.Close()
		s.Stop(context.Background())
	})
	startLoad := func(name string, st *stall) chan error {
		loaded := make(chan error, 1)
		go func() { loaded <- s.Load(name) }()
		select {
		case <-st.reading:
		case err := <-loaded:
			t.Fatalf("the load of %s returned before reading its file: %v", name, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("the load of %s never read its file", name)
		}
		return loaded
	}

	loaded := startLoad("stalled", stalled)
	infer := `{"inputs": [` + tokensJSON([][]int64{{1, 2, 3, 4}}) + `]}`
	for range 20 {
		if code, body, _ := post(t, hs.URL+"/v2/models/a/infer", infer); code != 200 {
			t.Fatalf("infer on a while a load stalls: %d %s", code, body)
		}
	}
	if idx := index(t, hs.URL, "{}"); idx["a"].State != "READY" {
		t.Errorf("a in the index while a load stalls: %+v", idx["a"])
	}
	done := make(chan error, 1)
	go func() {
		err := s.Load("b")
		if err == nil {
			err = s.Unload("b")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("load and unload of b while a load stalls: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("loading another model waits on the stalled load")
	}
	select {
	case err := <-loaded:
		t.Fatalf("the stalled load returned while its file stalled: %v", err)
	default:
	}
	releaseStalled()
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatalf("the load once the file reads: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the load did not complete once the file read again")
	}
	if code, body, _ := post(t, hs.URL+"/v2/models/stalled/infer", infer); code != 200 {
		t.Errorf("infer on the model loaded from the file that stalled: %d %s", code, body)
	}

	hungLoad := startLoad("hung", hung)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop with a load stalled: %v after %v", err, time.Since(start))
	}
	releaseHung()
	select {
	case err := <-hungLoad:
		if !errors.Is(err, ErrDraining) {
			t.Errorf("a load whose file read after Stop: %v, want ErrDraining (the server's workers are gone)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the load did not end once its file read again")
	}
}
