#!/usr/bin/env bash
# lmstfy-bench.sh: Kairos and lmstfy side by side, on the same machine, in
# the same run, measured by the same `kairos bench` invocation.
#
#   scripts/lmstfy-bench.sh                          # -d 5s --runs 3 publish bulk consume
#   scripts/lmstfy-bench.sh --rate 4000 latency      # any `kairos bench` arguments
#   JSON_DIR=out scripts/lmstfy-bench.sh …           # also out/lmstfy.json, out/kairos.json
#
# It builds lmstfy's server from the Go module proxy (module
# github.com/bitleak/lmstfy, version LMSTFY_VERSION) with
# scripts/build-lmstfy.sh unless a build of that version is cached in
# LMSTFY_BIN, and builds kairos-server and the kairos
# CLI from this checkout. Then, for each server in turn (never both at once):
# a fresh throwaway redis-server (AOF everysec, noeviction, as lmstfy
# requires and as scripts/bench-check.sh runs it) on a free loopback port,
# the server on free loopback ports with the same TOML configuration, a
# token from its admin API, and `kairos bench` with the given arguments.
# Everything it started is stopped on exit. Needs Go and redis-server
# (scripts/install-redis.sh installs it), curl and python3 (free ports).
#
# Environment:
#   LMSTFY_VERSION  lmstfy module version to build (default v1.0.16, the newest
#                   the proxy serves; it builds with Go 1.26 unchanged)
#   LMSTFY_BIN      cached lmstfy server binary (default ~/.cache/kairos/lmstfy-server);
#                   rebuilt when its -v does not report LMSTFY_VERSION
#   SERVERS         servers to measure, in order (default "lmstfy kairos")
#   JSON_DIR        when set, run the bench with --json into JSON_DIR/<server>.json
#   KAIROS_SERVER_BIN  a kairos-server binary to measure instead of this
#                   checkout's (e.g. an older commit's, for before/after)
#   KAIROS_BIN      a kairos CLI binary to measure with instead of this
#                   checkout's (its `kairos bench`: the load generator and
#                   the Go client of the *-go scenarios)
set -euo pipefail
cd "$(dirname "$0")/.."

LMSTFY_VERSION=${LMSTFY_VERSION:-v1.0.16}
LMSTFY_BIN=${LMSTFY_BIN:-$HOME/.cache/kairos/lmstfy-server}
SERVERS=${SERVERS:-lmstfy kairos}
if [ $# -eq 0 ]; then
	set -- -d 5s --runs 3 publish bulk consume
fi

scripts/install-redis.sh
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

case " $SERVERS " in *" lmstfy "*)
	LMSTFY_BIN=$(LMSTFY_VERSION=$LMSTFY_VERSION LMSTFY_BIN=$LMSTFY_BIN scripts/build-lmstfy.sh) ;;
esac

if [ -n "${KAIROS_SERVER_BIN:-}" ]; then
	cp "$KAIROS_SERVER_BIN" "$work/kairos-server"
else
	go build -o "$work/kairos-server" ./server/cmd/kairos-server
fi
if [ -n "${KAIROS_BIN:-}" ]; then
	cp "$KAIROS_BIN" "$work/kairos"
else
	go build -o "$work/kairos" ./client/cmd/kairos
fi
bench_help=$("$work/kairos" bench --help)
has_flag() { grep -q -- "--$1 " <<<"$bench_help"; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# stop PID: ends one process this script started and waits for it.
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# measure NAME: a fresh Redis and server NAME, a token, the bench.
measure() {
	local name=$1 dir="$work/run-$1" rport aport hport rpid spid token out
	shift
	mkdir -p "$dir"
	rport=$(port); aport=$(port); hport=$(port)
	redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes \
		--appendfsync everysec --maxmemory-policy noeviction --daemonize no >"$dir/redis.log" 2>&1 &
	rpid=$!; pids+=("$rpid")
	# One configuration for both: Kairos reads lmstfy's keys.
	cat >"$dir/server.toml" <<CONF
Host = "127.0.0.1"
Port = $aport
AdminHost = "127.0.0.1"
AdminPort = $hport
LogLevel = "warn"
[AdminRedis]
Addr = "127.0.0.1:$rport"
[Pool.default]
Addr = "127.0.0.1:$rport"
CONF
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
	case $name in
	lmstfy) "$LMSTFY_BIN" -c "$dir/server.toml" -p "$dir/lmstfy.pid" >"$dir/server.log" 2>&1 & ;;
	kairos) "$work/kairos-server" -c "$dir/server.toml" >"$dir/server.log" 2>&1 & ;;
	*) echo "lmstfy-bench: unknown server $name (SERVERS: lmstfy, kairos)" >&2; exit 2 ;;
	esac
	spid=$!; pids+=("$spid")
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/version" >/dev/null 2>&1 && break; sleep 0.1; done
	token=$(curl -sf -X POST "http://127.0.0.1:$hport/token/bench?description=lmstfy-bench" |
		tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
	if [ -z "$token" ]; then
		echo "lmstfy-bench: $name gave no token; its log:" >&2
		cat "$dir/server.log" >&2
		exit 1
	fi

	local extra=()
	has_flag server-pid && extra+=(--server-pid "$spid")
	has_flag redis && extra+=(--redis "127.0.0.1:$rport")
	echo
	echo "== $name $(curl -sf "http://127.0.0.1:$hport/version" | tr -d '\n ' || true)"
	echo "   kairos bench $*"
	if [ -n "${JSON_DIR:-}" ]; then
		mkdir -p "$JSON_DIR"
		out="$JSON_DIR/$name.json"
		"$work/kairos" bench --addr "127.0.0.1:$aport" --admin-addr "127.0.0.1:$hport" --token "$token" -n bench \
			"${extra[@]}" --json "$@" >"$out" || status=1
		cat "$out"
	else
		"$work/kairos" bench --addr "127.0.0.1:$aport" --admin-addr "127.0.0.1:$hport" --token "$token" -n bench \
			"${extra[@]}" "$@" || status=1
	fi
	if ! kill -0 "$spid" 2>/dev/null; then
		echo "lmstfy-bench: $name exited during the bench; its log:" >&2
		status=1
		cat "$dir/server.log" >&2
	fi
	stop "$spid"
	redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
	stop "$rpid"
	if grep -qiE 'panic|fatal' "$dir/server.log"; then
		echo "lmstfy-bench: $name logged:" >&2
		grep -iE -m 20 'panic|fatal' "$dir/server.log" >&2
	fi
}

# status: 1 when a bench failed or a server died; the other servers are
# still measured.
status=0
for s in $SERVERS; do
	measure "$s" "$@"
done
exit $status
