#!/usr/bin/env bash
# Soak test of the server under abuse (docs/load.md, "Holding under
# abuse"): builds serve and the soak client (scripts/soak), serves the
# bundled models with the default configuration and prints three tables:
#
#   1. 300 clients for 60 s: infer, generate (whole and streamed),
#      three-request sequences and 10% near-limit bodies;
#   2. 300 clients for 60 s posting only near-limit bodies (8 MiB less
#      16 KiB, valid requests padded with JSON white space);
#   3. SIGTERM after 10 s of the first mix at 64 clients, with the default
#      lame-duck period (5 s): client errors of the requests sent before
#      SIGTERM + 5 s and after, readiness and the exit code;
#   4. the attacks (below).
#
#   bash scripts/soak.sh [duration]     # default 60s for the load runs
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-60s}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/serve" ./cmd/serve
go build -o "$bin/soak" ./scripts/soak
echo "loadavg at start: $(cat /proc/loadavg)"
"$bin/soak" -serve "$bin/serve" -args "-grpc-listen off" -clients 300 -near 0.1 -duration "$dur" -label "mixed + 10% near-limit"
"$bin/soak" -serve "$bin/serve" -args "-grpc-listen off" -clients 300 -near 1 -duration "$dur" -label "near-limit only" -header=false
echo
"$bin/soak" -serve "$bin/serve" -args "-grpc-listen off" -clients 64 -near 0.1 -sigterm-after 10s -lame-duck 5s -duration 90s -label "SIGTERM at 10 s"
echo
# 4. every attack of scripts/soak/attack.go for 15 s each against one
#    server (docs/limits.md), then SIGTERM with 24
#    ModelStreamInfer streams kept open.
"$bin/soak" -serve "$bin/serve" -attack all -attack-for 15s
"$bin/soak" -serve "$bin/serve" -attack sigterm-streams -lame-duck 5s
echo "loadavg at end: $(cat /proc/loadavg)"
