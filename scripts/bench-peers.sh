#!/usr/bin/env bash
# bench-peers.sh: Kairos, asynq, BullMQ and River side by side on this
# machine (issue #34, doc/performance.md "Against other job systems").
#
#   scripts/bench-peers.sh                       # 3 interleaved rounds, every peer, every scenario
#   ROUNDS=1 JOBS=20000 PEERS="kairos asynq" scripts/bench-peers.sh
#
# One peer at a time, each on a fresh store started here on free loopback
# ports: Redis (AOF everysec, noeviction: production settings, as BullMQ
# requires noeviction) for Kairos, asynq and BullMQ; a new PostgreSQL 15
# cluster (initdb, the server's defaults) for River. Kairos is this
# checkout's kairos-server with its default settings, driven through its Go
# client and Worker; asynq, River and Kairos through the Go harness in
# scripts/peers (its own module: asynq and River pinned in its go.mod);
# BullMQ through scripts/peers/bullmq (pinned in package-lock.json, npm ci).
# Rounds are interleaved (round 1 of every peer, then round 2, ...); the
# table gives each cell's median with the min-max. The JSON lines of every
# run stay in RESULTS.
#
# It installs what it needs: redis-server (install-redis.sh), PostgreSQL 15
# (install-postgres.sh), node and npm (install-node.sh), the npm packages
# (npm ci). Needs Go, curl and python3 (free ports).
#
# Environment (defaults in brackets):
#   PEERS      peers in order ["kairos asynq bullmq river"]; river-defaults is River with its
#              default FetchCooldown (100 ms) and FetchPollInterval (1 s)
#   ROUNDS     rounds [3]
#   SCENARIOS  ["memory enqueue bulk process latency delayed"]
#   JOBS       jobs of enqueue, bulk and process [100000]
#   CONC       producers and handlers [64]; BULK_CONC producers of bulk [16], BATCH jobs a call [64]
#   BODY       body bytes [100]
#   RATES      latency's publish rates [1000,4000]; LAT_DUR at each rate [5s]
#   DELAYED    delayed jobs, due 1-5 s after publishing [20000]; MEM_JOBS memory's jobs [20000]
#   RESULTS    where the JSON lines go [bin/peers-results]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

PEERS=${PEERS:-kairos asynq bullmq river}
ROUNDS=${ROUNDS:-3}
SCENARIOS=${SCENARIOS:-memory enqueue bulk process latency delayed}
RESULTS=${RESULTS:-$root/bin/peers-results}
args=(-jobs "${JOBS:-100000}" -c "${CONC:-64}" -bulk-c "${BULK_CONC:-16}" -batch "${BATCH:-64}"
	-body "${BODY:-100}" -rates "${RATES:-1000,4000}" -latency-duration "${LAT_DUR:-5s}"
	-delayed-jobs "${DELAYED:-20000}" -mem-jobs "${MEM_JOBS:-20000}")

has() { case " $PEERS " in *" $1 "* | *" $1-"*) return 0 ;; esac; return 1; }

scripts/install-redis.sh
pgbin=
if has river; then pgbin=$(scripts/install-postgres.sh); fi
if has bullmq; then
	scripts/install-node.sh
	(cd scripts/peers/bullmq && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

work=$(mktemp -d)
chmod 755 "$work"
pids=()
pgdata=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$pgdata" ] && [ -f "$pgdata/postmaster.pid" ]; then
		kill -INT "$(head -n 1 "$pgdata/postmaster.pid")" 2>/dev/null || true
		sleep 1
	fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd scripts/peers && go build -o "$work/peers" .)
