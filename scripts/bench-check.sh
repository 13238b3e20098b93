#!/usr/bin/env bash
# bench-check.sh: the benchmark regression check (make bench-check; not part
# of make test). It builds kairos-server and the kairos CLI, starts a
# throwaway redis-server (AOF everysec, as in production) and the server on
# free loopback ports, runs `kairos bench` (publish, bulk, consume) and fails
# when a figure falls below MARGIN (default 0.5) of the one recorded in
# doc/performance.md on this kind of machine. The margin is generous
# because a shared 2-core machine is noisy (±20% between runs).
set -euo pipefail
cd "$(dirname "$0")/.."

# Recorded medians (jobs/s), doc/performance.md, 2026-11-24.
declare -A BASE=([publish]=${BASE_PUBLISH:-15000} [bulk_publish]=${BASE_BULK:-75000} [consume_ack]=${BASE_CONSUME:-7800})
MARGIN=${MARGIN:-0.5}
DURATION=${DURATION:-5s}

scripts/install-redis.sh
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/kairos-server" ./server/cmd/kairos-server
go build -o "$work/kairos" ./client/cmd/kairos

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(port); aport=$(port); hport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$work" --save '' --appendonly yes \
	--appendfsync everysec --maxmemory-policy noeviction --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
cat >"$work/kairos.toml" <<CONF
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
"$work/kairos-server" -c "$work/kairos.toml" >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$hport/version" >/dev/null 2>&1 && break; sleep 0.1; done
token=$(curl -sf -X POST "http://127.0.0.1:$hport/token/bench?description=bench-check" | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')

"$work/kairos" bench --addr "127.0.0.1:$aport" --token "$token" -n bench -d "$DURATION" --runs 3 --jobs 60000 \
	--json publish bulk consume >"$work/bench.json"

fail=0
while read -r line; do
	scenario=$(sed -n 's/.*"scenario":"\([a-z_]*\)".*/\1/p' <<<"$line")
	rate=$(sed -n 's/.*"per_sec":\([0-9.]*\).*/\1/p' <<<"$line" | head -1)
	base=${BASE[$scenario]:-}
	[ -n "$scenario" ] && [ -n "$rate" ] && [ -n "$base" ] || continue
	if awk -v r="$rate" -v b="$base" -v m="$MARGIN" 'BEGIN { exit !(r >= b * m) }'; then
		printf 'bench-check: %-13s %8.0f jobs/s  (recorded %s, floor %.0f)  ok\n' "$scenario" "$rate" "$base" "$(awk -v b="$base" -v m="$MARGIN" 'BEGIN{print b*m}')"
	else
		printf 'bench-check: %-13s %8.0f jobs/s  (recorded %s, floor %.0f)  REGRESSION\n' "$scenario" "$rate" "$base" "$(awk -v b="$base" -v m="$MARGIN" 'BEGIN{print b*m}')"
		fail=1
	fi
done <"$work/bench.json"
exit $fail
