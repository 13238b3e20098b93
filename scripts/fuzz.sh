#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target of the module (or of the packages given
# as arguments) for a short time each, one after the other:
#
#   go test -run '^$' -fuzz '^FuzzX$' -fuzztime 5s ./pkg
#
# FUZZTIME overrides the time per target (default 5s). A crash writes the
# failing input to the package's testdata/fuzz/FuzzX/ directory, which then
# runs as a regression seed with every `go test`; commit it with the fix.
#
# Go 1.26's fuzz coordinator sometimes fails a run with a bare "context
# deadline exceeded" when -fuzztime expires (golang/go#75804, fixed in Go
# 1.27): no input is written and nothing crashed. Such a run is retried
# once and, if it flakes again, reported as a warning, not a failure.
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	pkgs=(./...)
fi

# The targets are read from the sources, not from `go test -list`, which
# compiles and links every package's test binary without -race (so none of
# `make test`'s earlier builds serve it) only to print their names. `go
# list` applies the build constraints and names each package's test files;
# a target is a top-level `func FuzzX(f *testing.F)`, the form `go test
# -fuzz` runs.
list_targets() {
	local pkg dir files f
	while read -r pkg dir files; do
		for f in $files; do
			sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\).*/\1/p' "$dir/$f"
		done | sort -u | sed "s|^|$pkg |"
	done < <("$GO" list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' "${pkgs[@]}")
}
mapfile -t targets < <(list_targets)

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found in ${pkgs[*]}" >&2
	exit 1
fi

failed=()
flaked=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	for attempt in 1 2; do
		echo "fuzz.sh: $pkg $name ($FUZZTIME)"
		if "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
			break
		fi
		if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written to' "$log"; then
			if [ "$attempt" -eq 1 ]; then
				echo "fuzz.sh: $name: coordinator deadline race (golang/go#75804), retrying"
				continue
			fi
			echo "fuzz.sh: WARNING: $name hit the coordinator deadline race twice; no input failed" >&2
			flaked+=("$pkg $name")
			break
		fi
		cat "$log"
		failed+=("$pkg $name")
		break
	done
done

if [ ${#flaked[@]} -gt 0 ]; then
	echo "fuzz.sh: ${#flaked[@]} target(s) flaked on the coordinator deadline race"
fi
# The plain summary line CI readers understand: "word: N passed, N failed".
echo "fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz.sh: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
