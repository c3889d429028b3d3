package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// image is what the Dockerfile says about the runtime image.
type image struct {
	goVersion  string   // ARG GO_VERSION
	buildBase  string   // the build stage's FROM
	buildRuns  []string // the build stage's RUN commands
	base       string   // the runtime stage's FROM
	copies     []*instructions.CopyCommand
	workdir    string
	user       string
	expose     []int
	volumes    []string
	entrypoint []string
}

// readDockerfile parses the Dockerfile with BuildKit's parser, as docker
// build does, and collects its two stages.
func readDockerfile(t *testing.T) image {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) != 2 || stages[0].Name != "build" {
		t.Fatalf("Dockerfile: %d stages, want a stage named build and the runtime stage", len(stages))
	}
	var im image
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Key == "GO_VERSION" {
				im.goVersion = kv.ValueString()
			}
		}
	}
	im.buildBase, im.base = stages[0].BaseName, stages[1].BaseName
	for _, c := range stages[0].Commands {
		if r, ok := c.(*instructions.RunCommand); ok {
			im.buildRuns = append(im.buildRuns, strings.Join(r.CmdLine, " "))
		}
	}
	for _, c := range stages[1].Commands {
		switch c := c.(type) {
		case *instructions.CopyCommand:
			im.copies = append(im.copies, c)
		case *instructions.WorkdirCommand:
			im.workdir = c.Path
		case *instructions.UserCommand:
			im.user = c.User
		case *instructions.ExposeCommand:
			for _, p := range c.Ports {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("Dockerfile: EXPOSE %s", p)
				}
				im.expose = append(im.expose, n)
			}
		case *instructions.VolumeCommand:
			im.volumes = append(im.volumes, c.Volumes...)
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("Dockerfile: ENTRYPOINT in shell form: signals would go to the shell, not serve")
			}
			im.entrypoint = c.CmdLine
		}
	}
	return im
}

// TestDockerfile checks the image against the build script, CI and the
// binary: the build stage runs scripts/build-image.sh with the Go release
// CI uses; the runtime stage is FROM scratch and copies the tree the
// script lays out (TestBuildScript checks it) to the root, runs as a
// numeric non-root user from the working directory where dresim finds its
// sweeps; its entrypoint is serve with flags serve has, listening on
// every interface at the ports it exposes.
func TestDockerfile(t *testing.T) {
	im := readDockerfile(t)
	if want := goWant(t); im.goVersion != want {
		t.Errorf("Dockerfile builds with Go %q, CI (.ci/run) with %q", im.goVersion, want)
	}
	if im.buildBase != "golang:${GO_VERSION}-bookworm" {
		t.Errorf("build stage FROM %s", im.buildBase)
	}
	if !slices.Contains(im.buildRuns, "scripts/build-image.sh /out") {
		t.Errorf("build stage runs %q, not scripts/build-image.sh /out", im.buildRuns)
	}
	if im.base != "scratch" {
		t.Errorf("runtime stage FROM %s, want scratch (everything it holds comes from scripts/build-image.sh)", im.base)
	}
	if uid, _, _ := strings.Cut(im.user, ":"); uid == "" || uid == "0" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric user other than root (Kubernetes' runAsNonRoot needs a number)", im.user)
	}
	if len(im.copies) != 1 || im.copies[0].From != "build" || !slices.Equal(im.copies[0].SourcePaths, []string{"/out/rootfs/"}) || im.copies[0].DestPath != "/" {
		t.Errorf("the runtime stage copies %d things; want one COPY --from=build /out/rootfs/ /", len(im.copies))
	}
	if im.workdir != "/rnnserve" {
		t.Errorf("WORKDIR %s, want /rnnserve, where the tree puts dresim's configs/sweeps", im.workdir)
	}
	if !slices.Equal(im.volumes, []string{"/models"}) {
		t.Errorf("VOLUME %q, want /models", im.volumes)
	}
	if len(im.entrypoint) == 0 || im.entrypoint[0] != "/usr/local/bin/serve" {
		t.Fatalf("ENTRYPOINT %q, want /usr/local/bin/serve ...", im.entrypoint)
	}
	listen := listenPorts(t, "Dockerfile ENTRYPOINT", im.entrypoint[1:])
	if listen["listen"] != 8080 || listen["grpc-listen"] != 8081 {
		t.Errorf("ENTRYPOINT listens on %v, want REST on 8080 and gRPC on 8081", listen)
	}
	var ports []int
	for _, p := range listen {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	if !slices.Equal(ports, im.expose) {
		t.Errorf("EXPOSE %v, but the entrypoint listens on %v", im.expose, ports)
	}
	checkFlags(t, "the Dockerfile's ENTRYPOINT", im.entrypoint[1:])
}

// listenPorts reads serve's listen flags (-listen, -grpc) from args: each
// must be 0.0.0.0:PORT, since a container's loopback is unreachable from
// outside it.
func listenPorts(t *testing.T, where string, args []string) map[string]int {
	t.Helper()
	ports := map[string]int{}
	for i := 0; i+1 < len(args); i++ {
		name := strings.TrimLeft(args[i], "-")
		if name != "listen" && name != "grpc-listen" {
			continue
		}
		host, port, ok := strings.Cut(args[i+1], ":")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || host != "0.0.0.0" {
			t.Errorf("%s: -%s %s, want 0.0.0.0:PORT", where, name, args[i+1])
		}
		ports[name] = n
	}
	return ports
}
