// Package e2e tests rnnserve from the outside, as an operator and its
// clients run it: it builds the real server binary (cmd/serve) and
//
//   - TestConformance drives it with a third-party Triton client,
//     github.com/sunhailin-Leo/triton-service-go/v2 (a Go module the
//     proxy serves; go.mod pins it, so CI fetches it like any
//     dependency), over HTTP and over gRPC (the same client on a
//     grpc.ClientConn, grpc_test.go): health,
//     server and model metadata, infer with JSON and binary tensors,
//     BYTES tensors, sequences, statistics and model configuration
//     (parsed strictly into Triton's own protobuf messages), repository
//     index/load/unload, and streamed generation (Server-Sent Events read
//     with github.com/tmaxmax/go-sse);
//   - TestGRPCProtocol checks what only gRPC has: the standard health
//     service, server reflection used as grpcurl uses it
//     (github.com/jhump/protoreflect/v2), every message and field of the
//     reflected schema against Triton's own (compiled into the client
//     module), the message size limit, bad input and its codes, and an
//     unload that ends a live sequence;
//   - TestStickySequences runs three replicas behind a real nginx
//     configured by the recipe deploy/nginx/rnnserve.conf (a consistent
//     hash of the X-Sequence-Id header): every step of every sequence
//     lands on one replica and matches a separate server's outputs, and
//     when a replica is killed its sequences get 404 "unknown sequence"
//     while the others go on and new ones start on the live replicas;
//   - TestDashboardQueries starts it next to a real Prometheus that
//     scrapes it with the repository's scrape config (configs/prometheus),
//     drives infer, sequence and generate traffic, and checks that every
//     query of every Grafana dashboard in configs/grafana/dashboards
//     returns data.
//
// The package has no code of its own, only tests. The Prometheus tests
// need Prometheus at /usr/bin/prometheus and promtool at /usr/bin/promtool
// (Debian's package prometheus), the sticky-sequence test nginx at
// /usr/sbin/nginx (Debian's package nginx): without them they skip, or
// fail when the environment variable CI is set, since CI installs the
// packages.
// docs/monitoring.md describes the dashboards the tests check.
package e2e
