package repository

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"rnnserve/internal/fuzzbound"
	"rnnserve/models"
	"rnnserve/server/internal/infer"
)

// lmSpec is a small byte-level LSTM LM.
func lmSpec(seed int) string {
	return fmt.Sprintf("cell: lstm\ninput_size: 8\nhidden_size: 8\nnum_layers: 1\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: %d\n", seed)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" for a valid config
	}{
		{Config{}, ""},
		{Config{Schedule: "auto", Precision: "bf16"}, ""},
		{Config{Schedule: "P", Precision: "bf16"}, ""},
		{Config{Schedule: "p", Precision: "f32"}, ""},
		{Config{Schedule: "A+"}, ""},
		{Config{Schedule: "B"}, `config.yaml: schedule "B": want auto, A, A+ or P`},
		{Config{Schedule: "cellular"}, `config.yaml: schedule "cellular"`},
		{Config{Precision: "fp8"}, `config.yaml: precision "fp8": want f32, bf16 or int8`},
		{Config{Schedule: "A", Precision: "bf16"}, "config.yaml: precision bf16 with schedule A: only P stores bf16 weights"},
		{Config{Schedule: "A+", Precision: "bf16"}, "config.yaml: precision bf16 with schedule A+"},
	} {
		err := c.cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%+v: %v, want an ErrConfig mentioning %q", c.cfg, err, c.want)
		}
	}
	// The repository refuses it on loading, naming the model; and a
	// config.yaml with a key it does not know.
	for cfg, want := range map[string]error{"schedule: A+\nprecision: bf16\n": ErrConfig, "shedule: P\n": ErrConfig, "schedule: P\n---\n": ErrConfig} {
		repo := fstest.MapFS{
			"m/model.yaml":  {Data: []byte(lmSpec(1))},
			"m/config.yaml": {Data: []byte(cfg)},
		}
		_, err := LoadEvery(repo)
		if !errors.Is(err, ErrRepository) || want != nil && !errors.Is(err, want) || !strings.Contains(fmt.Sprint(err), `model "m": `) {
			t.Errorf("LoadEvery with config.yaml %q: %v", cfg, err)
		}
	}
}

// TestParseConfig: a config.yaml is one YAML document of Config's keys
// within MaxConfigBytes; an empty one is every default, and a refusal
// says what is wrong in a bounded message.
func TestParseConfig(t *testing.T) {
	pad := func(n int, tail string) string { return "#" + strings.Repeat("x", n-len(tail)-2) + "\n" + tail }
	for data, want := range map[string]string{
		"":                                     "",
		"# nothing set\n":                      "",
		"---\nschedule: P\n":                   "",
		pad(MaxConfigBytes, "schedule: P\n"):   "",
		pad(MaxConfigBytes+1, "schedule: P\n"): "config.yaml has 65537 bytes, limit 65536 (MaxConfigBytes)",
		"schedule: P\n---\nschedule: A\n":      "more than one YAML document",
		"schedule: P\n---\n":                   "more than one YAML document",
		"shedule: P\n":                         "field shedule not found",
		"batching: [1]\n":                      "cannot unmarshal",
		"batching: !!" + strings.Repeat("a", 5000) + " x\n": "... (",
		"precision: fp8\n": `precision "fp8": want f32, bf16 or int8`,
	} {
		c, err := ParseConfig([]byte(data))
		switch {
		case want == "" && err != nil:
			t.Errorf("%.40q: %v", data, err)
		case want == "" && c.Schedule != "" && c.Schedule != "P":
			t.Errorf("%.40q: %+v", data, c)
		case want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) || len(err.Error()) > maxConfigMessage+100):
			t.Errorf("%.40q: %.400v, want ErrConfig saying %q", data, err, want)
		}
	}
	if c, err := ParseConfig([]byte("schedule: A+\nbatching: false\n")); err != nil || c.Schedule != "A+" || c.Batching == nil || *c.Batching {
		t.Errorf("%+v, %v", c, err)
	}
}

