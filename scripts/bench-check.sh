#!/usr/bin/env bash
# bench-check.sh: the benchmark regression check (make bench-check; not part
# of make test). It measures Kairos alone with scripts/lmstfy-bench.sh
# (SERVERS=kairos: a fresh throwaway redis-server with AOF everysec, as in
# production, and the server on free loopback ports; `kairos bench` publish,
# bulk and consume, 3 runs each) and fails when a median falls below MARGIN
# (default 0.5) of the figure recorded in doc/performance.md on this kind of
# machine. The margin is generous because a shared 2-core machine is noisy
# (±20% between runs).
set -euo pipefail
cd "$(dirname "$0")/.."

# Recorded medians (jobs/s), doc/performance.md, 2026-11-24.
declare -A BASE=([publish]=${BASE_PUBLISH:-22000} [bulk_publish]=${BASE_BULK:-75000} [consume_ack]=${BASE_CONSUME:-10000})
MARGIN=${MARGIN:-0.5}
DURATION=${DURATION:-5s}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SERVERS=kairos JSON_DIR="$work" scripts/lmstfy-bench.sh -d "$DURATION" --runs 3 --jobs 60000 publish bulk consume >/dev/null

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
done <"$work/kairos.json"
exit $fail
