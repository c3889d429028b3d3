package server

import (
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"testing"
	"time"
)

// slowFS is a repository whose model specs take delay to open: a load
// that takes its time.
type slowFS struct {
	fs.FS
	delay time.Duration
}

func (f slowFS) Open(name string) (fs.File, error) {
	if path.Base(name) == "model.yaml" {
		time.Sleep(f.delay)
	}
	return f.FS.Open(name)
}

// TestSlowLoadAnswered: a load (or an index) that takes longer than the
// write timeout (an http.Server's WriteTimeout, as serve sets it, running
// from the request's head) is still answered: the handler sets the write deadline
// again before it writes, as an inference's does.
func TestSlowLoadAnswered(t *testing.T) {
	const writeTimeout = 200 * time.Millisecond
	c := startControl(t, map[string]string{"b/model.yaml": lmSpec(8, 2)}, nil, func(o *Options, d *Deps) {
		o.ModelControlMode = ControlExplicit
		o.WriteTimeout = writeTimeout
	})
	repo, err := NewRepository(slowFS{FS: os.DirFS(c.dir), delay: 2 * writeTimeout}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.s.repo = repo
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: c.s.Handler(), WriteTimeout: writeTimeout, ConnState: c.s.ConnState, ConnContext: c.s.ConnContext}
	go hs.Serve(c.s.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	for _, call := range []string{"models/b/load", "index"} {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v2/repository/"+call, "application/json", nil)
		if err != nil {
			t.Fatalf("%s slower than the write timeout: %v, want its answer", call, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s slower than the write timeout: %d, want 200", call, resp.StatusCode)
		}
	}
}
