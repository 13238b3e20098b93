#!/usr/bin/env bash
# install-chromium.sh makes sure a headless-capable Chromium is on PATH for
# the dashboard's browser tests (server/ui/e2e), and that the tests' npm
# packages (playwright-core, pinned by server/ui/e2e/package-lock.json) are
# installed with `npm ci`.
#
# It installs Debian's chromium package with apt-get (through sudo when not
# root) when neither chromium nor chromium-browser is on PATH, and runs
# `npm ci` in server/ui/e2e when its node_modules is missing or older than
# the lock file. Playwright's own browser download is never used: the tests
# drive the system Chromium through executablePath. Quiet unless it
# installs something or fails.
set -euo pipefail

die() {
	echo "install-chromium.sh: $*" >&2
	exit 1
}

root=$(cd "$(dirname "$0")/.." && pwd)
e2e="$root/server/ui/e2e"

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	sudo=(sudo)
fi
as_root() { "${sudo[@]}" "$@"; }

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 ||
		die "chromium is not on PATH and apt-get is not available; install Chromium by hand"
	if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
		die "chromium is not on PATH; installing it needs root and sudo is not available (run: apt-get install chromium)"
	fi
	log=$(mktemp)
	trap 'rm -f "$log"' EXIT
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 ||
		! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >>"$log" 2>&1; then
		cat "$log" >&2
		die "apt-get could not install chromium (output above)"
	fi
	command -v chromium >/dev/null 2>&1 || die "apt-get installed chromium but it is not on PATH ($PATH)"
	echo "install-chromium.sh: installed $(chromium --version 2>/dev/null | head -n 1)" >&2
fi

if [ ! -f "$e2e/package-lock.json" ]; then
	exit 0 # nothing to install yet
fi
command -v npm >/dev/null 2>&1 || {
	command -v apt-get >/dev/null 2>&1 || die "npm is not on PATH and apt-get is not available; install Node.js 18+ and npm"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null 2>&1 ||
		die "apt-get could not install nodejs and npm"
}
if [ ! -d "$e2e/node_modules/playwright-core" ] || [ "$e2e/package-lock.json" -nt "$e2e/node_modules/.package-lock.json" ]; then
	(cd "$e2e" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error) ||
		die "npm ci in server/ui/e2e failed"
fi
