package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// manifestDir holds the manifests, below the repository's root.
var manifestDir = filepath.Join(repoRoot, "deploy", "kubernetes")

// goRuntimeEnv are the environment variables the Go runtime reads; serve
// reads its settings' RNNSERVE_ variables besides (serveEnv).
var goRuntimeEnv = []string{"GOMEMLIMIT", "GOMAXPROCS", "GOGC", "GODEBUG", "GOTRACEBACK"}

// servingRuntime is the part of KServe's serving.kserve.io/v1alpha1
// ServingRuntime that these manifests use, with KServe's JSON names
// (pkg/apis/serving/v1alpha1) and corev1.Container for its containers.
// Decoded strictly, a field KServe's type does not have cannot pass.
type servingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Annotations           map[string]string      `json:"annotations"`
		SupportedModelFormats []supportedModelFormat `json:"supportedModelFormats"`
		ProtocolVersions      []string               `json:"protocolVersions"`
		MultiModel            *bool                  `json:"multiModel"`
		Containers            []corev1.Container     `json:"containers"`
		Volumes               []corev1.Volume        `json:"volumes"`
	} `json:"spec"`
}

// supportedModelFormat is KServe's v1alpha1.SupportedModelFormat.
type supportedModelFormat struct {
	Name       string  `json:"name"`
	Version    *string `json:"version"`
	AutoSelect *bool   `json:"autoSelect"`
	Priority   *int32  `json:"priority"`
}

// inferenceService is the part of KServe's serving.kserve.io/v1beta1
// InferenceService that these manifests use (pkg/apis/serving/v1beta1:
// PredictorSpec, ComponentExtensionSpec, ModelSpec).
type inferenceService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Predictor struct {
			MinReplicas *int32 `json:"minReplicas"`
			MaxReplicas int32  `json:"maxReplicas"`
			Model       *struct {
				ModelFormat struct {
					Name    string  `json:"name"`
					Version *string `json:"version"`
				} `json:"modelFormat"`
				Runtime         *string                     `json:"runtime"`
				ProtocolVersion *string                     `json:"protocolVersion"`
				StorageURI      *string                     `json:"storageUri"`
				Resources       corev1.ResourceRequirements `json:"resources"`
			} `json:"model"`
		} `json:"predictor"`
	} `json:"spec"`
}

// newObject returns the Go type of a manifest's apiVersion and kind.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return new(appsv1.Deployment)
	case "v1 Service":
		return new(corev1.Service)
	case "v1 ConfigMap":
		return new(corev1.ConfigMap)
	case "v1 PersistentVolumeClaim":
		return new(corev1.PersistentVolumeClaim)
	case "policy/v1 PodDisruptionBudget":
		return new(policyv1.PodDisruptionBudget)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return new(autoscalingv2.HorizontalPodAutoscaler)
	case "batch/v1 Job":
		return new(batchv1.Job)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return new(monitoringv1.ServiceMonitor)
	case "monitoring.coreos.com/v1 PodMonitor":
		return new(monitoringv1.PodMonitor)
	case "serving.kserve.io/v1alpha1 ServingRuntime":
		return new(servingRuntime)
	case "serving.kserve.io/v1beta1 InferenceService":
		return new(inferenceService)
	}
	return nil
}

// manifests decodes every YAML document under deploy/kubernetes strictly
// (an unknown or repeated field is an error) into its Go type, by file
// (slash-separated, below deploy/kubernetes). Each file holds one object.
func manifests(t *testing.T) map[string]any {
	t.Helper()
	objs := map[string]any{}
	err := filepath.WalkDir(manifestDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(manifestDir, p)
		rel = filepath.ToSlash(rel)
		if path.Ext(rel) != ".yaml" {
			return fmt.Errorf("%s: not a .yaml manifest", rel)
		}
		docs, err := decodeFile(p)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if len(docs) != 1 {
			return fmt.Errorf("%s: %d objects, want one per file", rel, len(docs))
		}
		objs[rel] = docs[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// decodeFile decodes each document of a YAML file strictly.
func decodeFile(p string) ([]any, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var out []any
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var tm metav1.TypeMeta
		if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if tm.APIVersion == "" && tm.Kind == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // comments only
		}
		obj := newObject(tm.APIVersion, tm.Kind)
		if obj == nil {
			return nil, fmt.Errorf("document %d: apiVersion %q kind %q: no Go type for it in this test", i, tm.APIVersion, tm.Kind)
		}
		if err := sigsyaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, tm.Kind, err)
		}
		out = append(out, obj)
	}
}

var commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(doc []byte) []byte { return commentLine.ReplaceAll(doc, nil) }

// get returns the object of file as a T.
func get[T any](t *testing.T, objs map[string]any, file string) *T {
	t.Helper()
	o, ok := objs[file].(*T)
	if !ok {
		t.Fatalf("%s: want a %T, have %T", file, o, objs[file])
	}
	return o
}

// TestManifestsDecode: every manifest decodes strictly, and a field that
// its type lacks, or a repeated one, fails the decoding (so the other
// tests' decoding can fail).
func TestManifestsDecode(t *testing.T) {
	objs := manifests(t)
	want := []string{"config.yaml", "deployment.yaml", "service.yaml", "pdb.yaml", "autoscaling/hpa.yaml",
		"monitoring/servicemonitor.yaml", "monitoring/podmonitor-kserve.yaml", "monitoring/grafana-dashboard.yaml", "kserve/servingruntime.yaml",
		"kserve/inferenceservice.yaml", "sweep/pvc.yaml", "sweep/job.yaml", "sweep/merge-job.yaml"}
	for _, f := range want {
		if objs[f] == nil {
			t.Errorf("no manifest %s", f)
		}
	}
	for f, o := range objs {
		if m, ok := o.(metav1.Object); !ok || m.GetName() == "" {
			t.Errorf("%s: no metadata.name", f)
		}
	}
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selectr: {a: b}}\n",
		"misspelt probe":  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          readinesProbe: {}\n",
		"repeated field":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"KServe unknown":  "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata: {name: x}\nspec: {protocols: [v2]}\n",
		"unknown kind":    "apiVersion: v1\nkind: Podd\nmetadata: {name: x}\n",
		"monitor unknown": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{prot: http}]}\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeFile(p); err == nil {
			t.Errorf("%s: decoded without an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// serveConfig is the part of serve's configuration file this test reads.
type serveConfig struct {
	// LameDuck is how long serve goes on serving after SIGTERM, failing
	// its readiness probe, before it drains (docs/deploy.md).
	LameDuck time.Duration `yaml:"lame_duck"`
	// DrainTimeout bounds the drain that follows.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// mountedFile returns the ConfigMap key that path is, in a container with
// the given mounts and a pod with the given volumes.
func mountedFile(c corev1.Container, vols []corev1.Volume, p string) (configMap, key string, ok bool) {
	for _, m := range c.VolumeMounts {
		rel, found := strings.CutPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !found {
			continue
		}
		for _, v := range vols {
			if v.Name == m.Name && v.ConfigMap != nil {
				return v.ConfigMap.Name, rel, true
			}
		}
	}
	return "", "", false
}

// kserveArg returns the value of flag name in args, as --name=value or
// --name value (how KServe's runtimes write their flags).
func kserveArg(args []string, name string) (string, bool) {
	for i, a := range args {
		k, v, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if k != name {
			continue
		}
		if eq {
			return v, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// argValue returns the value of flag name in args (-name value).
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if strings.TrimLeft(a, "-") == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// namedPort returns the container's port called name.
func namedPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// TestServingManifests checks what the server's manifests must agree on,
// with each other, with the image and with the binary: labels and
// selectors, image, ports, probes, flags, environment, security context,
// resources, replicas and the shutdown timing. The live test runs the
// binary with them.
func TestServingManifests(t *testing.T) {
	objs := manifests(t)
	im := readDockerfile(t)
	dep := get[appsv1.Deployment](t, objs, "deployment.yaml")
	cfg := get[corev1.ConfigMap](t, objs, "config.yaml")
	svc := get[corev1.Service](t, objs, "service.yaml")
	pdb := get[policyv1.PodDisruptionBudget](t, objs, "pdb.yaml")
	hpa := get[autoscalingv2.HorizontalPodAutoscaler](t, objs, "autoscaling/hpa.yaml")
	sm := get[monitoringv1.ServiceMonitor](t, objs, "monitoring/servicemonitor.yaml")

	// Labels and selectors.
	sel := dep.Spec.Selector.MatchLabels
	if len(sel) == 0 || !subset(sel, dep.Spec.Template.Labels) {
		t.Errorf("Deployment selector %v does not select its pods' labels %v", sel, dep.Spec.Template.Labels)
	}
	for what, s := range map[string]map[string]string{
		"Service selector": svc.Spec.Selector, "PodDisruptionBudget selector": pdb.Spec.Selector.MatchLabels,
	} {
		if len(s) == 0 || !subset(s, dep.Spec.Template.Labels) || !subset(sel, s) {
			t.Errorf("%s %v, want the Deployment's pods as its selector %v picks them", what, s, sel)
		}
	}
	if !subset(sm.Spec.Selector.MatchLabels, svc.Labels) || len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("ServiceMonitor selector %v does not select the Service's labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if r := hpa.Spec.ScaleTargetRef; r.APIVersion != "apps/v1" || r.Kind != "Deployment" || r.Name != dep.Name {
		t.Errorf("HorizontalPodAutoscaler scales %+v, not Deployment %s", r, dep.Name)
	}

	// The container: image, ports, probes.
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	checkImage(t, "deployment.yaml", c)
	listen := listenPorts(t, "Dockerfile ENTRYPOINT", im.entrypoint[1:])
	for flag, name := range map[string]string{"listen": "http", "grpc-listen": "grpc"} {
		if p, ok := namedPort(c, name); !ok || int(p) != listen[flag] {
			t.Errorf("container port %q = %d, but the image's -%s listens on %d", name, p, flag, listen[flag])
		}
	}
	for _, sp := range svc.Spec.Ports {
		p, ok := namedPort(c, sp.TargetPort.String())
		if !ok || sp.Port != p || sp.Name != sp.TargetPort.String() {
			t.Errorf("Service port %s (%d -> %s) is not a container port by the same name and number", sp.Name, sp.Port, sp.TargetPort.String())
		}
		if sp.Name == "grpc" && (sp.AppProtocol == nil || *sp.AppProtocol != "kubernetes.io/h2c") {
			t.Errorf("Service port grpc: appProtocol %v, want kubernetes.io/h2c (gRPC without TLS)", sp.AppProtocol)
		}
	}
	if len(svc.Spec.Ports) != 2 {
		t.Errorf("Service has %d ports, want REST and gRPC", len(svc.Spec.Ports))
	}
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	wantPath := map[string]string{"startup": "/v2/health/ready", "readiness": "/v2/health/ready", "liveness": "/v2/health/live"}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", kind)
			continue
		}
		if p.HTTPGet.Path != wantPath[kind] || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe GET %s on port %s, want %s on http", kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), wantPath[kind])
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want the Service's http port, /metrics", sm.Spec.Endpoints)
	}

	// Arguments: serve has the flags, and -config names the ConfigMap's file.
	checkFlags(t, "deployment.yaml with the image's entrypoint", append(slices.Clone(im.entrypoint[1:]), c.Args...))
	if len(c.Command) != 0 {
		t.Errorf("command %q replaces the image's entrypoint (and its listen flags)", c.Command)
	}
	cfgPath, ok := argValue(c.Args, "config")
	if !ok {
		t.Fatal("no -config argument")
	}
	cm, key, ok := mountedFile(c, pod.Volumes, cfgPath)
	if !ok || cm != cfg.Name {
		t.Fatalf("-config %s is not a key of ConfigMap %s mounted in the container", cfgPath, cfg.Name)
	}
	var sc serveConfig
	if err := yaml.Unmarshal([]byte(cfg.Data[key]), &sc); err != nil || sc.DrainTimeout <= 0 || sc.LameDuck <= 0 {
		t.Fatalf("ConfigMap %s key %s: %v, lame_duck %v, drain_timeout %v", cfg.Name, key, err, sc.LameDuck, sc.DrainTimeout)
	}
	lameDuck := sc.LameDuck

	// Shutdown timing: the grace period covers the preStop sleep, the
	// lame-duck period, the drain timeout (serve's one-second last call
	// for open connections runs within it) and the time serve gives the
	// requests the timeout cut to write their last line.
	var preStop time.Duration
	if h := c.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.Sleep == nil {
		t.Error("no preStop sleep")
	} else {
		preStop = time.Duration(h.PreStop.Sleep.Seconds) * time.Second
	}
	if preStop != lameDuck {
		t.Errorf("preStop sleeps %v, want the lame-duck period %v", preStop, lameDuck)
	}
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if need := preStop + lameDuck + sc.DrainTimeout + serveCutGrace; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v, want more than preStop %v + lame duck %v + drain %v + cut requests' last lines %v = %v", grace, preStop, lameDuck, sc.DrainTimeout, serveCutGrace, need)
	}

	// Environment: only what the binary reads.
	checkEnv(t, "deployment.yaml", c)
	checkSecurity(t, "deployment.yaml", pod.SecurityContext, c, im)
	checkResources(t, "deployment.yaml", c)

	// Replicas: the HPA owns the count (a replicas: beside it would be
	// set back on every apply); the budget lets one pod go at a time.
	if dep.Spec.Replicas != nil {
		t.Errorf("replicas %d beside the HorizontalPodAutoscaler %s, which owns the count: leave it out", *dep.Spec.Replicas, hpa.Name)
	}
	minReplicas := *hpa.Spec.MinReplicas
	if minReplicas < 2 {
		t.Errorf("HPA minimum %d: want at least 2", minReplicas)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() >= int(minReplicas) {
		t.Errorf("PodDisruptionBudget minAvailable %v with at least %d replicas blocks every eviction", pdb.Spec.MinAvailable, minReplicas)
	}
	// Spread over nodes, softly, selecting the Deployment's own pods.
	spread := false
	for _, c := range pod.TopologySpreadConstraints {
		if c.TopologyKey == "kubernetes.io/hostname" && c.MaxSkew == 1 && c.WhenUnsatisfiable == corev1.ScheduleAnyway &&
			c.LabelSelector != nil && len(c.LabelSelector.MatchLabels) > 0 && subset(c.LabelSelector.MatchLabels, dep.Spec.Template.Labels) {
			spread = true
		}
	}
	if !spread {
		t.Errorf("topology spread %+v: want maxSkew 1 over kubernetes.io/hostname, ScheduleAnyway, selecting the pods' labels", pod.TopologySpreadConstraints)
	}
	if u := dep.Spec.Strategy.RollingUpdate; u == nil || u.MaxUnavailable == nil || u.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v: want maxUnavailable 0", u)
	}
}

// subset reports whether every label of a is in b.
func subset(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// imageRef is the image every manifest runs.
const imageRef = "rnnserve:latest"

// serveCutGrace is cmd/serve's cutGrace: how long, after the drain
// timeout, the requests it cut get to write their last line before serve
// exits.
const serveCutGrace = 2 * time.Second

func checkImage(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if c.Image != imageRef || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("%s: image %s (pull %s), want %s, IfNotPresent (docs/deploy.md: build, then load or push it)", where, c.Image, c.ImagePullPolicy, imageRef)
	}
}

// checkEnv: every variable is one the binary reads, and GOMEMLIMIT
// leaves headroom: 85% to 95% of the memory limit.
func checkEnv(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	reads := append(slices.Clone(goRuntimeEnv), serveEnv(t)...)
	set := false
	for _, e := range c.Env {
		if !slices.Contains(reads, e.Name) {
			t.Errorf("%s: env %s: serve does not read it (it reads %v)", where, e.Name, reads)
		}
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		set = true
		lim := c.Resources.Limits[corev1.ResourceMemory]
		n, err := goMemLimit(e.Value)
		if err != nil || e.ValueFrom != nil {
			t.Errorf("%s: GOMEMLIMIT %q %v: want a size in Go's form (921MiB)", where, e.Value, err)
			continue
		}
		if r := float64(n) / float64(lim.Value()); r < 0.85 || r > 0.95 {
			t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of the memory limit %s: want about 90%%, headroom for what the Go heap does not count", where, e.Value, 100*r, lim.String())
		}
	}
	if !set {
		t.Errorf("%s: no GOMEMLIMIT", where)
	}
}

// goMemLimit reads GOMEMLIMIT as the Go runtime does: a byte count with
// an optional unit B, KiB, MiB, GiB or TiB.
func goMemLimit(v string) (int64, error) {
	i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(v)
	}
	n, err := strconv.ParseInt(v[:i], 10, 64)
	if err != nil {
		return 0, err
	}
	unit, ok := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[v[i:]]
	if !ok {
		return 0, fmt.Errorf("unit %q", v[i:])
	}
	return n * unit, nil
}

// checkSecurity: non-root as the image's user, no privilege escalation,
// a read-only root and no capabilities; the RuntimeDefault seccomp
// profile on the pod or, where there is no pod security context (a
// ServingRuntime), on the container, as Pod Security "restricted" asks.
func checkSecurity(t *testing.T, where string, pod *corev1.PodSecurityContext, c corev1.Container, im image) {
	t.Helper()
	uid, _, _ := strings.Cut(im.user, ":")
	if pod != nil {
		if pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || strconv.FormatInt(*pod.RunAsUser, 10) != uid {
			t.Errorf("%s: pod security context %+v, want runAsNonRoot and runAsUser %s (the image's USER)", where, pod, uid)
		}
		if pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: want the RuntimeDefault seccomp profile", where)
		}
	}
	s := c.SecurityContext
	if pod == nil && (s == nil || s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		t.Errorf("%s: container %s: no pod security context, so the container's must set seccompProfile RuntimeDefault (Pod Security restricted)", where, c.Name)
	}
	if s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation ||
		s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem ||
		s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: container %s security context %+v: want no privilege escalation, a read-only root, every capability dropped", where, c.Name, s)
	}
}

