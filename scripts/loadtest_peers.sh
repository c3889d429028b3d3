#!/usr/bin/env bash
# Load test of rnnserve beside two serving peers of the same model: the
# bundled bytelm served by a PyTorch service (FastAPI and uvicorn,
# scripts/peers/torch_serve.py) and an ONNX Runtime service (Node.js http
# and onnxruntime-node, scripts/peers/ort_serve.js), all three answering the
# same KServe v2 infer request with the same JSON, driven by the same load
# generator (cmd/loadgen) at 1, 8 and 64 clients: one sequence of 32 random
# tokens asking for the final hidden state.
#
#   bash scripts/loadtest_peers.sh [duration] [rounds] [cores]
#
# duration: each run (default 5s); rounds: how often each server runs at
# each client count (default 2), and 1 client runs max(rounds, 4) times for
# the run-to-run spread; cores: the cores everything runs on (default all:
# the servers, their thread pools and the load generator share them, as on
# a user's machine; fewer pins every process to cores 0..cores-1 with
# taskset). Runs are interleaved: each round runs every client count on
# each server in turn, the servers' order rotating from round to round.
# Before any timing, both peers' outputs must equal rnnserve's within 1e-4
# (scripts/peers/compare.py). Prints the load average before and after,
# every run's row, with the server's CPU time per request (loadgen
# -server-pid: the server process's user and system time, every thread,
# from /proc/PID/stat over the run's measured window; the load generator's
# own is not counted), the side-by-side table (scripts/peers/summarize.py),
# and for each rnnserve run what the server did, from its own statistics:
# time queued and computing per request, solo and wide plans, batched
# steps and their rows (scripts/peers/serverstats.py).
#
# Needs Debian's python3-torch, python3-fastapi and python3-uvicorn
# (/usr/bin/python3), Node.js, and onnxruntime-node in ORT_MODULES
# (default .scratch/ort/node_modules, gitignored; installed there with
# npm install --ignore-scripts if missing). PEERS_PORT (default 18280) is
# rnnserve's port; the ONNX Runtime and PyTorch services take the next two.
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-5s}
rounds=${2:-2}
ncpu=$(nproc)
cores=${3:-$ncpu}
port=${PEERS_PORT:-18280}
ort_modules=${ORT_MODULES:-$PWD/.scratch/ort/node_modules}
python=${PYTHON:-/usr/bin/python3}
if ! [[ $rounds =~ ^[1-9][0-9]*$ && $cores =~ ^[1-9][0-9]*$ ]] || [ "$cores" -gt "$ncpu" ]; then
	echo "usage: $0 [duration] [rounds >= 1] [cores 1..$ncpu]" >&2
	exit 2
fi
pin=()
if [ "$cores" -lt "$ncpu" ]; then
	pin=(taskset -c "0-$((cores - 1))")
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -d "$ort_modules/onnxruntime-node" ]; then
	scratch=$(dirname "$ort_modules")
	echo "loadtest_peers: installing onnxruntime-node into $scratch" >&2
	mkdir -p "$scratch"
	(cd "$scratch" && npm install --ignore-scripts --no-audit --no-fund onnxruntime-node >&2)
fi
go build -o "$tmp/serve" ./cmd/serve
go build -o "$tmp/loadgen" ./cmd/loadgen
mkdir -p "$tmp/repo"
cp -r models/bundled/bytelm "$tmp/repo/"
"$python" scripts/peers/export_onnx.py --out "$tmp/onnx"

ready() { # ready PORT NAME PID LOG
	for _ in $(seq 600); do
		curl -sf "127.0.0.1:$1/v2/health/ready" >/dev/null && return 0
		if ! kill -0 "$3" 2>/dev/null; then
			echo "loadtest_peers: $2 exited:" >&2
			cat "$4" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "loadtest_peers: $2 not ready after 60s" >&2
	exit 1
}
for p in "$port" $((port + 1)) $((port + 2)); do
	if curl -s -o /dev/null "127.0.0.1:$p/"; then
		echo "loadtest_peers: port $p is taken (set PEERS_PORT)" >&2
		exit 1
	fi
done

echo "load average before: $(cat /proc/loadavg) ($ncpu cores; running on $cores)"
# rnnserve first and alone: it times its schedule choice while it loads.
"${pin[@]}" "$tmp/serve" -listen "127.0.0.1:$port" -grpc-listen off -model-repository "$tmp/repo" 2>"$tmp/serve.log" &
pids+=($!)
ready "$port" rnnserve "${pids[-1]}" "$tmp/serve.log"
NODE_PATH=$ort_modules "${pin[@]}" node scripts/peers/ort_serve.js --model "$tmp/onnx" --threads "$cores" \
	--port $((port + 1)) 2>"$tmp/ort.log" &
pids+=($!)
ready $((port + 1)) "the ONNX Runtime service" "${pids[-1]}" "$tmp/ort.log"
"${pin[@]}" "$python" scripts/peers/torch_serve.py --cores "$cores" --port $((port + 2)) 2>"$tmp/torch.log" &
pids+=($!)
ready $((port + 2)) "the PyTorch service" "${pids[-1]}" "$tmp/torch.log"
cat "$tmp/ort.log" "$tmp/torch.log" >&2
curl -s "127.0.0.1:$port/v2/models/bytelm" | "$python" -c 'import json, sys; print("rnnserve:", json.load(sys.stdin)["rnn"]["schedule_reason"])' >&2

"$python" scripts/peers/compare.py --tolerance 1e-4 "http://127.0.0.1:$port" \
	"http://127.0.0.1:$((port + 1))" "http://127.0.0.1:$((port + 2))"

names=(rnnserve "ONNX Runtime" PyTorch)
urls=("http://127.0.0.1:$port" "http://127.0.0.1:$((port + 1))" "http://127.0.0.1:$((port + 2))")
header=true
for r in $(seq "$(( rounds > 4 ? rounds : 4 ))"); do
	counts=(1 8 64)
	if [ "$r" -gt "$rounds" ]; then counts=(1); fi
	for c in "${counts[@]}"; do
		for k in 0 1 2; do
			i=$(( (k + r - 1) % 3 ))
			if [ "$i" = 0 ]; then "$python" scripts/peers/serverstats.py snapshot "${urls[0]}" bytelm "$tmp/before.json"; fi
			"${pin[@]}" "$tmp/loadgen" -url "${urls[$i]}" -model bytelm -clients "$c" -steps 32 -duration "$dur" \
				-server-pid "${pids[$i]}" -label "${names[$i]} r$r" -header=$header | tee -a "$tmp/rows.md"
			header=false
			if [ "$i" = 0 ]; then
				"$python" scripts/peers/serverstats.py snapshot "${urls[0]}" bytelm "$tmp/after.json"
				"$python" scripts/peers/serverstats.py row "$tmp/before.json" "$tmp/after.json" --label "rnnserve r$r" \
					--clients "$c" --steps 32 >>"$tmp/stats.md"
			fi
		done
	done
done
echo "load average after: $(cat /proc/loadavg)"
echo
"$python" scripts/peers/summarize.py "$tmp/rows.md"
echo
echo "rnnserve's own statistics for its runs, per successful request (scripts/peers/serverstats.py):"
echo
"$python" scripts/peers/serverstats.py header
cat "$tmp/stats.md"
