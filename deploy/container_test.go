package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// The container test: the image is built with podman from the tree
// scripts/build-image.sh lays out (the Dockerfile's runtime stage is FROM
// scratch, so nothing is pulled), saved as an OCI layout, unpacked layer by
// layer, and its entrypoint run from the unpacked root with the image's
// own user, environment, working directory and arguments, as a runtime
// would start it. No container runtime runs it: crun cannot set rlimits or
// cgroups on the project's machines. As root the test runs it chrooted to
// the unpacked root, as the image's user, with /proc, /sys and /dev bound
// in a mount namespace of its own; otherwise it runs the unpacked binary
// as the test's user, in the unpacked working directory, and says so.

// imageHelperEnv, when set, makes the test binary the helper that enters
// the unpacked root and executes the entrypoint (TestMain calls
// runImageHelper): it holds the helper's instructions as JSON.
const imageHelperEnv = "RNNSERVE_IMAGE_HELPER"

// imageRun is what the helper is told.
type imageRun struct {
	Root   string   `json:"root"`
	Dir    string   `json:"dir"`
	UID    int      `json:"uid"`
	GID    int      `json:"gid"`
	Env    []string `json:"env"`
	Argv   []string `json:"argv"`
	Mounts []string `json:"mounts"` // host paths bound at the same paths below Root
}

// runImageHelper enters the root and executes the entrypoint; it runs in
// a private mount namespace (unshare -m --propagation private starts it),
// so its mounts go when the entrypoint exits. It never returns.
func runImageHelper(spec string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "image helper:", err)
		os.Exit(3)
	}
	var r imageRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		fail(err)
	}
	for _, m := range r.Mounts {
		if err := syscall.Mount(m, filepath.Join(r.Root, m), "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			fail(fmt.Errorf("bind %s: %w", m, err))
		}
	}
	if err := syscall.Chroot(r.Root); err != nil {
		fail(err)
	}
	if err := syscall.Chdir(r.Dir); err != nil {
		fail(err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		fail(err)
	}
	if err := syscall.Setgid(r.GID); err != nil {
		fail(err)
	}
	if err := syscall.Setuid(r.UID); err != nil {
		fail(err)
	}
	fail(syscall.Exec(r.Argv[0], r.Argv, r.Env))
}

// needPodman skips the test when podman is missing, or fails it when the
// environment variable CI is set (.ci/run installs it).
func needPodman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err == nil {
		return p
	}
	msg := "podman not found: the image was not built, unpacked or run (apt-get install -y --no-install-recommends podman)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, and CI must install it")
	}
	t.Skip(msg)
	return ""
}

// runtimeStage is the Dockerfile's runtime stage as a Containerfile whose
// build context is scripts/build-image.sh's output: each COPY --from=build
// /out/X becomes COPY X.
func runtimeStage(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	froms := 0
	for _, n := range res.AST.Children {
		if strings.EqualFold(n.Value, "from") {
			froms++
		}
		if froms < 2 {
			continue
		}
		line := n.Original
		if strings.EqualFold(n.Value, "copy") {
			if rest, ok := strings.CutPrefix(line, "COPY --from=build /out/"); ok {
				line = "COPY " + rest
			} else {
				t.Fatalf("the runtime stage's %q copies from elsewhere than the build stage's /out", line)
			}
		}
		lines = append(lines, line)
	}
	if froms != 2 || len(lines) == 0 {
		t.Fatalf("the Dockerfile has %d stages, want a build stage and a runtime stage", froms)
	}
	return strings.Join(lines, "\n") + "\n"
}

