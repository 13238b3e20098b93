#!/usr/bin/env bash
# cluster-bench.sh: Kairos on a Redis Cluster beside Kairos on one Redis, on
# this machine, in one run (make bench-cluster; issue #22 item 7).
#
#   scripts/cluster-bench.sh                       # 3 rounds of publish, consume + ACK, publish over 10,000 queues
#   ROUNDS=5 DURATION=8s scripts/cluster-bench.sh
#   SHARDS=3 scripts/cluster-bench.sh              # also a hot queue of 3 shards on the cluster (needs hot-queue shards)
#   JSON_OUT=out.json scripts/cluster-bench.sh     # also the medians as JSON
#
# It starts, on free loopback ports, a throwaway single redis-server and a
# throwaway Redis Cluster of 6 redis-servers (3 masters, one replica each,
# `redis-cli --cluster create --cluster-replicas 1`), all with AOF everysec
# and noeviction as in production, and a kairos-server on each (the
# cluster's with `Cluster = true` for its pool and its admin Redis). Both
# stay up for the whole run; each round measures one then the other (the
# order alternating between rounds) with the same `kairos bench`
# invocations, passing --server-pid and --redis (one seed for the cluster:
# the bench finds the masters and meters each). Every invocation is a single
# run (--runs 1); the summary gives the median over the rounds of each
# figure, with the machine's load (uptime) of each run, and the per-job
# ratios cluster / single. Everything it started is stopped on exit. Needs
# Go, redis-server and redis-cli (scripts/install-redis.sh), python3.
#
# Environment:
#   ROUNDS     rounds (default 3)
#   DURATION   length of each timed scenario (default 5s)
#   JOBS       jobs of consume + ACK (default 30000)
#   QUEUES     queues of the many-queues publish (default 10000)
#   CONC       clients (default: kairos bench's, 64)
#   SHARDS     when set (K > 1), also publish and consume + ACK on a queue of K
#              shards (kairos bench --shards K) on the cluster, and the same
#              unsharded queue beside it
#   REPLICA    1: also Kairos on a single Redis that has a replica ("replicated"), the
#              control for what feeding its replica costs a cluster master
#   SERVER_BIN a kairos-server binary to measure instead of this checkout's
#   ONLY       the measurements to run, of: publish consume publish_<QUEUES>q
#              publish_shards<K> consume_shards<K> (default all)
#   JSON_OUT   when set, write the medians there as JSON
#   RESULTS_DIR  when set, keep every run's kairos bench output and load there
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
JOBS=${JOBS:-30000}
QUEUES=${QUEUES:-10000}
CONC=${CONC:-}
SHARDS=${SHARDS:-}

scripts/install-redis.sh
command -v redis-cli >/dev/null || { echo "cluster-bench: redis-cli not found (scripts/install-redis.sh)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${SERVER_BIN:-}" ]; then
	cp "$SERVER_BIN" "$work/kairos-server"
else
	go build -o "$work/kairos-server" ./server/cmd/kairos-server
