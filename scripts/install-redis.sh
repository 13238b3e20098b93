#!/usr/bin/env bash
# install-redis.sh makes sure redis-server and redis-cli are on PATH, because
# the real-Redis test tier (engine/rdb/redistest) starts throwaway
# redis-server processes, and builds its throwaway Redis Clusters with
# redis-cli --cluster create.
#
# It does nothing when both are already there. Otherwise it installs Debian's
# redis-server and redis-tools (redis-cli) packages with apt-get (through sudo
# when not root) and
# keeps the package from starting the system Redis service: the tests start
# their own servers on free ports. It is quiet unless it installs or fails.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
	exit 0
fi

die() {
	echo "install-redis.sh: $*" >&2
	exit 1
}

command -v apt-get >/dev/null 2>&1 ||
	die "redis-server or redis-cli is not on PATH and apt-get is not available; install Redis 6.2+ (redis-server and redis-cli) by hand"

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 ||
		die "redis-server or redis-cli is not on PATH; installing them needs root and sudo is not available (run: apt-get install redis-server redis-tools)"
	sudo=(sudo)
fi
as_root() { "${sudo[@]}" "$@"; }

log=$(mktemp)
cleanup=(rm -f "$log")
trap '"${cleanup[@]}"' EXIT

# A policy-rc.d that answers 101 tells the package scripts not to start any
# service. Add one only for the duration of the install, and only if the
# machine has none (containers often do).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy" ||
		die "cannot write $policy (needed to keep the redis service from starting)"
	trap 'as_root rm -f "$policy"; "${cleanup[@]}"' EXIT
fi

if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 ||
	! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >>"$log" 2>&1; then
	cat "$log" >&2
	die "apt-get could not install redis-server and redis-tools (output above)"
fi

for bin in redis-server redis-cli; do
	command -v "$bin" >/dev/null 2>&1 ||
		die "apt-get installed redis-server and redis-tools but $bin is still not on PATH ($PATH)"
done
echo "install-redis.sh: installed $(redis-server --version | head -n 1)" >&2
