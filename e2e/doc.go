// Package e2e tests rnnserve from the outside, as an operator runs it: it
// builds the real server binary (cmd/serve), starts it on a loopback port
// next to a real Prometheus that scrapes it with the repository's scrape
// config (configs/prometheus), drives infer, sequence and generate traffic,
// and checks that every query of every Grafana dashboard in
// configs/grafana/dashboards returns data.
//
// The package has no code of its own, only tests. They need Prometheus at
// /usr/bin/prometheus and promtool at /usr/bin/promtool (Debian's package
// prometheus): without them they skip, or fail when the environment
// variable CI is set, since CI installs the package. docs/monitoring.md
// describes the dashboards the tests check.
package e2e
