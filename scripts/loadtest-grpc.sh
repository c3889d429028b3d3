#!/usr/bin/env bash
# gRPC against REST on the same server: the bundled byte LM and the
# hidden-512 LSTM of configs/loadtest, one client (single-request latency)
# and 64 clients (throughput), each request one sequence of 32 random
# tokens asking for the final hidden state. Three ways per client count,
# interleaved and repeated (A B C A B C) so that load from other work on
# the machine falls on all three alike:
#   REST JSON     JSON in, JSON out (loadgen's default)
#   REST binary   JSON in, the output as binary tensor data
#   gRPC          ModelInfer, typed INT64 in, raw_output_contents out
# The floor column is the median round trip of the cheapest call of the
# protocol (GET /v2/health/live, gRPC ServerLive). Prints the load average
# before and after, and one Markdown table.
#
#   bash scripts/loadtest-grpc.sh [duration] [repeats]   # default 4s per row, 2 repeats
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-4s}
reps=${2:-2}
bin=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin/serve" ./cmd/serve
go build -o "$bin/loadgen" ./cmd/loadgen
repo=$bin/repo
mkdir -p "$repo"
cp -r configs/loadtest/lstm512 models/bundled/bytelm "$repo/"
http=127.0.0.1:18090
grpc=127.0.0.1:18091
echo "load average before: $(cat /proc/loadavg)"
header=true
for model in bytelm lstm512; do
	"$bin/serve" -listen "$http" -grpc-listen "$grpc" -model-repository "$repo" 2>"$bin/serve.log" &
	pid=$!
	for _ in $(seq 300); do curl -sf "$http/v2/health/ready" >/dev/null && break; sleep 0.1; done
	for clients in 1 64; do
		for rep in $(seq "$reps"); do
			"$bin/loadgen" -url "http://$http" -model "$model" -clients "$clients" -steps 32 -duration "$dur" \
				-label "REST JSON ($rep)" -header=$header
			header=false
			"$bin/loadgen" -url "http://$http" -model "$model" -clients "$clients" -steps 32 -duration "$dur" \
				-binary -label "REST binary ($rep)" -header=false
			"$bin/loadgen" -url "http://$http" -grpc "$grpc" -model "$model" -clients "$clients" -steps 32 -duration "$dur" \
				-label "gRPC ($rep)" -header=false
		done
	done
	kill -TERM "$pid"
	wait "$pid"
done
echo "load average after: $(cat /proc/loadavg)"