// TestHostileFiles: a model.yaml or config.yaml that is a named pipe, or
// larger than its limit (a sparse file of 1 TiB here), is refused at
// once, unread, naming the model and the file.
func TestHostileFiles(t *testing.T) {
	for name, create := range map[string]func(p string) error{
		"fifo": func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"large": func(p string) error {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return err
			}
			return os.Truncate(p, 1<<40)
		},
	} {
		for _, file := range []string{"model.yaml", "config.yaml"} {
			t.Run(name+"/"+file, func(t *testing.T) {
				dir := t.TempDir()
				if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "m", "model.yaml"), []byte(lmSpec(1)), 0o644); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, "m", file)
				os.Remove(p)
				if err := create(p); err != nil {
					t.Skipf("cannot make the file: %v", err)
				}
				done := make(chan error, 1)
				go func() { _, err := LoadEvery(models.DirFS(dir)); done <- err }()
				select {
				case err := <-done:
					if !errors.Is(err, ErrRepository) || !strings.Contains(err.Error(), `model "m": `) || !strings.Contains(err.Error(), file) {
						t.Fatalf("%v", err)
					}
					t.Log(err)
				case <-time.After(30 * time.Second):
					t.Fatal("LoadEvery still running after 30 s")
				}
			})
		}
	}
}

// FuzzParseConfig: a config.yaml parses or is refused with ErrConfig in a
// bounded message, never panics, and keeps to the per-input bounds.
//
//	go test -run '^$' -fuzz '^FuzzParseConfig$' -fuzztime 5m -parallel 1 ./server/internal/repository
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "schedule: P\n", "precision: int8\nbatching: true\n", "schedule: &a A+\nprecision: *a\n", "schedule: P\n---\n"} {
		f.Add([]byte(s))
	}
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		_, err := ParseConfig(data)
		if err != nil && (!errors.Is(err, ErrConfig) || len(err.Error()) > maxConfigMessage+200) {
			t.Fatalf("%.500v", err)
		}
	})
}

