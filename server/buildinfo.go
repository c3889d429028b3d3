package server

import (
	"cmp"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo describes the binary a server runs in; its owner reads it
// (cmd/serve: from the Go build information, or what the build's -ldflags
// set) and hands it over in Deps. It is the rnnserve_build_info metric's
// labels.
type BuildInfo struct {
	Version   string // the binary's version: a module version or the build's own name for it
	Commit    string // the VCS revision it was built from
	GoVersion string // the Go release that built it
}

// registerBuildInfo registers rnnserve_build_info, always 1, with b as
// its labels: empty fields are "unknown" (the Go release: this one's).
func registerBuildInfo(reg *prometheus.Registry, b BuildInfo) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rnnserve_build_info",
		Help: "1, labelled with the running binary's version, VCS commit and Go release.",
		ConstLabels: prometheus.Labels{
			"version":   cmp.Or(b.Version, "unknown"),
			"commit":    cmp.Or(b.Commit, "unknown"),
			"goversion": cmp.Or(b.GoVersion, runtime.Version()),
		},
	})
	g.Set(1)
	reg.MustRegister(g)
}
