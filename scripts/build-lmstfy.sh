#!/usr/bin/env bash
# build-lmstfy.sh: builds lmstfy's server (module github.com/bitleak/lmstfy,
# version LMSTFY_VERSION) from the Go module proxy into LMSTFY_BIN, unless
# a build of that version is there already, and prints LMSTFY_BIN's path.
# scripts/lmstfy-bench.sh runs lmstfy with it, and the import tests
# (server/app TestLmstfyImport*) write lmstfy's data with it.
#
# Environment:
#   LMSTFY_VERSION  lmstfy module version (default v1.0.16, the newest the
#                   proxy serves; it builds with Go 1.26 unchanged)
#   LMSTFY_BIN      the binary (default ~/.cache/kairos/lmstfy-server);
#                   rebuilt when its -v does not report LMSTFY_VERSION
#
# `go install …@version` cannot be used: it asks the proxy for the module's
# version list (to report deprecation), which the proxy may refuse; `go mod
# download` of the exact version does not. The module cache is read-only,
# so the build runs in a copy, with the module's own go.mod and go.sum
# (complete: -mod=readonly builds it).
set -euo pipefail

LMSTFY_MODULE=github.com/bitleak/lmstfy
LMSTFY_VERSION=${LMSTFY_VERSION:-v1.0.16}
LMSTFY_BIN=${LMSTFY_BIN:-$HOME/.cache/kairos/lmstfy-server}

if "$LMSTFY_BIN" -v 2>/dev/null | grep -qx "version: $LMSTFY_VERSION"; then
	echo "$LMSTFY_BIN"
	exit 0
fi

echo "build-lmstfy: building lmstfy $LMSTFY_VERSION from the Go module proxy into $LMSTFY_BIN" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
info=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$LMSTFY_MODULE@$LMSTFY_VERSION")
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
commit=$(sed -n 's/^[[:space:]]*"Hash": "\(.*\)",*$/\1/p' <<<"$info")
[ -d "$dir" ] || { echo "build-lmstfy: go mod download gave no directory:" >&2; echo "$info" >&2; exit 1; }
src="$work/lmstfy-src"
cp -r "$dir" "$src"
chmod -R u+w "$src"
mkdir -p "$(dirname "$LMSTFY_BIN")"
# A unique temporary name: two builds at once (two test binaries) each
# rename their own complete file into place.
tmp="$LMSTFY_BIN.tmp.$$"
(cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -trimpath -o "$tmp" \
	-ldflags "-X $LMSTFY_MODULE/version.Version=$LMSTFY_VERSION -X $LMSTFY_MODULE/version.BuildCommit=${commit:-unknown}" \
	./server)
mv "$tmp" "$LMSTFY_BIN"
echo "$LMSTFY_BIN"
