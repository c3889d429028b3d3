#!/usr/bin/env bash
# Load test of the server: the bundled byte LM, a hidden-512 2-layer LSTM
# whose weights fit in the last-level cache and a hidden-2048 one whose
# layers' weights do not (configs/loadtest), 1, 8 and 64 concurrent clients,
# cellular batching on and off. Prints one Markdown table; the engine column
# is the same request's plan timed in-process (no HTTP, no JSON), the HTTP
# floor the round trip of GET /v2/health/live.
#
#   bash scripts/loadtest.sh [duration]      # default 5s per row, 8x that for lstm2048
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-5s}
bin=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin/serve" ./cmd/serve
go build -o "$bin/loadgen" ./cmd/loadgen
repo=$bin/repo
mkdir -p "$repo"
cp -r configs/loadtest/lstm512 configs/loadtest/lstm2048 "$repo/"
cp -r models/bundled/bytelm "$repo/"
header=true
for model in bytelm lstm512 lstm2048; do
	d=$dur
	if [ "$model" = lstm2048 ]; then
		# A batch-1 request takes a quarter second here: 64 queued clients
		# need half a minute to show a steady rate.
		d=$(awk -v d="${dur%s}" 'BEGIN { print 8 * d "s" }')
	fi
	for batching in on off; do
		"$bin/serve" -listen 127.0.0.1:18080 -grpc-listen off -model-repository "$repo" -batching-enabled "$batching" 2>"$bin/serve.log" &
		pid=$!
		for _ in $(seq 300); do curl -sf 127.0.0.1:18080/v2/health/ready >/dev/null && break; sleep 0.1; done
		"$bin/loadgen" -url http://127.0.0.1:18080 -model "$model" -clients 1,8,64 -steps 32 \
			-duration "$d" -repo "$repo" -label "batching $batching" -header=$header
		header=false
		kill -TERM "$pid"
		wait "$pid"
	done
done
