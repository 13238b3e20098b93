#!/usr/bin/env bash
# install-apt.sh PACKAGE...: installs Debian packages with apt-get (through
# sudo when not root), without letting their scripts start any service (the
# benchmarks start their own servers on free ports). Used by
# install-postgres.sh and install-node.sh; quiet unless it fails.
set -euo pipefail

die() {
	echo "install-apt.sh: $*" >&2
	exit 1
}
[ $# -gt 0 ] || die "usage: install-apt.sh PACKAGE..."
command -v apt-get >/dev/null 2>&1 || die "apt-get is not available; install $* by hand"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || die "installing $* needs root and sudo is not available"
	sudo=(sudo)
fi
as_root() { "${sudo[@]}" "$@"; }

log=$(mktemp)
cleanup=(rm -f "$log")
trap '"${cleanup[@]}"' EXIT
# A policy-rc.d that answers 101 keeps the packages' services from starting.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy" || die "cannot write $policy"
	trap 'as_root rm -f "$policy"; "${cleanup[@]}"' EXIT
fi
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 ||
	! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$log" 2>&1; then
	cat "$log" >&2
	die "apt-get could not install $* (output above)"
fi
echo "install-apt.sh: installed $*" >&2
