package deploy

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository's root, relative to this package.
const repoRoot = ".."

// built holds the binaries scripts/build-image.sh builds, once per test
// binary (TestMain removes them).
var built struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(imageHelperEnv); spec != "" {
		runImageHelper(spec) // the container test's helper: never returns
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binaries runs scripts/build-image.sh, as the Dockerfile's build stage
// does, and returns the directory holding serve and dresim.
func binaries(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "rnnserve-image-"); built.err != nil {
			return
		}
		cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "build-image.sh"), built.dir)
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("scripts/build-image.sh: %v\n%s", built.err, built.out)
	}
	return built.dir
}

// TestBuildScript checks what scripts/build-image.sh builds, independently
// of the script's own checks: both binaries are static ELF files (no
// interpreter, no shared library) built with cgo off, trimmed paths and
// stripped symbols, for this machine's architecture.
func TestBuildScript(t *testing.T) {
	dir := binaries(t)
	for _, name := range []string{"serve", "dresim"} {
		path := filepath.Join(dir, name)
		f, err := elf.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: not static", name)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v (%v): not static", name, libs, err)
		}
		// -ldflags '-s -w' (which -trimpath keeps out of the build
		// information): no symbol table, no DWARF.
		for _, s := range f.Sections {
			if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
				t.Errorf("%s has section %s: not built with -ldflags '-s -w'", name, s.Name)
			}
		}
		f.Close()
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		want := map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": runtime.GOARCH}
		for k, v := range want {
			if settings[k] != v {
				t.Errorf("%s built with %s=%q, want %q", name, k, settings[k], v)
			}
		}
		if info.Path != "rnnserve/cmd/"+name {
			t.Errorf("%s is %s", name, info.Path)
		}
	}
	// The image's tree: the binaries as built, the CA bundle, the users,
	// the sweeps below the working directory and the volume's mount point.
	root := filepath.Join(dir, "rootfs")
	for _, c := range []struct {
		path string
		dir  bool
		want string // a line the file holds
	}{
		{"usr/local/bin/serve", false, ""}, {"usr/local/bin/dresim", false, ""},
		{"etc/ssl/certs/ca-certificates.crt", false, "-----BEGIN CERTIFICATE-----"},
		{"etc/passwd", false, "nonroot:x:65532:65532:"}, {"etc/group", false, "nonroot:x:65532:"},
		{"rnnserve/configs/sweeps/paper.yaml", false, ""}, {"models", true, ""},
	} {
		fi, err := os.Stat(filepath.Join(root, c.path))
		if err != nil || fi.IsDir() != c.dir {
			t.Errorf("image tree: %s: %v", c.path, err)
			continue
		}
		if c.want != "" {
			data, _ := os.ReadFile(filepath.Join(root, c.path))
			if !strings.Contains(string(data), c.want) {
				t.Errorf("image tree: %s lacks %q", c.path, c.want)
			}
		}
	}
	for _, name := range []string{"serve", "dresim"} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(root, "usr", "local", "bin", name))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("image tree: usr/local/bin/%s is not the binary built", name)
		}
	}
	// serve knows the commit it was built from: from the Go build
	// information, or from the script's -ldflags where go build stamped
	// none (a Git worktree, or GOFLAGS=-buildvcs=false).
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Logf("no git commit to compare serve -version with: %v", err)
		return
	}
	out, err := exec.Command(filepath.Join(dir, "serve"), "-version").Output()
	if want := "(commit " + strings.TrimSpace(string(head)) + ","; err != nil || !strings.Contains(string(out), want) {
		t.Errorf("serve -version: %q %v, want %q", out, err, want)
	}
}

// serveHelp is what serve -h prints; it must exit 0.
func serveHelp(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binaries(t), "serve"), "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("serve -h: %v, want exit status 0\n%s", err, out)
	}
	return string(out)
}

// serveFlags lists the flags serve -h prints.
func serveFlags(t *testing.T) []string {
	t.Helper()
	out := serveHelp(t)
	re := regexp.MustCompile(`(?m)^\s+-([\w-]+)`)
	var flags []string
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "listen") {
		t.Fatalf("serve -h lists no -listen flag:\n%s", out)
	}
	return flags
}

// serveEnv lists the environment variables serve -h names: each setting's
// RNNSERVE_ variable (docs/configuration.md).
func serveEnv(t *testing.T) []string {
	t.Helper()
	out := serveHelp(t)
	env := regexp.MustCompile(`\bRNNSERVE_[A-Z0-9_]+\b`).FindAllString(out, -1)
	if !slices.Contains(env, "RNNSERVE_LISTEN") {
		t.Fatalf("serve -h names no RNNSERVE_LISTEN:\n%s", out)
	}
	return env
}

// checkFlags checks that every flag in args is one serve has, and returns
// args.
func checkFlags(t *testing.T, where string, args []string) []string {
	t.Helper()
	have := serveFlags(t)
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !slices.Contains(have, name) {
			t.Errorf("%s passes -%s, which serve does not have (serve -h: %v)", where, name, have)
		}
	}
	return args
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// goWant is the Go release .ci/run installs (GO_WANT=go1.x.y), without
// its "go" prefix.
func goWant(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "GO_WANT=go"); ok {
			return v
		}
	}
	t.Fatal(".ci/run sets no GO_WANT")
	return ""
}