// TestCheckName: a name from a request is one entry of the root or a
// bad request.
func TestCheckName(t *testing.T) {
	for _, name := range []string{"a", "lm-1", "a.b", "..a", "a..", "_"} {
		if err := CheckName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for name, want := range map[string]string{
		"": "not a directory name", ".": "not a directory name", "..": "not a directory name",
		"a/b": "path separator", `a\b`: "path separator", "../x": "path separator", "/etc": "path separator",
		"a\x00b": "path separator", "a\xffb": "not a valid path element",
		strings.Repeat("x", 100) + "/": "xxx...",
	} {
		err := CheckName(name)
		if !errors.Is(err, infer.ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a bad request saying %q", name, err, want)
		}
	}
}

// FuzzCheckName: a name CheckName lets through names one entry of the
// root: a valid path of one element, not "." or "..".
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"a", "..", "a/b", `a\b`, "a\x00", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		fuzzbound.Run(t, 0, func() {
			if CheckName(name) != nil {
				return
			}
			if !fs.ValidPath(name) || path.Base(name) != name || path.Dir(name) != "." || name == "." || name == ".." || strings.ContainsAny(name, `\`+"\x00") {
				t.Fatalf("%q let through", name)
			}
		})
	})
}

// TestLayouts: symbolic links the operator made are followed, entries
// that are not models are reported with the reason, and a folder that is
// itself a model is one model under the given name.
func TestLayouts(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(outside, "model.yaml"), []byte(lmSpec(1)), 0o644)
	os.Symlink(outside, filepath.Join(dir, "linked"))
	os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling"))
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("hi"), 0o644)
	// A Hugging Face cache's way: the model folder's file links into a
	// blobs folder beside it.
	os.MkdirAll(filepath.Join(dir, "blobs"), 0o755)
	os.WriteFile(filepath.Join(dir, "blobs", "3f2a"), []byte(lmSpec(2)), 0o644)
	os.MkdirAll(filepath.Join(dir, "hf"), 0o755)
	os.Symlink(filepath.Join("..", "blobs", "3f2a"), filepath.Join(dir, "hf", "model.yaml"))
	repo, err := New(os.DirFS(dir), "ignored")
	if err != nil {
		t.Fatal(err)
	}
	names, skipped, err := repo.Scan()
	if err != nil || strings.Join(names, " ") != "hf linked" {
		t.Fatalf("names %v, %v", names, err)
	}
	why := map[string]string{}
	for _, k := range skipped {
		why[k.Name] = k.Reason
		if k.Hidden != (k.Name == ".git") {
			t.Errorf("%s: hidden %v", k.Name, k.Hidden)
		}
	}
	for name, want := range map[string]string{"dangling": "cannot be followed", "empty": "holds no model.yaml", "README.md": "a file, not a folder", ".git": "hidden", "blobs": "it holds 1 entries: 3f2a"} {
		if !strings.Contains(why[name], want) {
			t.Errorf("%s skipped for %q, want %q", name, why[name], want)
		}
	}
	for _, name := range []string{"linked", "hf"} {
		if _, err := repo.Load(name); err != nil {
			t.Errorf("load %s through the operator's link: %v", name, err)
		}
	}
	for name, has := range map[string]bool{"hf": true, "linked": true, "empty": false, "blobs": false, "nope": false, "": false, ".": false, "../" + filepath.Base(dir): false} {
		if repo.Has(name) != has {
			t.Errorf("Has(%q) = %v", name, !has)
		}
	}
	if _, err := repo.Load("empty"); !errors.Is(err, infer.ErrNotInRepository) {
		t.Errorf("load of a folder that holds no model: %v, want ErrNotInRepository", err)
	}
	if _, err := repo.Load("a/b"); !errors.Is(err, infer.ErrBadRequest) {
		t.Errorf("load of a path: %v, want a bad request", err)
	}

	// KServe's single-model layout: the folder holds the model's files.
	one := t.TempDir()
	os.WriteFile(filepath.Join(one, "model.yaml"), []byte(lmSpec(1)), 0o644)
	if _, err := New(os.DirFS(one), ""); !errors.Is(err, ErrRepository) || !strings.Contains(err.Error(), "--model_name") {
		t.Errorf("an unnamed single-model folder: %v", err)
	}
	repo, err = New(os.DirFS(one), "iris")
	if err != nil {
		t.Fatal(err)
	}
	if names, _, _ := repo.Scan(); len(names) != 1 || names[0] != "iris" || repo.Single() != "iris" {
		t.Errorf("single-model layout: %v", names)
	}
	if e, err := repo.Load("iris"); err != nil || e.Name != "iris" || e.Model == nil {
		t.Errorf("load iris: %+v %v", e, err)
	}
	if _, err := repo.Load("other"); !errors.Is(err, infer.ErrNotInRepository) {
		t.Errorf("load of another name: %v, want ErrNotInRepository", err)
	}
	entries, failed := repo.LoadAll([]string{"iris", "other"})
	if len(entries) != 1 || len(failed) != 1 || failed[0].Name != "other" {
		t.Errorf("LoadAll: %d loaded, failed %v", len(entries), failed)
	}
}

// TestStamp: a folder's stamp changes when a file in it or one level
// below changes, not otherwise, and a folder of too many files has none.
func TestStamp(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "m", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "m", "model.yaml"), []byte(lmSpec(1)), 0o644)
	os.WriteFile(filepath.Join(dir, "m", "sub", "w"), []byte("1"), 0o644)
	repo, err := New(os.DirFS(dir), "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := repo.Stamp("m")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := repo.Stamp("m"); again != first {
		t.Errorf("stamp changed with nothing changed:\n%s\n%s", first, again)
	}
	os.WriteFile(filepath.Join(dir, "m", "sub", "w"), []byte("22"), 0o644)
	second, _ := repo.Stamp("m")
	if second == first {
		t.Error("stamp unchanged after a file one level below changed size")
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "m", "model.yaml"), later, later)
	if third, _ := repo.Stamp("m"); third == second {
		t.Error("stamp unchanged after model.yaml's modification time changed")
	}
	for i := range maxStampFiles {
		os.WriteFile(filepath.Join(dir, "m", "sub", fmt.Sprint(i)), nil, 0o644)
	}
	if _, err := repo.Stamp("m"); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("a folder of more than %d files: %v", maxStampFiles, err)
	}
}
