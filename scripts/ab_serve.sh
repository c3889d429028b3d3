#!/usr/bin/env bash
# Paired A/B of two serve builds under the same load: both serve the
# bundled bytelm at once (idle while the other is driven), and
# cmd/loadgen drives each in turn at every client count, round after
# round, the order swapped every round (A B, B A, ...), so that whatever
# else the machine does falls on both alike. Each run reports requests/s,
# p50 and p99 at the client and the server's CPU time per request
# (loadgen -server-pid, from /proc over the measured window); the summary
# gives each build's median and the paired ratios A/B round by round (for
# CPU per request and p99: above 1, B is cheaper or faster). It first
# prints what each process chose for a lone request while it loaded.
#
#   go build -o /tmp/a/serve ./cmd/serve     # on the old commit
#   go build -o /tmp/b/serve ./cmd/serve     # on the new one
#   bash scripts/ab_serve.sh /tmp/a/serve /tmp/b/serve [rounds] [duration] [clients...]
#
# Defaults: 4 rounds of 4s at 8 and 64 clients. AB_PORT (default 18390)
# is A's port; B takes the next.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
	echo "usage: $0 serve-A serve-B [rounds] [duration] [clients...]" >&2
	exit 2
fi
A=$(realpath "$1")
B=$(realpath "$2")
rounds=${3:-4}
dur=${4:-4s}
shift $(( $# < 4 ? $# : 4 ))
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(8 64)
port=${AB_PORT:-18390}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/loadgen" ./cmd/loadgen
mkdir -p "$tmp/repo"
cp -r models/bundled/bytelm "$tmp/repo/"
ready() {
	for _ in $(seq 600); do
		curl -sf "127.0.0.1:$1/v2/health/ready" >/dev/null && return 0
		sleep 0.1
	done
	echo "ab_serve: the server on port $1 is not ready" >&2
	exit 1
}
# One process loads at a time: a load times its schedules on the host, and
# two loads timing at once each see the other's work.
"$A" -listen "127.0.0.1:$port" -grpc-listen off -model-repository "$tmp/repo" 2>"$tmp/a.log" &
pids+=($!)
ready "$port"
"$B" -listen "127.0.0.1:$((port + 1))" -grpc-listen off -model-repository "$tmp/repo" 2>"$tmp/b.log" &
pids+=($!)
ready $((port + 1))
# What each process chose while it loaded: its timing decides whether a
# lone request runs across both cores, and two processes of one build can
# choose differently on a busy machine (p99 and CPU then differ by more
# than most changes do).
for i in 0 1; do
	name=$([ "$i" = 0 ] && echo A || echo B)
	curl -s "127.0.0.1:$((port + i))/v2/models/bytelm" | python3 -c 'import json, sys; r = json.load(sys.stdin)["rnn"]["schedule_reason"]; print(sys.argv[1] + ": " + r[r.find("a request that finds"):])' "$name"
done
echo "load average before: $(cat /proc/loadavg) ($(date -u +%H:%M) UTC)"
echo "| round | build | clients | requests/s | p50 µs | p99 µs | server CPU µs/request |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
	for c in "${counts[@]}"; do
		order=(A B)
		if [ $((r % 2)) = 0 ]; then order=(B A); fi
		for s in "${order[@]}"; do
			if [ "$s" = A ]; then i=0; else i=1; fi
			line=$("$tmp/loadgen" -url "http://127.0.0.1:$((port + i))" -clients "$c" -duration "$dur" -server-pid "${pids[$i]}" | tail -1)
			# loadgen's row: | setup | model | schedule | clients | req/s | tokens/s | p50 | p90 | p99 | ... | CPU µs/request |
			echo "$line" | awk -F'|' -v r="$r" -v s="$s" -v c="$c" '{gsub(/ /, ""); printf "| %s | %s | %s | %s | %s | %s | %s |\n", r, s, c, $6, $8, $10, $15}'
		done
	done
done | tee "$tmp/runs.md"
echo "load average after: $(cat /proc/loadavg) ($(date -u +%H:%M) UTC)"
echo
echo "| clients | A CPU µs/req (median) | B | A/B CPU, round by round | A p99 µs (median) | B | A/B p99, round by round | A req/s (median) | B |"
echo "|---:|---:|---:|---|---:|---:|---|---:|---:|"
awk -F'|' '$2 ~ /[0-9]/ {
	gsub(/ /, "")
	r = $2; b = $3; c = $4
	rps[c, b, r] = $5; p99[c, b, r] = $7; cpu[c, b, r] = $8
	if (!(c in seen)) { seen[c] = 1; order[++n] = c }
	if (r > rounds) rounds = r
}
function median(arr, c, b,    v, k, i, j, t) {
	k = 0
	for (i = 1; i <= rounds; i++) v[++k] = arr[c, b, i] + 0
	for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
	return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
}
function ratios(arr, c,    s, i) {
	s = ""
	for (i = 1; i <= rounds; i++) s = s (i > 1 ? ", " : "") sprintf("%.2f", arr[c, "A", i] / arr[c, "B", i])
	return s
}
END {
	for (i = 1; i <= n; i++) {
		c = order[i]
		printf "| %s | %.0f | %.0f | %s | %.0f | %.0f | %s | %.1f | %.1f |\n", c, median(cpu, c, "A"), median(cpu, c, "B"), ratios(cpu, c),
			median(p99, c, "A"), median(p99, c, "B"), ratios(p99, c), median(rps, c, "A"), median(rps, c, "B")
	}
}' "$tmp/runs.md"
