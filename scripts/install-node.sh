#!/usr/bin/env bash
# install-node.sh makes sure node (18 or newer) and npm are on PATH, for the
# BullMQ driver of `make bench-peers` (scripts/peers/bullmq) and for
# `make test`'s syntax check of it. It installs Debian's nodejs and npm
# packages when either is missing; quiet unless it installs or fails.
set -euo pipefail
ok() {
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
		[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 18 ]
}
ok && exit 0
"$(dirname "$0")/install-apt.sh" nodejs npm
ok || { echo "install-node.sh: node 18+ and npm are still not on PATH" >&2; exit 1; }