// checkResources: CPU and memory requested and limited, equal (whole cores
// and Guaranteed QoS).
func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[r]
		lim, okLim := c.Resources.Limits[r]
		if !okReq || !okLim || req.Cmp(lim) != 0 {
			t.Errorf("%s: container %s %s request %v limit %v: want both, equal", where, c.Name, r, req.String(), lim.String())
		}
	}
}

// kserveModelDir is where KServe puts an InferenceService's storageUri.
const kserveModelDir = "/mnt/models"

// TestKServeManifests checks the ServingRuntime and the InferenceService
// against each other, the image and the binary.
func TestKServeManifests(t *testing.T) {
	objs := manifests(t)
	im := readDockerfile(t)
	rt := get[servingRuntime](t, objs, "kserve/servingruntime.yaml")
	isvc := get[inferenceService](t, objs, "kserve/inferenceservice.yaml")
	if len(rt.Spec.Containers) != 1 || rt.Spec.Containers[0].Name != "kserve-container" {
		t.Fatalf("ServingRuntime containers %d, want one named kserve-container", len(rt.Spec.Containers))
	}
	c := rt.Spec.Containers[0]
	checkImage(t, "kserve/servingruntime.yaml", c)
	checkSecurity(t, "kserve/servingruntime.yaml", nil, c, im)
	checkResources(t, "kserve/servingruntime.yaml", c)
	if len(c.Command) != 0 {
		t.Errorf("command %q replaces the image's entrypoint", c.Command)
	}
	checkFlags(t, "kserve/servingruntime.yaml with the image's entrypoint", append(slices.Clone(im.entrypoint[1:]), c.Args...))
	checkEnv(t, "kserve/servingruntime.yaml", c)
	if dir, _ := kserveArg(c.Args, "model_dir"); dir != kserveModelDir {
		t.Errorf("--model_dir %q, want KServe's model directory %s", dir, kserveModelDir)
	}
	if name, _ := kserveArg(c.Args, "model_name"); name != "{{.Name}}" {
		t.Errorf("--model_name %q, want {{.Name}}, the InferenceService's name KServe puts there", name)
	}
	rest := listenPorts(t, "Dockerfile ENTRYPOINT", im.entrypoint[1:])["listen"]
	if len(c.Ports) != 1 || int(c.Ports[0].ContainerPort) != rest {
		t.Errorf("ServingRuntime ports %+v, want the REST port %d", c.Ports, rest)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/v2/health/ready" || p.HTTPGet.Port.IntValue() != rest {
		t.Errorf("ServingRuntime readiness probe %+v, want GET /v2/health/ready on %d", p, rest)
	}
	if a := rt.Spec.Annotations; a["prometheus.kserve.io/port"] != strconv.Itoa(rest) || a["prometheus.kserve.io/path"] != "/metrics" {
		t.Errorf("ServingRuntime metrics annotations %v, want port %d, path /metrics", a, rest)
	}
	if isvc.Annotations["serving.kserve.io/enable-prometheus-scraping"] != "true" {
		t.Errorf("InferenceService annotations %v: want serving.kserve.io/enable-prometheus-scraping: \"true\"", isvc.Annotations)
	}
	pm := get[monitoringv1.PodMonitor](t, objs, "monitoring/podmonitor-kserve.yaml")
	if pm.Spec.Selector.MatchLabels["serving.kserve.io/inferenceservice"] != isvc.Name {
		t.Errorf("PodMonitor selects %v, want KServe's label serving.kserve.io/inferenceservice: %s", pm.Spec.Selector.MatchLabels, isvc.Name)
	}
	if e := pm.Spec.PodMetricsEndpoints; len(e) != 1 || e[0].PortNumber == nil || int(*e[0].PortNumber) != rest || e[0].Path != "/metrics" {
		t.Errorf("PodMonitor endpoints %+v, want port %d, /metrics", e, rest)
	}
	m := isvc.Spec.Predictor.Model
	if m == nil || m.Runtime == nil || *m.Runtime != rt.Name {
		t.Fatalf("InferenceService predictor model %+v, want runtime %s", m, rt.Name)
	}
	if !slices.ContainsFunc(rt.Spec.SupportedModelFormats, func(f supportedModelFormat) bool { return f.Name == m.ModelFormat.Name }) {
		t.Errorf("model format %q is not one the runtime supports", m.ModelFormat.Name)
	}
	if m.ProtocolVersion == nil || !slices.Contains(rt.Spec.ProtocolVersions, *m.ProtocolVersion) || *m.ProtocolVersion != "v2" {
		t.Errorf("protocol %v, runtime's %v: want v2, which the runtime lists", m.ProtocolVersion, rt.Spec.ProtocolVersions)
	}
	if m.StorageURI == nil || !strings.Contains(*m.StorageURI, "://") {
		t.Errorf("storageUri %v", m.StorageURI)
	}
}

