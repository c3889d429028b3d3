package server

import (
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

// TestLoadNamesOutsideRepository: a load naming no folder of the
// repository (a name too long for the file system, a file of the root)
// answers 404, and leaves no trace: no failure kept, no metric series
// minted for the name, readiness unchanged.
func TestLoadNamesOutsideRepository(t *testing.T) {
	c := startControl(t, map[string]string{"a/model.yaml": lmSpec(8, 1), "notes.txt": "not a model"}, []string{"a"}, func(o *Options, d *Deps) {
		o.ModelControlMode = ControlExplicit
	})
	long := strings.Repeat("x", 300)
	for _, name := range []string{long, "notes.txt"} {
		code, body, _ := c.call(t, c.rest, "/v2/repository/models/"+name+"/load", "")
		if code != 404 {
			t.Errorf("load %.20q: %d %s", name, code, body)
		}
		if err := c.grpcLoad(name, "", false); err == nil {
			t.Errorf("gRPC load %.20q loaded", name)
		}
	}
	c.s.mu.Lock()
	n := len(c.s.failed)
	c.s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d failures kept for names the repository lacks", n)
	}
	_, body := get(t, c.rest+"/metrics")
	if strings.Contains(string(body), long) || strings.Contains(string(body), `model="notes.txt"`) {
		t.Error("a metric series was minted for a name the repository lacks")
	}
	if code := ready(t, c.rest); code != 200 {
		t.Errorf("ready: %d", code)
	}
}

// openLog is a file system that records the names opened through it.
type openLog struct {
	fs.FS
	mu    sync.Mutex
	names []string
}

func (o *openLog) Open(name string) (fs.File, error) {
	o.mu.Lock()
	o.names = append(o.names, name)
	o.mu.Unlock()
	return o.FS.Open(name)
}

func (o *openLog) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.names
	o.names = nil
	return n
}

// TestLoadNameCheckedFirst: a load naming no model of the repository is
// answered without reading the repository: not its root for ".", not the
// one model's folder for another name in the single-model layout.
func TestLoadNameCheckedFirst(t *testing.T) {
	files := fstest.MapFS{"a/model.yaml": {Data: []byte(lmSpec(8, 1))}}
	for i := range 40 {
		files["m"+itoa(i)+"/model.yaml"] = &fstest.MapFile{Data: []byte(lmSpec(8, 1))}
	}
	for _, c := range []struct {
		fsys   fs.FS
		single string
		names  []string
	}{
		{files, "", []string{".", ""}},
		{fstest.MapFS{"model.yaml": {Data: []byte(lmSpec(8, 1))}, "w.txt": {}}, "one", []string{"two", ".", "one/.."}},
	} {
		fsys := &openLog{FS: c.fsys}
		repo, err := NewRepository(fsys, c.single)
		if err != nil {
			t.Fatal(err)
		}
		o := testOptions()
		o.ModelControlMode = ControlExplicit
		deps := testDeps(t, o)
		deps.Repository = repo
		s := newServer(t, nil, o, deps)
		for _, name := range c.names {
			fsys.take()
			if err := s.Load(name); err == nil {
				t.Errorf("load %q loaded", name)
			}
			if opened := fsys.take(); len(opened) > 0 {
				t.Errorf("load %q opened %d files first: %q", name, len(opened), opened[:min(len(opened), 4)])
			}
		}
	}
}
