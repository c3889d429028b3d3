package deploy

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite monitoring/grafana-dashboard.yaml from configs/grafana/dashboards")

// dashboardFile is the Grafana dashboard, which the ConfigMap carries.
var dashboardFile = filepath.Join(repoRoot, "configs", "grafana", "dashboards", "rnnserve.json")

const dashboardConfigMap = "monitoring/grafana-dashboard.yaml"

// dashboardYAML is the ConfigMap holding json, the dashboard file, as
// Grafana's dashboard sidecar (kube-prometheus-stack) picks it up.
func dashboardYAML(json string) string {
	var b strings.Builder
	b.WriteString(`# Generated from configs/grafana/dashboards/rnnserve.json by
#   go test ./deploy/ -run TestDashboardConfigMap -update
# (the test fails when the two differ). Grafana's dashboard sidecar, as
# kube-prometheus-stack runs it, loads ConfigMaps labelled
# grafana_dashboard: "1"; the dashboard's $datasource variable starts on
# Grafana's default Prometheus datasource (docs/deploy.md).
apiVersion: v1
kind: ConfigMap
metadata:
  name: rnnserve-grafana-dashboard
  labels:
    app.kubernetes.io/name: rnnserve
    grafana_dashboard: "1"
data:
  rnnserve.json: |
`)
	for _, line := range strings.SplitAfter(json, "\n") {
		if line != "" {
			b.WriteString("    " + line)
		}
	}
	return b.String()
}

// TestDashboardConfigMap checks that the ConfigMap holds the dashboard
// file byte for byte (decoded strictly, as every manifest), so the two
// cannot drift; -update rewrites it.
func TestDashboardConfigMap(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(data), "\n") || strings.HasSuffix(string(data), "\n\n") {
		t.Fatalf("%s must end with exactly one newline, as a YAML literal block keeps it", dashboardFile)
	}
	path := filepath.Join(manifestDir, filepath.FromSlash(dashboardConfigMap))
	if *update {
		if err := os.WriteFile(path, []byte(dashboardYAML(string(data))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cm := get[corev1.ConfigMap](t, manifests(t), dashboardConfigMap)
	if got := cm.Data["rnnserve.json"]; got != string(data) {
		t.Errorf("%s differs from %s: run go test ./deploy/ -run TestDashboardConfigMap -update", dashboardConfigMap, dashboardFile)
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("%s: no grafana_dashboard label for Grafana's sidecar", dashboardConfigMap)
	}
}