// jobEnv are the variables dresim reads as a Kubernetes Indexed Job's pod
// (cmd/dresim/shardenv.go); the live test proves it reads them.
var jobEnv = []string{"JOB_COMPLETION_INDEX", "DRESIM_SHARD_COUNT"}

// completionIndexPath is where the Job controller puts a pod's index.
const completionIndexPath = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

// sweepJobs returns the sweep's Indexed Job and merge Job, checked
// against each other, the image and the shared volume; the live test runs
// them.
func sweepJobs(t *testing.T) (job, merge *batchv1.Job) {
	t.Helper()
	objs := manifests(t)
	im := readDockerfile(t)
	job = get[batchv1.Job](t, objs, "sweep/job.yaml")
	merge = get[batchv1.Job](t, objs, "sweep/merge-job.yaml")
	pvc := get[corev1.PersistentVolumeClaim](t, objs, "sweep/pvc.yaml")
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Fatal("the sweep Job is not Indexed")
	}
	n := *job.Spec.Completions
	if p := job.Spec.Parallelism; p == nil || *p < 1 || *p > n {
		t.Errorf("parallelism %v of %d completions", p, n)
	}
	if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		t.Errorf("PersistentVolumeClaim %s access modes %v: shards on several nodes need ReadWriteMany", pvc.Name, pvc.Spec.AccessModes)
	}
	for _, j := range []*batchv1.Job{job, merge} {
		pod := j.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Fatalf("Job %s: %d containers", j.Name, len(pod.Containers))
		}
		c := pod.Containers[0]
		where := "Job " + j.Name
		checkImage(t, where, c)
		checkSecurity(t, where, pod.SecurityContext, c, im)
		checkResources(t, where, c)
		if pod.SecurityContext.FSGroup == nil || strconv.FormatInt(*pod.SecurityContext.FSGroup, 10) != strings.Split(im.user, ":")[1] {
			t.Errorf("%s: fsGroup %v, want the image's group, which must write the volume", where, pod.SecurityContext.FSGroup)
		}
		if !slices.Equal(c.Command, []string{"/usr/local/bin/dresim"}) {
			t.Errorf("%s: command %q, want the image's dresim", where, c.Command)
		}
		if len(pod.Volumes) != 1 || pod.Volumes[0].PersistentVolumeClaim == nil || pod.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name ||
			len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != pod.Volumes[0].Name {
			t.Errorf("%s: want the claim %s mounted", where, pvc.Name)
		}
	}
	c := job.Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
		if !slices.Contains(jobEnv, e.Name) && !slices.Contains(goRuntimeEnv, e.Name) {
			t.Errorf("env %s: dresim does not read it", e.Name)
		}
	}
	if e := env["JOB_COMPLETION_INDEX"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != completionIndexPath {
		t.Errorf("JOB_COMPLETION_INDEX %+v, want the pod's %s", e, completionIndexPath)
	}
	if v := env["DRESIM_SHARD_COUNT"].Value; v != strconv.Itoa(int(n)) {
		t.Errorf("DRESIM_SHARD_COUNT %q, but the Job has %d completions", v, n)
	}
	if len(c.Args) < 2 || c.Args[0] != "run" {
		t.Fatalf("Job %s args %q, want run SWEEP ...", job.Name, c.Args)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "configs", "sweeps", c.Args[1]+".yaml")); err != nil {
		t.Errorf("the Job runs sweep %q, which the image does not have: %v", c.Args[1], err)
	}
	out, _ := argValue(c.Args, "o")
	if !strings.Contains(out, "$(JOB_COMPLETION_INDEX)") || !strings.HasPrefix(out, c.VolumeMounts[0].MountPath+"/") {
		t.Errorf("-o %q: want a directory per index ($(JOB_COMPLETION_INDEX)) on the volume %s", out, c.VolumeMounts[0].MountPath)
	}
	ma := merge.Spec.Template.Spec.Containers[0].Args
	var wantDirs []string
	for k := range n {
		wantDirs = append(wantDirs, strings.ReplaceAll(out, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(int(k))))
	}
	if len(ma) < 3 || ma[0] != "merge" || !slices.Equal(ma[3:], wantDirs) {
		t.Errorf("merge args %q, want merge -o DIR and the %d shard directories %q", ma, n, wantDirs)
	}
	return job, merge
}

// TestSweepJobManifests checks the sweep's Jobs without running them.
func TestSweepJobManifests(t *testing.T) { sweepJobs(t) }
