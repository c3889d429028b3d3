package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// FuzzConfigFile runs every configuration file through parseConfig as
// `serve -config FILE` reads it: nothing panics, and a file it accepts
// yields a configuration that validates.
func FuzzConfigFile(f *testing.F) {
	for _, glob := range []string{"../../configs/serve.yaml", "testdata/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	for _, s := range []string{
		"", "listen: 127.0.0.1:0\n", "server: {budget: {bytes: 64MiB}}\n",
		"a: &x [*x, *x]\nb: *x\n", "server:\n  max_body_bytes: 1e99\n", "---\n---\n",
		"workers: -1\n", strings.Repeat("[", 200) + "\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "serve.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := parseConfig([]string{"-config", path}, nil, io.Discard)
		if err != nil {
			return
		}
		if err := validate(&cfg, source{}); err != nil {
			t.Fatalf("accepted a file whose configuration does not validate: %v", err)
		}
	})
}

// FuzzMemoryFiles runs /proc/meminfo and cgroup limit texts through the
// parsers the default memory budget comes from: a count they accept is
// positive.
func FuzzMemoryFiles(f *testing.F) {
	f.Add([]byte("MemFree:  10 kB\nMemTotal:       24576000 kB\n"))
	f.Add([]byte("MemTotal: 9007199254740993 kB\n"))
	f.Add([]byte("max\n"))
	f.Add([]byte("1073741824\n"))
	dir := f.TempDir()
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		if v, ok := parseMeminfo(data); ok && v <= 0 {
			t.Fatalf("MemTotal read as %d bytes", v)
		}
		path := filepath.Join(dir, "limit")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if v, ok := cgroupLimit(path); ok && v <= 0 {
			t.Fatalf("cgroup limit read as %d bytes", v)
		}
	})
}
