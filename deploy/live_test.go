package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestServeAsDeployed runs the built serve as the Deployment's pod runs
// it: the image's entrypoint, the pod's arguments and the ConfigMap's
// configuration file, with the listen addresses moved to free loopback
// ports (after checking they are the container's ports). It must answer
// every probe and the ServiceMonitor's scrape path, and on SIGTERM exit 0
// within the drain timeout.
func TestServeAsDeployed(t *testing.T) {
	objs := manifests(t)
	im := readDockerfile(t)
	dep := get[appsv1.Deployment](t, objs, "deployment.yaml")
	cfg := get[corev1.ConfigMap](t, objs, "config.yaml")
	c := dep.Spec.Template.Spec.Containers[0]

	args := checkFlags(t, "deployment.yaml with the image's entrypoint", append(slices.Clone(im.entrypoint[1:]), c.Args...))
	cfgPath, _ := argValue(args, "config")
	_, key, ok := mountedFile(c, dep.Spec.Template.Spec.Volumes, cfgPath)
	if !ok {
		t.Fatalf("-config %s is not mounted from a ConfigMap", cfgPath)
	}
	local := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(local, []byte(cfg.Data[key]), 0o644); err != nil {
		t.Fatal(err)
	}
	var sc serveConfig
	if err := yaml.Unmarshal([]byte(cfg.Data[key]), &sc); err != nil {
		t.Fatal(err)
	}
	rest := freeAddr(t)
	for i := 0; i+1 < len(args); i++ {
		switch strings.TrimLeft(args[i], "-") {
		case "config":
			args[i+1] = local
		case "listen":
			args[i+1] = rest
		case "grpc-listen":
			args[i+1] = freeAddr(t)
		}
	}
	cmd := exec.Command(filepath.Join(binaries(t), "serve"), args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = os.Environ()
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()

	base := "http://" + rest
	// The startup probe allows 60 tries 2s apart; the test allows as long.
	fetch := func(path string) (int, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		code, _, err := fetch(c.StartupProbe.HTTPGet.Path)
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("startup probe %s: %d %v after 120s\n%s", c.StartupProbe.HTTPGet.Path, code, err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if code, body, err := fetch(p.HTTPGet.Path); err != nil || code != http.StatusOK {
			t.Errorf("%s probe GET %s: %d %v %s", kind, p.HTTPGet.Path, code, err, body)
		}
	}
	sm := get[monitoringv1.ServiceMonitor](t, objs, "monitoring/servicemonitor.yaml").Spec.Endpoints[0].Path
	code, body, err := fetch(sm)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "rnnserve_") {
		t.Errorf("scrape GET %s: %d %v, rnnserve metrics: %v", sm, code, err, strings.Contains(body, "rnnserve_"))
	}

	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0\n%s", err, logs.String())
		}
	case <-time.After(sc.LameDuck + sc.DrainTimeout):
		t.Fatalf("serve still running %v after SIGTERM (lame duck %v, drain timeout %v)", time.Since(start), sc.LameDuck, sc.DrainTimeout)
	}
	// The pod's RNNSERVE_LOG_FORMAT=json: every log line is a JSON object
	// (read once serve has exited and its output is all copied).
	for line := range strings.Lines(logs.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line %q is not JSON (RNNSERVE_LOG_FORMAT=json in the pod)", line)
		}
	}
}

// kubeVar is Kubernetes' $(NAME) reference to a container's environment in
// its command and arguments.
var kubeVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandKube expands $(NAME) references as the kubelet does: a name the
// environment lacks stays as written.
func expandKube(s string, env map[string]string) string {
	return kubeVar.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[kubeVar.FindStringSubmatch(ref)[1]]; ok {
			return v
		}
		return ref
	})
}

// podEnv is a container's environment as the kubelet gives it to pod
// index k of an Indexed Job: plain values, and the completion index from
// the pod's annotation.
func podEnv(t *testing.T, c corev1.Container, k int) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == completionIndexPath:
			env[e.Name] = strconv.Itoa(k)
		default:
			t.Fatalf("env %s: the test cannot give it a value as the kubelet would", e.Name)
		}
	}
	return env
}

// TestSweepJobAsDeployed runs the sweep's Indexed Job as Kubernetes would,
// one dresim process per index at once, each with the pod's arguments
// (its $(JOB_COMPLETION_INDEX) expanded) and only the pod's environment,
// the volume's mount path moved to a temporary directory and the sweep to
// the test's tiny one; then the merge Job's arguments, which must find
// every row of the sweep.
func TestSweepJobAsDeployed(t *testing.T) {
	job, merge := sweepJobs(t)
	dresim := filepath.Join(binaries(t), "dresim")
	vol := t.TempDir()
	c := job.Spec.Template.Spec.Containers[0]
	mount := c.VolumeMounts[0].MountPath
	tiny, err := filepath.Abs(filepath.Join(repoRoot, "dre", "sweep", "testdata", "tiny.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	local := func(args []string, env map[string]string) []string {
		out := make([]string, len(args))
		for i, a := range args {
			a = expandKube(a, env)
			if rest, ok := strings.CutPrefix(a, mount+"/"); ok {
				a = filepath.Join(vol, rest)
			}
			out[i] = a
		}
		return out
	}
	n := int(*job.Spec.Completions)
	var wg sync.WaitGroup
	outs := make([][]byte, n)
	errs := make([]error, n)
	for k := range n {
		env := podEnv(t, c, k)
		args := local(c.Args, env)
		args[1] = tiny // the sweep: configs/sweeps/NAME.yaml in the image, the test's tiny one here
		cmd := exec.Command(dresim, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + vol} // the pod's environment only
		for name, v := range env {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
		wg.Go(func() { outs[k], errs[k] = cmd.CombinedOutput() })
	}
	wg.Wait()
	for k := range n {
		if errs[k] != nil {
			t.Fatalf("pod %d: %v\n%s", k, errs[k], outs[k])
		}
		if want := fmt.Sprintf("(shard %d/%d from JOB_COMPLETION_INDEX)", k, n); !strings.Contains(string(outs[k]), want) {
			t.Errorf("pod %d says %q, want %q", k, outs[k], want)
		}
	}
	mc := merge.Spec.Template.Spec.Containers[0]
	margs := local(mc.Args, nil)
	out, err := exec.Command(dresim, margs...).CombinedOutput()
	if err != nil {
		t.Fatalf("merge %q: %v\n%s", margs, err, out)
	}
	if !strings.Contains(string(out), "72 of 72 rows") {
		t.Errorf("merge says %q, want every one of the tiny sweep's 72 rows", out)
	}
	for _, f := range []string{"results.json", "rows.csv", filepath.Join("figures", "fig3_dre_share.svg")} {
		if _, err := os.Stat(filepath.Join(margs[2], f)); err != nil {
			t.Errorf("the merge wrote no %s: %v", f, err)
		}
	}
}
