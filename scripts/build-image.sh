#!/usr/bin/env bash
# Builds the binaries of rnnserve's container image into OUTDIR and checks
# them. The Dockerfile's build stage runs this script, and so does the test
# in deploy/ (go test ./deploy/), so the image's binaries are built here the
# way CI builds them:
#
#   - CGO_ENABLED=0: static binaries, which need no libc in the image;
#   - -trimpath and -ldflags '-s -w': no local paths, no symbol table;
#   - serve (the bundled models are embedded in it) and dresim (sweeps);
#   - serve's version and commit set with -ldflags -X, for builds whose Go
#     build information has none (no .git, as in the container build):
#     from RNNSERVE_VERSION and RNNSERVE_COMMIT when set (the Dockerfile's
#     build arguments), else from git. serve prefers what go build stamps
#     from the VCS (serve -version; docs/configuration.md).
#
# Then it checks that each binary is static (no ELF interpreter, no shared
# libraries: readelf, from binutils) and that each starts and prints its
# usage (-h, exit status 0), and lays out OUTDIR/rootfs, everything the
# image holds (its runtime stage is FROM scratch and copies this tree):
#
#   usr/local/bin/serve, dresim      the binaries (serve embeds the bundled models)
#   etc/passwd, etc/group            root, and the user nonroot, 65532:65532
#   etc/ssl/certs/ca-certificates.crt  this machine's CA bundle (Debian's ca-certificates)
#   rnnserve/configs/sweeps/         dresim's sweep files; /rnnserve is the working directory
#   models/                          the mount point of a model repository (a volume)
#
# Usage: [RNNSERVE_VERSION=V] [RNNSERVE_COMMIT=C] scripts/build-image.sh OUTDIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."

version=${RNNSERVE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || true)}
commit=${RNNSERVE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
serve_ldflags='-s -w'
for kv in "version=$version" "commit=$commit"; do
	case ${kv#*=} in
	"") ;;
	*[!A-Za-z0-9._+~-]*) echo "$0: serve's ${kv%%=*} \"${kv#*=}\": want letters, digits and . _ + ~ -" >&2; exit 1 ;;
	*) serve_ldflags+=" -X main.$kv" ;;
	esac
done

export CGO_ENABLED=0
go build -trimpath -ldflags="$serve_ldflags" -o "$out/serve" ./cmd/serve
go build -trimpath -ldflags='-s -w' -o "$out/dresim" ./cmd/dresim

command -v readelf >/dev/null || { echo "$0: readelf (binutils) is needed to check the binaries are static" >&2; exit 1; }
for cmd in serve dresim; do
	if readelf -lW "$out/$cmd" | grep -q 'INTERP'; then
		echo "$0: $cmd has an ELF interpreter: it is not static" >&2; exit 1
	fi
	if readelf -dW "$out/$cmd" | grep -q 'NEEDED'; then
		echo "$0: $cmd needs shared libraries: it is not static" >&2; exit 1
	fi
done

# serve prints its flags on -h; dresim its commands.
usage=$("$out/serve" -h 2>&1) || { echo "$0: serve -h failed:" >&2; echo "$usage" >&2; exit 1; }
case $usage in
*-listen*) ;;
*) echo "$0: serve -h does not print its flags:" >&2; echo "$usage" >&2; exit 1 ;;
esac
"$out/serve" -version
usage=$("$out/dresim" -h 2>&1) || { echo "$0: dresim -h failed:" >&2; echo "$usage" >&2; exit 1; }
case $usage in
*"dresim run"*) ;;
*) echo "$0: dresim -h does not print its usage:" >&2; echo "$usage" >&2; exit 1 ;;
esac
# The image's tree.
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || { echo "$0: $ca not found: install Debian's ca-certificates" >&2; exit 1; }
root="$out/rootfs"
rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/rnnserve/configs" "$root/models"
cp "$out/serve" "$out/dresim" "$root/usr/local/bin/"
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
cp -r configs/sweeps "$root/rnnserve/configs/sweeps"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
chmod -R u=rwX,go=rX "$root"
chmod 0755 "$root/usr/local/bin/serve" "$root/usr/local/bin/dresim"
echo "built static serve and dresim in $out, and the image's tree in $root"