// ociConfig is the part of an OCI image configuration a runtime starts a
// container from.
type ociConfig struct {
	Config struct {
		User         string              `json:"User"`
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		WorkingDir   string              `json:"WorkingDir"`
		Volumes      map[string]struct{} `json:"Volumes"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	} `json:"config"`
}

// ociDescriptor is an OCI content descriptor.
type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

// readBlob reads a blob of an OCI layout by its digest.
func readBlob(t *testing.T, layout, digest string) []byte {
	t.Helper()
	algo, hex, ok := strings.Cut(digest, ":")
	if !ok || strings.ContainsAny(hex, "/.") {
		t.Fatalf("digest %q", digest)
	}
	data, err := os.ReadFile(filepath.Join(layout, "blobs", algo, hex))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// unpackLayer extracts one layer tar (gzip-compressed or not) over root,
// applying whiteouts, keeping modes and, as root, owners. No entry may
// leave root, or be written through a symbolic link.
func unpackLayer(root string, layer []byte, mediaType string) error {
	var r io.Reader = bytes.NewReader(layer)
	if strings.HasSuffix(mediaType, "+gzip") || strings.HasSuffix(mediaType, ".gzip") {
		z, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		r = z
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + h.Name)
		if name == "/" {
			continue
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		for p := filepath.Dir(dst); p != root && len(p) > len(root); p = filepath.Dir(p) {
			if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("%s: written through the symbolic link %s", h.Name, p)
			}
		}
		base := path.Base(name)
		if base == ".wh..wh..opq" {
			entries, _ := os.ReadDir(filepath.Dir(dst))
			for _, e := range entries {
				os.RemoveAll(filepath.Join(filepath.Dir(dst), e.Name()))
			}
			continue
		}
		if gone, ok := strings.CutPrefix(base, ".wh."); ok {
			os.RemoveAll(filepath.Join(filepath.Dir(dst), gone))
			continue
		}
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			os.Remove(dst)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			os.Remove(dst)
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return err
			}
			continue
		case tar.TypeLink:
			target := filepath.Join(root, filepath.FromSlash(path.Clean("/"+h.Linkname)))
			os.Remove(dst)
			if err := os.Link(target, dst); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: tar entry type %q, which the image should not hold", h.Name, h.Typeflag)
		}
		if err := os.Chmod(dst, mode); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
				return err
			}
		}
	}
}

// treeState is what the test compares of a tree before and after the
// entrypoint ran: each path's type, mode, owner, size and modification
// time.
func treeState(t *testing.T, root string, skip []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = "/" + filepath.ToSlash(rel)
		if slices.ContainsFunc(skip, func(s string) bool { return rel == s || strings.HasPrefix(rel, s+"/") }) {
			if rel != "/" && d.IsDir() && slices.Contains(skip, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		out[rel] = fmt.Sprintf("%v %d:%d %d %d", fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImage builds the image with podman from scripts/build-image.sh's
// tree and the Dockerfile's runtime stage, unpacks it, checks its
// configuration (user, entrypoint, working directory, ports, volume)
// against the Dockerfile, and runs its entrypoint from the unpacked root:
// the probes answer, SIGTERM starts the lame duck (readiness 503 while
// requests are still served) and serve exits 0, and nothing in the image
// outside its declared volumes changed.
func TestImage(t *testing.T) {
	podman := needPodman(t)
	out := binaries(t)
	im := readDockerfile(t)
	work := t.TempDir()
	store := []string{"--storage-driver", "vfs", "--root", filepath.Join(work, "storage"), "--runroot", filepath.Join(work, "run")}
	t.Cleanup(func() {
		// vfs storage holds read-only layers; podman removes its own.
		exec.Command(podman, append(store, "system", "reset", "--force")...).Run()
	})
	containerfile := filepath.Join(work, "Containerfile")
	if err := os.WriteFile(containerfile, []byte(runtimeStage(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	const tag = "localhost/rnnserve:test"
	start := time.Now()
	if b, err := exec.Command(podman, append(store, "build", "--pull=never", "-f", containerfile, "-t", tag, out)...).CombinedOutput(); err != nil {
		t.Fatalf("podman build: %v\n%s", err, b)
	}
	layout := filepath.Join(work, "oci")
	if b, err := exec.Command(podman, append(store, "save", "--format", "oci-dir", "-o", layout, tag)...).CombinedOutput(); err != nil {
		t.Fatalf("podman save: %v\n%s", err, b)
	}
	t.Logf("podman build and save: %v", time.Since(start).Round(time.Millisecond))

	var index struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(readBlobFile(t, filepath.Join(layout, "index.json")), &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(index.Manifests))
	}
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	if err := json.Unmarshal(readBlob(t, layout, index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var cfg ociConfig
	if err := json.Unmarshal(readBlob(t, layout, manifest.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != im.user || !slices.Equal(c.Entrypoint, im.entrypoint) || c.WorkingDir != im.workdir {
		t.Errorf("image config: user %q, entrypoint %q, working directory %q; the Dockerfile says %q, %q, %q",
			c.User, c.Entrypoint, c.WorkingDir, im.user, im.entrypoint, im.workdir)
	}
	var volumes, ports []string
	for v := range c.Volumes {
		volumes = append(volumes, v)
	}
	for p := range c.ExposedPorts {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	if !slices.Equal(volumes, im.volumes) || !slices.Equal(ports, []string{"8080/tcp", "8081/tcp"}) {
		t.Errorf("image config: volumes %q, ports %q", volumes, ports)
	}

	root := filepath.Join(work, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range manifest.Layers {
		if err := unpackLayer(root, readBlob(t, layout, l.Digest), l.MediaType); err != nil {
			t.Fatalf("layer %s: %v", l.Digest, err)
		}
	}
	for _, p := range []string{"/usr/local/bin/serve", "/etc/ssl/certs/ca-certificates.crt", "/etc/passwd", "/rnnserve/configs/sweeps/paper.yaml"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the image lacks %s: %v", p, err)
		}
	}

	// How the entrypoint runs: as a runtime would, where the test can.
	u, g, _ := strings.Cut(c.User, ":")
	uid, err := strconv.Atoi(u)
	if err != nil {
		t.Fatalf("image user %q: want numbers", c.User)
	}
	gid, err := strconv.Atoi(cmpOr(g, u))
	if err != nil {
		t.Fatalf("image user %q: want numbers", c.User)
	}
	restAddr, grpcAddr := freeAddr(t), freeAddr(t)
	// A pod's args are appended to the entrypoint, and a later flag wins:
	// the listeners move to free loopback ports, the lame duck shortens.
	argv := append(append(slices.Clone(c.Entrypoint), c.Cmd...), "-listen", restAddr, "-grpc-listen", grpcAddr, "-lame-duck", "2s")
	mounts := []string{"/proc", "/sys", "/dev"}
	var cmd *exec.Cmd
	var notRun []string
	chrooted := false
	unshare, uerr := exec.LookPath("unshare")
	self, serr := os.Executable()
	if os.Geteuid() == 0 && uerr == nil && serr == nil {
		for _, m := range mounts {
			os.MkdirAll(filepath.Join(root, m), 0o755)
		}
		spec, _ := json.Marshal(imageRun{Root: root, Dir: c.WorkingDir, UID: uid, GID: gid, Env: c.Env, Argv: argv, Mounts: mounts})
		cmd = exec.Command(unshare, "-m", "--propagation", "private", self)
		cmd.Env = []string{imageHelperEnv + "=" + string(spec)}
		chrooted = true
	} else {
		cmd = exec.Command(filepath.Join(root, filepath.FromSlash(c.Entrypoint[0])), argv[1:]...)
		cmd.Dir = filepath.Join(root, filepath.FromSlash(c.WorkingDir))
		cmd.Env = c.Env
		notRun = append(notRun, fmt.Sprintf("not root (or no unshare): the entrypoint ran as user %d, not the image's %s, outside a chroot", os.Geteuid(), c.User))
		mounts = nil
	}
	notRun = append(notRun, "no container runtime: no namespaces but the mount namespace, no cgroup limits, no seccomp profile, the host's network")
	for _, n := range notRun {
		t.Logf("not exercised: %s", n)
	}
	before := treeState(t, root, append(slices.Clone(mounts), volumes...))
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	}()
	base := "http://" + restAddr
	waitOK(t, base+"/v2/health/ready", logs)
	if code, _ := getURL(t, base+"/v2/health/live"); code != 200 {
		t.Errorf("liveness: %d", code)
	}
	if conn, err := net.DialTimeout("tcp", grpcAddr, 5*time.Second); err != nil {
		t.Errorf("gRPC port: %v", err)
	} else {
		conn.Close()
	}
	if uidLine := fmt.Sprintf("Uid:\t%d\t%d", uid, uid); chrooted {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil || !strings.Contains(string(status), uidLine) {
			t.Errorf("serve does not run as the image's user %s: %v", c.User, err)
		}
	}
	infer := `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [72, 105]}]}`
	cmd.Process.Signal(syscall.SIGTERM)
	sawLameDuck := false
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		code, _ := getURL(t, base+"/v2/health/ready")
		if code != http.StatusServiceUnavailable {
			continue
		}
		resp, err := http.Post(base+"/v2/models/bytelm/infer", "application/json", strings.NewReader(infer))
		if err != nil {
			t.Fatalf("infer in the lame duck: %v", err)
		}
		resp.Body.Close()
		sawLameDuck = resp.StatusCode == http.StatusOK && resp.Close
		break
	}
	if !sawLameDuck {
		t.Errorf("after SIGTERM: no readiness 503 while requests were still served (each closing its connection)\n%s", logs)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Errorf("exit after SIGTERM: %v, want 0\n%s", exitErr, logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve still running a minute after SIGTERM\n%s", logs)
	}
	after := treeState(t, root, append(slices.Clone(mounts), volumes...))
	for p, was := range before {
		if now, ok := after[p]; !ok {
			t.Errorf("the entrypoint removed %s from the image", p)
		} else if now != was && p != "/" && !slices.Contains(mounts, p) {
			t.Errorf("the entrypoint changed %s: %s, now %s", p, was, now)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("the entrypoint wrote %s, outside the image's volumes %q", p, volumes)
		}
	}
	if !strings.Contains(logs.String(), `msg="lame duck`) {
		t.Errorf("no lame-duck line in the log:\n%s", logs)
	}
}

// readBlobFile reads a file of the layout.
func readBlobFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
