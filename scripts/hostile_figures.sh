#!/bin/bash
# Measure how the model loader of a commit takes each hostile model file:
# its outcome, wall time and peak resident memory, one process per file
# under /usr/bin/time, in a virtual-memory limit of 8 GB and a 60 s
# timeout (a loader that allocates without bound or waits forever is
# stopped, and says so).
#
#   scripts/hostile_figures.sh COMMIT > rows.csv
#   scripts/hostile_figures.sh COMMIT DIR > rows.csv
#
# With DIR, the files and folders in DIR are measured instead (the
# hostile ONNX files: go run ./models/internal/onnxbuild/write DIR).
#
# prints the rows of docs/data/figures.csv (without the run column:
# subject,metric,value) for the files of models/testdata/hostile (written
# by scripts/model_files.py) and for four made here: a named pipe called
# model.pt, 256 MiB of zeros called model.safetensors, and a Hugging Face
# cache snapshot whose model.safetensors links into ../../blobs, opened by
# file and by folder. The hostile files are taken from the working tree,
# the loader from COMMIT.
set -euo pipefail
commit=${1:?usage: scripts/hostile_figures.sh COMMIT [DIR]}
only=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$root" archive "$commit" | tar -x -C "$work" --one-top-level=src
mkdir -p "$work/src/cmd/hostilemeasure"
cat > "$work/src/cmd/hostilemeasure/main.go" <<'EOF'
package main

import (
	"fmt"
	"os"
	"strings"

	"rnnserve/models"
)

// Opens one model file as the server would and prints the error's size
// and its first line.
func main() {
	p := os.Args[1]
	var err error
	if strings.Contains(p, "tree") {
		_, err = models.LoadTree(p)
	} else {
		_, err = models.Open(p)
	}
	if err == nil {
		fmt.Println("loaded")
		return
	}
	msg := err.Error()
	fmt.Printf("refused %d %s\n", len(msg), strings.SplitN(msg, "\n", 2)[0])
}
EOF
(cd "$work/src" && go build -o "$work/measure" ./cmd/hostilemeasure)

mkdir -p "$work/files" "$work/hf/blobs" "$work/hf/snapshots/r1"
if [ -n "$only" ]; then
	cp -r "$only"/. "$work/files/"
else
	cp "$root"/models/testdata/hostile/*.pt "$root"/models/testdata/hostile/*.safetensors "$root"/models/testdata/hostile/*.yaml "$work/files/"
	mkfifo "$work/files/model.pt"
	truncate -s 256M "$work/files/zeros.safetensors"
fi
cp "$root/models/testdata/golden/f16_safetensors_lstm/model.safetensors" "$work/hf/blobs/3a7bd3e2360a3d29"
ln -s ../../blobs/3a7bd3e2360a3d29 "$work/hf/snapshots/r1/model.safetensors"

measure() { # name path
	local out rc t kib msg outcome
	set +e
	out=$( (ulimit -v 8000000; timeout 60 /usr/bin/time -f "TIME %e %M" "$work/measure" "$2") 2>&1 )
	rc=$?
	set -e
	t=$(grep '^TIME ' <<<"$out" | awk '{print $2}' || true)
	kib=$(grep '^TIME ' <<<"$out" | awk '{print $3}' || true)
	msg=$(grep -v '^TIME ' <<<"$out" | grep -v '^Command' | tail -1 || true)
	case $rc in
	0)
		case $msg in
		loaded*) outcome="loaded" ;;
		refused*)
			len=$(awk '{print $2}' <<<"$msg")
			outcome="refused"
			if [ "$len" -gt 1000 ]; then outcome="refused, a message of $len bytes"; fi ;;
		esac ;;
	124) outcome="blocked; killed after 60 s"; t=""; kib="" ;;
	*)
		if grep -q 'stack overflow\|goroutine stack exceeds' <<<"$out"; then outcome="crashed: stack overflow"
		elif grep -q 'out of memory' <<<"$out"; then outcome="crashed: out of memory"
		else outcome="crashed: exit $rc"; fi ;;
	esac
	echo "\"$1\",outcome,\"$outcome\""
	[ -n "$t" ] && echo "\"$1\",seconds,$t"
	[ -n "$kib" ] && echo "\"$1\",peak MiB,$((kib / 1024))"
	return 0
}

for f in "$work"/files/*; do
	name=$(basename "$f")
	[ "$name" = model.pt ] && name="model.pt (a named pipe)"
	[ "$name" = zeros.safetensors ] && name="256 MiB of zeros"
	measure "$name" "$f"
done
if [ -z "$only" ]; then
	measure "Hugging Face snapshot, the file" "$work/hf/snapshots/r1/model.safetensors"
	measure "Hugging Face snapshot, the folder" "$work/hf/snapshots/r1"
fi
