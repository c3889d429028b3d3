// Package e2e tests rnnserve from the outside, as an operator and its
// clients run it: it builds the real server binary (cmd/serve) and
//
//   - TestConformance drives it with a third-party Triton client,
//     github.com/sunhailin-Leo/triton-service-go/v2 (a Go module the
//     proxy serves; go.mod pins it, so CI fetches it like any
//     dependency), through every transport the suite knows (HTTP today;
//     a gRPC transport plugs into the same transport interface): health,
//     server and model metadata, infer with JSON and binary tensors,
//     BYTES tensors, sequences, statistics and model configuration
//     (parsed strictly into Triton's own protobuf messages), repository
//     index/load/unload, and streamed generation (Server-Sent Events read
//     with github.com/tmaxmax/go-sse);
//   - TestDashboardQueries starts it next to a real Prometheus that
//     scrapes it with the repository's scrape config (configs/prometheus),
//     drives infer, sequence and generate traffic, and checks that every
//     query of every Grafana dashboard in configs/grafana/dashboards
//     returns data.
//
// The package has no code of its own, only tests. The Prometheus tests
// need Prometheus at /usr/bin/prometheus and promtool at /usr/bin/promtool
// (Debian's package prometheus): without them they skip, or fail when the
// environment variable CI is set, since CI installs the package.
// docs/monitoring.md describes the dashboards the tests check.
package e2e
