#!/usr/bin/env bash
# flood-bench.sh: Kairos with its admin Redis 1 ms away (kairos bench
# delay-proxy), measured with the event loops on and off:
#   - the flood scenario: 8 valid keep-alive publishers beside 64 clients
#     sending a random token on a new connection each;
#   - a rate-limited token: 64 publishers with a token limited to
#     LIMIT publishes per second;
#   - bigflood: 8 valid keep-alive publishers beside BIG_CONNS (1000)
#     clients sending, on a new connection each, a publish with a random
#     token that announces a 1 MiB body and sends 1 MiB - 1 byte of it
#     (refused from its head, it costs a server only what it reads of it).
# After each measurement, the server's peak RSS (VmHWM) is printed.
# Each measurement gets a fresh redis-server (AOF everysec), proxy and
# server. Environment:
#   SERVER_BIN  kairos-server to measure (default: built from this tree)
#   LOOPS       EventLoops values to measure (default: "0 -1": on, off)
#   DELAY       admin Redis delay each way (default 1ms)
#   DURATION    length of each scenario (default 6s; 8s for the limit)
#   LIMIT       publishes per second of the limited token (default 5000)
#   RUNS        runs per scenario (default 1)
#   BIG_CONNS   flood clients of bigflood (default 1000)
#   WHAT        what to measure (default "flood limit"; also "bigflood")
set -euo pipefail
cd "$(dirname "$0")/.."

LOOPS=${LOOPS:-"0 -1"}
DELAY=${DELAY:-1ms}
DURATION=${DURATION:-6s}
LIMIT=${LIMIT:-5000}
RUNS=${RUNS:-1}
WHAT=${WHAT:-"flood limit"}
BIG_CONNS=${BIG_CONNS:-1000}

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${SERVER_BIN:-}" ]; then
	go build -o "$work/kairos-server" ./server/cmd/kairos-server
	SERVER_BIN="$work/kairos-server"
fi
go build -o "$work/kairos" ./client/cmd/kairos

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# measure LOOPS WHAT: fresh Redis, proxy and server; WHAT is flood or limit.
measure() {
	local loops=$1 what=$2 dir="$work/run-$1-$2" rport aport hport rpid ppid spid token proxy
	mkdir -p "$dir"
	rport=$(port); aport=$(port); hport=$(port)
	redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes \
		--appendfsync everysec --maxmemory-policy noeviction --daemonize no >"$dir/redis.log" 2>&1 &
	rpid=$!; pids+=("$rpid")
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
	"$work/kairos" bench delay-proxy --to "127.0.0.1:$rport" --delay "$DELAY" >"$dir/proxy.addr" 2>"$dir/proxy.log" &
	ppid=$!; pids+=("$ppid")
	for _ in $(seq 50); do [ -s "$dir/proxy.addr" ] && break; sleep 0.1; done
	proxy=$(head -1 "$dir/proxy.addr")
	cat >"$dir/server.toml" <<CONF
Host = "127.0.0.1"
Port = $aport
AdminHost = "127.0.0.1"
AdminPort = $hport
LogLevel = "warn"
[AdminRedis]
Addr = "$proxy"
[Pool.default]
Addr = "127.0.0.1:$rport"
[Kairos]
EventLoops = $loops
CONF
	"$SERVER_BIN" -c "$dir/server.toml" >"$dir/server.log" 2>&1 &
	spid=$!; pids+=("$spid")
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/version" >/dev/null 2>&1 && break; sleep 0.1; done
	token=$(curl -sf -X POST "http://127.0.0.1:$hport/token/bench?description=flood-bench" |
		tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
	[ -n "$token" ] || { echo "flood-bench: no token; server log:" >&2; cat "$dir/server.log" >&2; exit 1; }
	echo
	local b=("$work/kairos" bench --addr "127.0.0.1:$aport" --token "$token" -n bench --server-pid "$spid" --runs "$RUNS")
	case $what in
	flood)
		echo "== EventLoops=$loops, admin Redis $DELAY away: flood"
		"${b[@]}" -d "$DURATION" flood ;;
	limit)
		curl -sf -X POST "http://127.0.0.1:$hport/token/bench/$token/limit" \
			-d "{\"read\":$LIMIT,\"write\":$LIMIT,\"interval\":1}" >/dev/null
		sleep 1.2 # every instance's throttler has reloaded
		echo "== EventLoops=$loops, admin Redis $DELAY away: publish with a token limited to $LIMIT/s"
		"${b[@]}" -d "${LIMIT_DURATION:-8s}" publish ;;
	bigflood)
		echo "== EventLoops=$loops, admin Redis $DELAY away: $BIG_CONNS clients with a bad token, each sending 1 MiB - 1 of a 1 MiB body"
		"${b[@]}" -d "$DURATION" --concurrency "$BIG_CONNS" --flood-body 1048576 flood ;;
	esac
	echo "server peak RSS: $(awk '/^VmHWM/ {printf "%.0f MB", $2/1024}' "/proc/$spid/status")"
	stop "$spid"; stop "$ppid"; stop "$rpid"
}

for what in $WHAT; do
	for loops in $LOOPS; do
		measure "$loops" "$what"
	done
done
