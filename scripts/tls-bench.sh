#!/usr/bin/env bash
# tls-bench.sh: what TLS costs Kairos. Measures publish and consume + ACK
# (kairos bench, keep-alive connections, --runs RUNS medians, server CPU
# per job) in three modes, alternating them ROUNDS times, each measurement
# on a fresh redis-server (AOF everysec) and server:
#   loops  plain HTTP, the event loops on (the default);
#   http   plain HTTP, EventLoops = -1 (net/http serves everything);
#   tls    [TLS] on the public listener (the loops step aside: net/http
#          and crypto/tls serve everything), a P-256 certificate from a
#          throw-away CA made with openssl.
# "http" against "loops" is what leaving the loops costs, "tls" against
# "http" what the encryption itself costs. Environment:
#   SERVER_BIN  kairos-server to measure (default: built from this tree)
#   MODES       modes to measure (default "loops http tls")
#   ROUNDS      rounds of the modes (default 2)
#   RUNS        runs per scenario (default 3)
#   DURATION    length of the publish runs (default 2s)
#   JOBS        jobs of each consume + ACK run (default 6000)
set -euo pipefail
cd "$(dirname "$0")/.."

MODES=${MODES:-"loops http tls"}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-3}
DURATION=${DURATION:-2s}
JOBS=${JOBS:-6000}

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

# A CA and a certificate for 127.0.0.1 signed by it.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=tls-bench-CA \
	-keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
	-keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$work/ext.cnf"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
	-days 1 -extfile "$work/ext.cnf" -out "$work/server.crt" 2>/dev/null

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# measure MODE ROUND: fresh Redis and server, then publish and consume.
measure() {
	local mode=$1 dir="$work/run-$1-$2" rport aport hport rpid spid token loops=0 scheme=http tlsconf=""
	mkdir -p "$dir"
	case $mode in
	http) loops=-1 ;;
	tls)
		scheme=https
		tlsconf=$(printf '[TLS]\nCertFile = "%s"\nKeyFile = "%s"\n' "$work/server.crt" "$work/server.key") ;;
	esac
	rport=$(port); aport=$(port); hport=$(port)
	redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes \
		--appendfsync everysec --maxmemory-policy noeviction --daemonize no >"$dir/redis.log" 2>&1 &
	rpid=$!; pids+=("$rpid")
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
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
[Kairos]
EventLoops = $loops
$tlsconf
CONF
	"$SERVER_BIN" -c "$dir/server.toml" >"$dir/server.log" 2>&1 &
	spid=$!; pids+=("$spid")
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/version" >/dev/null 2>&1 && break; sleep 0.1; done
	token=$(curl -sf -X POST "http://127.0.0.1:$hport/token/bench?description=tls-bench" |
		tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
	[ -n "$token" ] || { echo "tls-bench: no token; server log:" >&2; cat "$dir/server.log" >&2; exit 1; }
	echo
	echo "== round $2: $mode"
	"$work/kairos" bench --addr "$scheme://127.0.0.1:$aport" --ca-file "$work/ca.crt" --token "$token" -n bench \
		--server-pid "$spid" --redis "127.0.0.1:$rport" --runs "$RUNS" -d "$DURATION" --jobs "$JOBS" publish consume
	stop "$spid"; stop "$rpid"
}

for round in $(seq "$ROUNDS"); do
	for mode in $MODES; do
		measure "$mode" "$round"
	done
done