fi
go build -o "$work/kairos" ./client/cmd/kairos

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# cport: a free port whose cluster bus port (+10000) is free as well.
cport() {
	python3 - <<'PORT'
import random, socket
for _ in range(1000):
    p = random.randint(20000, 55000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(p); break
PORT
}

# redis NAME PORT [extra config...]: a redis-server with production persistence.
redis() {
	local name=$1 p=$2 dir="$work/$1"
	shift 2
	mkdir -p "$dir"
	redis-server --port "$p" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes \
		--appendfsync everysec --maxmemory-policy noeviction --daemonize no "$@" >"$dir/redis.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && return; sleep 0.1; done
	echo "cluster-bench: redis $name on :$p did not start:" >&2
	cat "$dir/redis.log" >&2
	exit 1
}

# The single Redis.
sport=$(port)
redis single "$sport"
# REPLICA=1: a second single Redis with a replica of its own, as each
# cluster master has: the control for what feeding a replica costs a master.
if [ "${REPLICA:-}" = 1 ]; then
	rport=$(port); rrport=$(port)
	redis replicated "$rport"
	redis replica "$rrport" --replicaof 127.0.0.1 "$rport" --repl-diskless-sync-delay 0
	for _ in $(seq 100); do redis-cli -p "$rport" info replication | grep -q 'state=online' && break; sleep 0.1; done
fi

# The cluster: 6 nodes, 3 masters with a replica each.
cports=()
for i in 1 2 3 4 5 6; do
	p=$(cport)
	cports+=("$p")
	redis "node$i" "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
		--repl-diskless-sync-delay 0 --repl-ping-replica-period 1
done
caddrs=()
for p in "${cports[@]}"; do caddrs+=("127.0.0.1:$p"); done
redis-cli --cluster create "${caddrs[@]}" --cluster-replicas 1 --cluster-yes >"$work/cluster-create.log" 2>&1 ||
	{ cat "$work/cluster-create.log" >&2; exit 1; }
# Wait for every node to say cluster_state:ok and every master to have its
# replica in sync.
for _ in $(seq 300); do
	ok=0 synced=0
	for p in "${cports[@]}"; do
		redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && ok=$((ok + 1))
		info=$(redis-cli -p "$p" info replication 2>/dev/null | tr -d '\r')
		if grep -q '^role:master' <<<"$info" && grep -q 'state=online' <<<"$info"; then synced=$((synced + 1)); fi
	done
	[ "$ok" = 6 ] && [ "$synced" = 3 ] && break
	sleep 0.2
done
if [ "$ok" != 6 ] || [ "$synced" != 3 ]; then
	echo "cluster-bench: the cluster did not come up ($ok of 6 nodes ok, $synced of 3 masters with a replica online)" >&2
	exit 1
fi

# server NAME REDIS-SECTION: a kairos-server; sets its ports, PID and token.
declare -A API ADMIN SPID TOKEN
server() {
	local name=$1 section=$2 dir="$work/server-$1" aport hport token
	mkdir -p "$dir"
	aport=$(port); hport=$(port)
	cat >"$dir/server.toml" <<CONF
Host = "127.0.0.1"
Port = $aport
AdminHost = "127.0.0.1"
AdminPort = $hport
LogLevel = "warn"
[AdminRedis]
$section
[Pool.default]
$section
CONF
	"$work/kairos-server" -c "$dir/server.toml" >"$dir/server.log" 2>&1 &
	SPID[$name]=$!; pids+=($!)
	for _ in $(seq 150); do curl -sf "http://127.0.0.1:$hport/version" >/dev/null 2>&1 && break; sleep 0.1; done
	token=$(curl -sf -X POST "http://127.0.0.1:$hport/token/bench?description=cluster-bench" |
		tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
	if [ -z "$token" ]; then
		echo "cluster-bench: the $name server gave no token; its log:" >&2
		cat "$dir/server.log" >&2
		exit 1
	fi
	API[$name]="127.0.0.1:$aport"; ADMIN[$name]="127.0.0.1:$hport"; TOKEN[$name]=$token
}
server single "Addr = \"127.0.0.1:$sport\""
targets="single cluster"
if [ "${REPLICA:-}" = 1 ]; then
	server replicated "Addr = \"127.0.0.1:$rport\""
	targets="single replicated cluster"
fi
addrs_toml=$(printf '"%s",' "${caddrs[@]}")
server cluster "Cluster = true
Addrs = [${addrs_toml%,}]"
declare -A REDIS=([single]="127.0.0.1:$sport" [cluster]="${caddrs[0]}" [replicated]="127.0.0.1:${rport:-0}")

# The measurements: a label and kairos bench arguments.
labels=(publish consume "publish_${QUEUES}q")
declare -A ARGS=(
	[publish]="-d $DURATION publish"
	[consume]="-d $DURATION --jobs $JOBS consume"
	["publish_${QUEUES}q"]="-d $DURATION --queues $QUEUES publish"
)
if [ -n "$SHARDS" ]; then
	labels+=("publish_shards$SHARDS" "consume_shards$SHARDS")
	ARGS["publish_shards$SHARDS"]="-d $DURATION --shards $SHARDS publish"
	ARGS["consume_shards$SHARDS"]="-d $DURATION --jobs $JOBS --shards $SHARDS consume"
fi
if [ -n "${ONLY:-}" ]; then
	kept=()
	for l in "${labels[@]}"; do
		case " $ONLY " in *" $l "*) kept+=("$l") ;; esac
	done
	[ ${#kept[@]} -gt 0 ] || { echo "cluster-bench: ONLY=$ONLY names none of: ${labels[*]}" >&2; exit 2; }
	labels=("${kept[@]}")
fi
conc=()
[ -n "$CONC" ] && conc=(-c "$CONC")

out="$work/results"
mkdir -p "$out"
status=0
for round in $(seq "$ROUNDS"); do
	order=$targets
	[ $((round % 2)) = 0 ] && order=$(tr ' ' '\n' <<<"$targets" | tac | tr '\n' ' ')
	for label in "${labels[@]}"; do
		for target in $order; do
			case $label in *_shards*) [ "$target" = cluster ] || continue ;; esac
			f="$out/$round.$target.$label"
			uptime >"$f.load"
			# shellcheck disable=SC2086 # ARGS holds words
			if ! "$work/kairos" bench --addr "${API[$target]}" --admin-addr "${ADMIN[$target]}" --token "${TOKEN[$target]}" -n bench \
				--server-pid "${SPID[$target]}" --redis "${REDIS[$target]}" --json --runs 1 "${conc[@]}" ${ARGS[$label]} \
				>"$f.json" 2>"$f.err"; then
				echo "cluster-bench: round $round, $target, $label failed:" >&2
				cat "$f.err" >&2
				status=1
				continue
			fi
			printf 'round %s  %-7s  %-20s  %s\n' "$round" "$target" "$label" "$(sed 's/.*load average: *//' "$f.load")" >&2
		done
	done
	for target in $targets; do
		if ! kill -0 "${SPID[$target]}" 2>/dev/null; then
			echo "cluster-bench: the $target server exited; its log:" >&2
			cat "$work/server-$target/server.log" >&2
			exit 1
		fi
	done
done

if [ -n "${RESULTS_DIR:-}" ]; then mkdir -p "$RESULTS_DIR" && cp "$out"/* "$RESULTS_DIR"/; fi
python3 - "$out" "${JSON_OUT:-}" "${labels[@]}" <<'PY'
import json, os, statistics, sys

out, json_out, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = {}  # (label, target) -> {round: result}
loads = []
for name in sorted(os.listdir(out)):
    if not name.endswith(".json"):
        continue
    rnd, target, label = name[:-5].split(".", 2)
    with open(os.path.join(out, name)) as f:
        lines = [l for l in f if l.strip()]
    if not lines:
        continue
    r = json.loads(lines[-1])["result"]
    with open(os.path.join(out, name[:-5] + ".load")) as f:
        r["load"] = float(f.read().split("load average:")[-1].split(",")[0])
    loads.append(r["load"])
    runs.setdefault((label, target), {})[int(rnd)] = r

def cost(r):
    return (r.get("server_cpu_us_per_job") or 0) + (r.get("redis_cpu_us_per_job") or 0)

summary = {}
for label in labels:
    for target in ("single", "replicated", "cluster"):
        byround = runs.get((label, target))
        if not byround:
            continue
        rs = list(byround.values())
        med = lambda key: statistics.median((r.get(key) or 0) for r in rs)
        s = {k: med(k) for k in ("per_sec", "server_cpu_us_per_job", "redis_cpu_us_per_job",
                                 "redis_replicas_cpu_us_per_job", "loadgen_cpu_us_per_job", "p99_ms")}
        s["server_redis_cpu_us_per_job"] = statistics.median(cost(r) for r in rs)
        s["runs"] = len(rs)
        s["per_sec_min"], s["per_sec_max"] = min(r["per_sec"] for r in rs), max(r["per_sec"] for r in rs)
        s["loads_1min"] = [r["load"] for r in rs]
        # The masters by rank in each run (busiest first): which master a
        # queue lands on changes from run to run (a fresh queue name each).
        ranked = [sorted(r.get("redis_masters") or [], key=lambda m: -m["cpu_us_per_job"]) for r in rs]
        n = min((len(x) for x in ranked), default=0)
        s["masters_by_rank"] = [{"cpu_us_per_job": statistics.median(x[i]["cpu_us_per_job"] for x in ranked),
                                 "share": statistics.median(x[i]["share"] for x in ranked)} for i in range(n)]
        # Cluster against single, pair by pair (the same round, minutes apart).
        base = runs.get((label, "single"), {})
        pairs = [(r, base[k]) for k, r in byround.items() if k in base]
        if target != "single" and pairs:
            s["cost_vs_single"] = statistics.median(cost(r) / cost(b) for r, b in pairs if cost(b))
            s["redis_vs_single"] = statistics.median(r["redis_cpu_us_per_job"] / b["redis_cpu_us_per_job"] for r, b in pairs if b.get("redis_cpu_us_per_job"))
            s["server_vs_single"] = statistics.median(r["server_cpu_us_per_job"] / b["server_cpu_us_per_job"] for r, b in pairs if b.get("server_cpu_us_per_job"))
            s["rate_vs_single"] = statistics.median(r["per_sec"] / b["per_sec"] for r, b in pairs if b["per_sec"])
            s["cost_vs_single_range"] = [min(cost(r) / cost(b) for r, b in pairs if cost(b)), max(cost(r) / cost(b) for r, b in pairs if cost(b))]
        summary[(label, target)] = s

if not summary:
    print("cluster-bench: no measurement succeeded", file=sys.stderr)
    sys.exit(1)

def f(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"

print()
print(f"Kairos on one Redis and on a 3-master Redis Cluster (+3 replicas), this machine; medians of {max((s['runs'] for s in summary.values()), default=0)} rounds")
print(f"load (1 min) at the start of the runs: {min(loads, default=0):.2f}-{max(loads, default=0):.2f}")
print("CPU in µs per job; cluster redis = the masters' total; 'vs single' = median over the rounds of cluster / single in the same round")
print()
hdr = ["scenario", "target", "jobs/s", "min-max", "p99 ms", "server", "redis", "server+redis", "replicas", "loadgen",
       "server+redis vs single (min-max)", "redis vs single", "jobs/s vs single"]
rows = [hdr]
for label in labels:
    for target in ("single", "replicated", "cluster"):
        s = summary.get((label, target))
        if not s:
            continue
        vs = lambda k: f"{s[k]:.2f}x" if k in s else "-"
        rng = f" ({s['cost_vs_single_range'][0]:.2f}-{s['cost_vs_single_range'][1]:.2f})" if "cost_vs_single_range" in s else ""
        rows.append([label, target, f(s["per_sec"], 0), f"{s['per_sec_min']:.0f}-{s['per_sec_max']:.0f}", f(s["p99_ms"], 2),
                     f(s["server_cpu_us_per_job"]), f(s["redis_cpu_us_per_job"]), f(s["server_redis_cpu_us_per_job"]),
                     f(s["redis_replicas_cpu_us_per_job"]) if target == "cluster" else "-",
                     f(s["loadgen_cpu_us_per_job"]), vs("cost_vs_single") + rng, vs("redis_vs_single"), vs("rate_vs_single")])
w = [max(len(str(r[i])) for r in rows) for i in range(len(hdr))]
for r in rows:
    print("  ".join(str(c).rjust(w[i]) for i, c in enumerate(r)))

print()
print("Redis CPU µs per job on each cluster master, busiest first (median by rank; share of the masters' total):")
for label in labels:
    s = summary.get((label, "cluster"))
    if not s or not s["masters_by_rank"]:
        continue
    cells = [f"{m['cpu_us_per_job']:.1f} ({100 * m['share']:.0f}%)" for m in s["masters_by_rank"]]
    print(f"  {label:>20}: " + ", ".join(cells))
    # Each run's split, in address order: a medians-by-rank line hides a
    # bimodal spread (a sharded queue on three masters in some runs, two in
    # others).
    each = ["/".join(f"{100 * m['share']:.0f}" for m in sorted(r.get("redis_masters") or [], key=lambda m: m["addr"]))
            for _, r in sorted(runs[(label, "cluster")].items())]
    print(f"  {'':>20}  each run (%): " + ", ".join(each))

if json_out:
    with open(json_out, "w") as fh:
        json.dump({f"{l}/{t}": s for (l, t), s in summary.items()}, fh, indent=1)
PY
exit $status