go build -o "$work/kairos-server" ./server/cmd/kairos-server
mkdir -p "$RESULTS"
rm -f "$RESULTS"/*.jsonl

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# redis DIR: a fresh redis-server with production settings; sets rport, rpid.
redis() {
	rport=$(port)
	redis-server --port "$rport" --bind 127.0.0.1 --dir "$1" --save '' --appendonly yes \
		--appendfsync everysec --maxmemory-policy noeviction --daemonize no >"$1/redis.log" 2>&1 &
	rpid=$!
	pids+=("$rpid")
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
}

# as_pg CMD...: runs CMD as the postgres user when root (PostgreSQL refuses root).
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi
}

# measure PEER ROUND: a fresh store (and server), the harness, everything stopped.
measure() {
	local peer=$1 round=$2 dir="$work/$1-$2" out="$RESULTS/$1.jsonl" status=0
	mkdir -p "$dir"
	echo "== round $round: $peer (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	case $peer in
	kairos)
		redis "$dir"
		local aport hport spid token
		aport=$(port); hport=$(port)
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
		"$work/kairos-server" -c "$dir/server.toml" >"$dir/server.log" 2>&1 &
		spid=$!; pids+=("$spid")
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/version" >/dev/null 2>&1 && break; sleep 0.1; done
		token=$(curl -sf -X POST "http://127.0.0.1:$hport/token/bench?description=bench-peers" |
			tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
		[ -n "$token" ] || { cat "$dir/server.log" >&2; echo "bench-peers: kairos gave no token" >&2; exit 1; }
		"$work/peers" run -peer kairos -round "$round" -kairos "127.0.0.1:$aport" -token "$token" \
			-redis "127.0.0.1:$rport" -server-pid "$spid" -store-pid "$rpid" "${args[@]}" $SCENARIOS >>"$out" || status=1
		stop "$spid"; stop "$rpid"
		;;
	asynq)
		redis "$dir"
		"$work/peers" run -peer asynq -round "$round" -redis "127.0.0.1:$rport" -store-pid "$rpid" \
			"${args[@]}" $SCENARIOS >>"$out" || status=1
		stop "$rpid"
		;;
	bullmq)
		redis "$dir"
		node scripts/peers/bullmq/bench.js --redis "127.0.0.1:$rport" --store-pid "$rpid" --round "$round" \
			"${args[@]}" $SCENARIOS >>"$out" || status=1
		stop "$rpid"
		;;
	river | river-defaults)
		local pport ppid rflags=()
		[ "$peer" = river-defaults ] && rflags=(-river-defaults)
		pport=$(port)
		pgdata="$dir/pg"
		mkdir -p "$pgdata"
		[ "$(id -u)" -eq 0 ] && chown postgres: "$dir" "$pgdata"
		as_pg "$pgbin/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; exit 1; }
		# The server's defaults (shared_buffers 128MB, fsync and
		# synchronous_commit on, max_connections 100), on loopback only.
		as_pg "$pgbin/postgres" -D "$pgdata" -p "$pport" -k "$pgdata" -c listen_addresses=127.0.0.1 \
			>"$dir/postgres.log" 2>&1 &
		pids+=($!)
		for _ in $(seq 100); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pport" && break; sleep 0.1; done
		ppid=$(head -n 1 "$pgdata/postmaster.pid")
		"$pgbin/createdb" -h 127.0.0.1 -p "$pport" -U postgres river
		"$work/peers" run -peer river "${rflags[@]}" -round "$round" -pg "postgres://postgres@127.0.0.1:$pport/river" \
			-store-pid "$ppid" "${args[@]}" $SCENARIOS >>"$out" || status=1
		kill -INT "$ppid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$ppid" 2>/dev/null || break; sleep 0.1; done
		pgdata=
		;;
	*) echo "bench-peers: unknown peer $peer (PEERS: kairos asynq bullmq river river-defaults)" >&2; exit 2 ;;
	esac
	rm -rf "$dir"
	[ "$status" -eq 0 ] || { echo "bench-peers: $peer failed in round $round" >&2; exit 1; }
}

for round in $(seq "$ROUNDS"); do
	for peer in $PEERS; do measure "$peer" "$round"; done
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/peers" table "$RESULTS"/*.jsonl
