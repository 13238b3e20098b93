#!/usr/bin/env bash
# bench-check.sh: the benchmark regression check (make bench-check; not part
# of make test). It measures Kairos alone with scripts/lmstfy-bench.sh
# (SERVERS=kairos: a fresh throwaway redis-server with AOF everysec, as in
# production, and the server on free loopback ports; `kairos bench` publish,
# bulk and consume, 3 runs each) and fails when a median falls below MARGIN
# (default 0.5) of the figure recorded in doc/performance.md on this kind of
# machine. The margin is generous because a shared 2-core machine is noisy
# (±20% between runs).
#
# It also runs the same three scenarios through the official Go client and
# its Worker (publish-go, bulk-go, consume-go: client/bench/goclient.go) in
# the same run, their runs interleaved with the bare client's (--interleave:
# each run meets a Redis that every publish run before it grew), and fails
# when a Go client's median falls below RATIO_FLOOR of the bare client's:
# what a user of the client gets must stay what the server gives (issue
# #34). The goal is 0.9; the floor (default 0.45) sits under what single
# runs give on a loaded machine (0.55-1.85 at load 6-13 on 2026-12-08:
# doc/performance.md, "Through the Go client") and is to rise on a quieter
# one. The steadier check: the load generator's CPU per job through the Go
# client must stay under CPU_CEILING (default 2.0) times the bare client's,
# for publish and consume + ACK (1.1-1.4 and 0.7-1.0 that day; 3-6 through
# net/http).
set -euo pipefail
cd "$(dirname "$0")/.."

# Recorded medians (jobs/s), doc/performance.md, 2026-11-24.
declare -A BASE=([publish]=${BASE_PUBLISH:-22000} [bulk_publish]=${BASE_BULK:-75000} [consume_ack]=${BASE_CONSUME:-10000})
MARGIN=${MARGIN:-0.5}
RATIO_FLOOR=${RATIO_FLOOR:-0.45}
CPU_CEILING=${CPU_CEILING:-2.0}
DURATION=${DURATION:-3s}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SERVERS=kairos JSON_DIR="$work" scripts/lmstfy-bench.sh -d "$DURATION" --runs 3 --interleave --jobs 60000 \
	publish publish-go bulk bulk-go consume consume-go >/dev/null

fail=0
declare -A RATE CPU
while read -r line; do
	scenario=$(sed -n 's/.*"scenario":"\([a-z_]*\)".*/\1/p' <<<"$line")
	rate=$(sed -n 's/.*"per_sec":\([0-9.]*\).*/\1/p' <<<"$line" | head -1)
	cpu=$(sed -n 's/.*"loadgen_cpu_us_per_job":\([0-9.]*\).*/\1/p' <<<"$line" | head -1)
	[ -n "$scenario" ] && [ -n "$rate" ] && RATE[$scenario]=$rate
	[ -n "$scenario" ] && [ -n "$cpu" ] && CPU[$scenario]=$cpu
	base=${BASE[$scenario]:-}
	[ -n "$scenario" ] && [ -n "$rate" ] && [ -n "$base" ] || continue
	if awk -v r="$rate" -v b="$base" -v m="$MARGIN" 'BEGIN { exit !(r >= b * m) }'; then
		printf 'bench-check: %-13s %8.0f jobs/s  (recorded %s, floor %.0f)  ok\n' "$scenario" "$rate" "$base" "$(awk -v b="$base" -v m="$MARGIN" 'BEGIN{print b*m}')"
	else
		printf 'bench-check: %-13s %8.0f jobs/s  (recorded %s, floor %.0f)  REGRESSION\n' "$scenario" "$rate" "$base" "$(awk -v b="$base" -v m="$MARGIN" 'BEGIN{print b*m}')"
		fail=1
	fi
done <"$work/kairos.json"
for bare in publish bulk_publish consume_ack; do
	gorate=${RATE[${bare}_go]:-} barerate=${RATE[$bare]:-}
	if [ -z "$gorate" ] || [ -z "$barerate" ]; then
		printf 'bench-check: %-13s no figure for the Go client or the bare client  REGRESSION\n' "${bare}_go"
		fail=1
		continue
	fi
	ratio=$(awk -v g="$gorate" -v b="$barerate" 'BEGIN { printf "%.2f", g / b }')
	if awk -v r="$ratio" -v f="$RATIO_FLOOR" 'BEGIN { exit !(r >= f) }'; then
		printf 'bench-check: %-16s %8.0f jobs/s  %.2f of the bare client (%.0f), floor %s  ok\n' "${bare}_go" "$gorate" "$ratio" "$barerate" "$RATIO_FLOOR"
	else
		printf 'bench-check: %-16s %8.0f jobs/s  %.2f of the bare client (%.0f), floor %s  REGRESSION\n' "${bare}_go" "$gorate" "$ratio" "$barerate" "$RATIO_FLOOR"
		fail=1
	fi
done
# The steadier figure: the load generator's CPU per job through the Go
# client against the bare client's (publish and consume + ACK; a bulk's is
# under 2 µs, too small to compare). Through net/http it was 3 to 6 times.
for bare in publish consume_ack; do
	gocpu=${CPU[${bare}_go]:-} barecpu=${CPU[$bare]:-}
	if [ -z "$gocpu" ] || [ -z "$barecpu" ] || awk -v b="$barecpu" 'BEGIN { exit !(b <= 0) }'; then
		printf 'bench-check: %-16s no CPU per job for the Go client or the bare client (no getrusage?)  skipped\n' "${bare}_go"
		continue
	fi
	times=$(awk -v g="$gocpu" -v b="$barecpu" 'BEGIN { printf "%.2f", g / b }')
	if awk -v r="$times" -v c="$CPU_CEILING" 'BEGIN { exit !(r <= c) }'; then
		printf 'bench-check: %-16s %6.1f µs of client CPU per job, %.2f times the bare client'"'"'s (%.1f), ceiling %s  ok\n' "${bare}_go" "$gocpu" "$times" "$barecpu" "$CPU_CEILING"
	else
		printf 'bench-check: %-16s %6.1f µs of client CPU per job, %.2f times the bare client'"'"'s (%.1f), ceiling %s  REGRESSION\n' "${bare}_go" "$gocpu" "$times" "$barecpu" "$CPU_CEILING"
		fail=1
	fi
done
exit $fail
