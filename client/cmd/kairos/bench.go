package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client/bench"
)

// benchScenarios maps a scenario name to its run function, in table order.
var benchScenarios = []struct {
	name    string
	run     func(context.Context, bench.Config) (bench.Result, error)
	ceiling bool // has a meaningful ceiling-server figure
}{
	{"publish", bench.Publish, true},
	{"bulk", bench.BulkPublish, true},
	{"consume", bench.ConsumeAck, true},
	{"latency", bench.Latency, false},
	{"delayed", bench.Delayed, false},
	{"burst", bench.Burst, false},
	{"idle", bench.Idle, false},
	{"flood", bench.Flood, false},
	{"publish-go", bench.PublishGo, false},
	{"bulk-go", bench.BulkPublishGo, false},
	{"consume-go", bench.ConsumeAckGo, false},
	{"delayed-go", bench.DelayedGo, false},
}

const benchLong = `Measure an lmstfy-compatible server (Kairos or lmstfy itself) under load.

Scenarios (default: publish bulk consume latency delayed burst):
  publish   single publishes by --concurrency clients for --duration
  bulk      bulk publishes of --bulk-size jobs (16 clients unless --concurrency is set,
            as bulk-go)
  consume   consume + ACK of --jobs pre-published jobs by --concurrency consumers
  latency   publish at --rate jobs/s while consumers long-poll: publish-to-delivery time
  delayed   --jobs jobs delayed 1-5 s: lateness (delivery - due); a negative min means early
  burst     --jobs jobs due in the same second: time until all are ready
  idle      --concurrency long-polling consumers, then one job per 100 of them
  flood     --publishers (8) keep-alive publishers with --token beside --concurrency
            clients sending a publish with a random token on a new connection each:
            the valid publishers' jobs and latency under a flood of bad tokens;
            --flood-body N: each flood request announces N bytes and sends N-1
  publish-go, bulk-go, consume-go, delayed-go
            publish, bulk, consume and delayed through the Go client (package
            client) and its Worker instead of the bare keep-alive client

--ceiling runs the same scenarios against a do-nothing server of the same API,
started as a child process (this binary's hidden "bench ceiling-server"), and
prints each figure as a share of it: what this machine and this load generator
allow. --redis-benchmark HOST:PORT also runs redis-benchmark against the
server's Redis. --runs N repeats each scenario and prints the median with
min-max; with --interleave the runs of the scenarios alternate (ABBA: run 1
of each in order, run 2 in reverse order, ...), so that two scenarios
compared (bulk and bulk-go) meet the same Redis, which grows with every
publish run.

CPU per job (µs; CPU time over the scenario's measured phase / jobs handled) is
printed for the load generator itself (getrusage), the ceiling server (its
/proc/PID/stat), the server under test with --server-pid PID (read from
/proc/PID/stat, so only for a server on this machine, Linux) and Redis with
--redis HOST:PORT (INFO cpu: used_cpu_sys + used_cpu_user). With --redis, each
measured phase also starts only once that Redis runs no snapshot or AOF
rewrite (INFO persistence), so that a rewrite set off by a preload or a fill
does not land in the measurement; the wait is printed.

On a Redis Cluster, --redis takes one seed (or several, HOST:PORT,...): the
nodes are found with CLUSTER NODES at each reading, the Redis CPU is the
masters' total, a table splits it per master (JSON: redis_masters) and gives
the replicas' apart (redis_replicas_cpu_us_per_job), and a measured phase
waits for a fork on any node.

--shards K sets each bench queue's shards (a hot queue spread over K slot
groups) with PUT /queue/NS/Q/config {"shards":K} on --admin-addr before the
scenario publishes to it; the bench fails if the server does not answer
"shards": K.

--groups N puts the jobs the consume scenario publishes first in N groups of
its queue (group= on each bulk publish, in turn); --max-in-flight N and
--group-max-in-flight M set the queue's limits the same way as --shards
(doc/performance.md, "Fair groups and in-flight limits").

"kairos bench delay-proxy --to HOST:PORT --delay 1ms" forwards TCP to HOST:PORT
with that delay each way and prints its address: point the server's AdminRedis
at it to measure the flood scenario with the admin Redis 1 ms away.`

// ceilingServerCmd is the hidden `kairos bench ceiling-server`: the
// do-nothing server --ceiling runs as a child process.
func (c *cli) ceilingServerCmd() *cobra.Command {
	var listen string
	var exitOnEOF bool
	cmd := &cobra.Command{
		Use:    "ceiling-server",
		Short:  "Serve the do-nothing ceiling server of kairos bench --ceiling",
		Long:   "Serve a do-nothing server of the lmstfy API (what kairos bench --ceiling measures) and print its address on the first line of the output.",
		Hidden: true,
		Args:   args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usagef("--listen: %v", err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if _, err := fmt.Fprintln(c.io.out, ln.Addr().String()); err != nil {
				_ = ln.Close()
				return err
			}
			if exitOnEOF {
				go func() { _, _ = io.Copy(io.Discard, c.io.in); cancel() }()
			}
			return bench.ServeCeiling(ctx, ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on")
	cmd.Flags().BoolVar(&exitOnEOF, "exit-on-stdin-eof", false, "exit when the standard input closes (as --ceiling's child)")
	return cmd
}

// delayProxyCmd is `kairos bench delay-proxy`: a TCP proxy that delays
// each way (bench.DelayProxy), to put a dependency "1 ms away".
func (c *cli) delayProxyCmd() *cobra.Command {
	var listen, to string
	var delay time.Duration
	cmd := &cobra.Command{
		Use:   "delay-proxy",
		Short: "Forward TCP to --to with --delay each way (a Redis 1 ms away)",
		Long: "Forward every connection to --to, delaying what goes each way by --delay without limiting throughput, " +
			"until interrupted; the first line of the output is the address it listens on. Point a server's AdminRedis " +
			"at it to measure the flood scenario with the admin Redis 1 ms away.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usagef("--to is required")
			}
			if delay < 0 {
				return usagef("--delay must not be negative")
			}
			p, err := bench.StartDelayProxy(listen, to, delay)
			if err != nil {
				return usagef("--listen: %v", err)
			}
			defer func() { _ = p.Close() }()
			if _, err := fmt.Fprintln(c.io.out, p.Addr()); err != nil {
				return err
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on")
	cmd.Flags().StringVar(&to, "to", "", "address to forward to (HOST:PORT)")
	cmd.Flags().DurationVar(&delay, "delay", time.Millisecond, "delay each way")
	return cmd
}

func (c *cli) benchCmd() *cobra.Command {
	var cfg bench.Config
	var ceiling, interleave bool
	var redisAddr, redisCPUAddr string
	var runs, preload, serverPID, shards, maxInFlight, groupMaxInFlight int
	var shardsPool string
	cmd := &cobra.Command{
		Use:   "bench [scenario...]",
		Short: "Load-test an lmstfy-compatible server",
		Long:  benchLong,
		Args:  args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, names []string) error {
			if len(names) == 0 {
				names = []string{"publish", "bulk", "consume", "latency", "delayed", "burst"}
			}
			for _, name := range names {
				if _, ok := findScenario(name); !ok {
					return usagef("unknown scenario %q", name)
				}
			}
			if !cmd.Flags().Changed("concurrency") {
				cfg.Concurrency = 0 // each scenario's default
			}
			cfg.Addr = httpAddr(c.addr)
			cfg.Token = c.token
			cfg.TLS = c.tlsConfig
			if c.namespace != "" {
				if err := checkNamespace(c.namespace); err != nil {
					return err
				}
				cfg.Namespace = c.namespace
			}
			// The scenarios' queues are the prefix and a suffix such as
			// "-publish": the prefix must be a queue name itself.
			if err := checkQueues(cfg.Queue); err != nil {
				return usagef("--queue: %v", err)
			}
			ctx := cmd.Context()
			if serverPID != 0 {
				cfg.ServerCPU = bench.ProcessCPU(serverPID)
				if _, err := cfg.ServerCPU(ctx); err != nil {
					return usagef("--server-pid: %v (a local server's PID is needed)", err)
				}
			}
			if redisCPUAddr != "" {
				probe, err := bench.NewRedisProbe(redisCPUAddr)
				if err != nil {
					return usagef("--redis: %v", err)
				}
				defer func() { _ = probe.Close() }()
				nodes, err := probe.NodesCPU(ctx)
				if err != nil {
					return fmt.Errorf("--redis: %w", err)
				}
				if len(nodes) > 1 {
					masters := 0
					for _, n := range nodes {
						if n.Master {
							masters++
						}
					}
					fmt.Fprintf(c.io.err, "--redis: a Redis Cluster of %d masters and %d replicas; metering each\n", masters, len(nodes)-masters)
				}
				cfg.RedisNodes = probe.NodesCPU
				cfg.Settle = func(ctx context.Context) {
					waited, err := probe.Quiet(ctx)
					switch {
					case err != nil && ctx.Err() == nil:
						fmt.Fprintf(c.io.err, "--redis: %v\n", err)
					case waited > 0:
						fmt.Fprintf(c.io.err, "waited %.1fs for Redis to end a snapshot or AOF rewrite\n", waited.Seconds())
					}
				}
			}
			if shards < 0 {
				return usagef("--shards must not be negative")
			}
			if shards > 0 {
				ns := cfg.Namespace
				if ns == "" {
					ns = "bench" // bench.Config's default
				}
				cfg.PrepareQueue = c.setShards(ns, shardsPool, shards)
			}
			if maxInFlight < 0 || groupMaxInFlight < 0 || cfg.Groups < 0 {
				return usagef("--max-in-flight, --group-max-in-flight and --groups must not be negative")
			}
			if maxInFlight > 0 || groupMaxInFlight > 0 {
				ns := cfg.Namespace
				if ns == "" {
					ns = "bench" // bench.Config's default
				}
				cfg.PrepareQueue = c.setLimits(ns, shardsPool, maxInFlight, groupMaxInFlight, cfg.PrepareQueue)
			}
			var ceil *bench.CeilingProcess
			if ceiling {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--ceiling: %w", err)
				}
				ceil, err = bench.StartCeilingProcess(ctx, exe, "bench", "ceiling-server", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof")
				if err != nil {
					return fmt.Errorf("--ceiling: %w", err)
				}
				defer func() { _ = ceil.Close() }()
			}
			if preload > 0 {
				q, err := bench.Preload(ctx, cfg, preload)
				if err != nil {
					return fmt.Errorf("preload: %w", err)
				}
				fmt.Fprintf(c.io.err, "preloaded %d delayed jobs into %s\n", preload, q)
				defer func() { _ = bench.Destroy(context.WithoutCancel(ctx), cfg, q) }()
			}
			// Each scenario's configuration: bulk and bulk-go default
			// to 16 clients (64 bulk requests of 64 jobs in flight
			// measure the queueing, not the server).
			scenarioCfg := func(name string) bench.Config {
				run := cfg
				if (name == "bulk" || name == "bulk-go") && !cmd.Flags().Changed("concurrency") {
					run.Concurrency = 16
				}
				return run
			}
			// The runs of every scenario, in a row or interleaved.
			results := make([][]bench.Result, len(names))
			if interleave {
				for i := range max(runs, 1) {
					for j := range names {
						k := j
						if i%2 == 1 {
							k = len(names) - 1 - j // ABBA: no scenario always goes first
						}
						sc, _ := findScenario(names[k])
						r, err := sc.run(ctx, scenarioCfg(sc.name))
						if err != nil {
							return fmt.Errorf("%s: %w", sc.name, err)
						}
						results[k] = append(results[k], r)
					}
				}
			}
			var rows []benchRow
			for i, name := range names {
				sc, _ := findScenario(name)
				run := scenarioCfg(sc.name)
				var row benchRow
				var err error
				if interleave {
					row = rowOf(results[i])
				} else if row, err = measure(ctx, sc.run, run, runs); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if ceil != nil && sc.ceiling {
					ceilCfg := run
					ceilCfg.Addr = ceil.Addr
					ceilCfg.ServerCPU, ceilCfg.RedisCPU, ceilCfg.RedisNodes, ceilCfg.Settle = ceil.CPU(), nil, nil, nil
					ceilCfg.PrepareQueue = nil
					cr, err := measure(ctx, sc.run, ceilCfg, runs)
					if err != nil {
						return fmt.Errorf("%s on the ceiling server: %w", name, err)
					}
					row.ceiling = &cr.median
				}
				rows = append(rows, row)
				if c.jsonOut {
					out := map[string]any{"result": row.median, "runs": runs, "min_per_sec": row.min, "max_per_sec": row.max}
					if row.ceiling != nil {
						out["ceiling_per_sec"] = row.ceiling.PerSec
						out["share_of_ceiling"] = row.median.PerSec / row.ceiling.PerSec
						out["ceiling_server_cpu_us_per_job"] = row.ceiling.ServerCPUUS
						out["ceiling_loadgen_cpu_us_per_job"] = row.ceiling.LoadgenCPUUS
					}
					if err := c.printJSON(out); err != nil {
						return err
					}
				}
			}
			if !c.jsonOut {
				printBench(c.io.out, rows, runs)
			}
			if redisAddr != "" {
				return c.redisBenchmark(ctx, redisAddr, cfg.Concurrency)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", 64, "concurrent clients (one connection each)")
	f.DurationVarP(&cfg.Duration, "duration", "d", 10*time.Second, "length of the timed scenarios")
	f.IntVar(&cfg.BodySize, "body-size", 100, "job body size in bytes")
	f.IntVar(&cfg.Jobs, "jobs", 20000, "jobs of the counted scenarios (consume, delayed, burst)")
	f.IntVar(&cfg.Rate, "rate", 4000, "publish rate of the latency scenario (jobs/s)")
	f.IntVar(&cfg.BulkSize, "bulk-size", 64, "jobs per bulk publish (at most 64)")
	f.StringVar(&cfg.Queue, "queue", "bench", "queue name prefix")
	f.BoolVar(&ceiling, "ceiling", false, "also measure a do-nothing server of the same API, run as a child process")
	f.StringVar(&redisAddr, "redis-benchmark", "", "also run redis-benchmark against this Redis (HOST:PORT)")
	f.IntVar(&runs, "runs", 1, "runs per scenario; the median is printed with min-max")
	f.BoolVar(&interleave, "interleave", false, "alternate the scenarios' runs (run 1 of each in order, run 2 in reverse order, ...) instead of running each scenario's runs in a row: pairs such as bulk and bulk-go then meet the same growing Redis")
	f.IntVar(&cfg.Queues, "queues", 1, "spread the publish scenario over this many queues")
	f.IntVar(&cfg.Publishers, "publishers", bench.DefaultFloodPublishers, "valid publishers of the flood scenario (--concurrency is its flood's clients)")
	f.IntVar(&cfg.FloodBody, "flood-body", 0, "flood scenario: each flood request announces a body of this many bytes and sends one byte less (0: a plain publish)")
	f.IntVar(&preload, "preload-delayed", 0, "first publish this many jobs delayed by an hour (a large timer), destroyed at the end")
	f.IntVar(&serverPID, "server-pid", 0, "PID of the server under test, on this machine: print its CPU µs per job (/proc/PID/stat)")
	f.StringVar(&redisCPUAddr, "redis", "", "the server's Redis (HOST:PORT, a redis:// URL, or a cluster's seeds HOST:PORT,...): print its CPU µs per job (INFO cpu), per master on a cluster; each measured phase waits until it runs no snapshot or AOF rewrite")
	f.IntVar(&shards, "shards", 0, "set each bench queue's shards to this (PUT /queue/NS/Q/config on --admin-addr) before publishing to it; 0 leaves them")
	f.StringVar(&shardsPool, "shards-pool", "", "the pool of the queues --shards (and --max-in-flight) configures (the admin API's ?pool=; default: the default pool)")
	f.IntVar(&cfg.Groups, "groups", 0, "put the jobs the consume scenario publishes first in this many groups (group= on each bulk publish, in turn); 0: no group")
	f.IntVar(&maxInFlight, "max-in-flight", 0, "set each bench queue's max_in_flight (PUT /queue/NS/Q/config on --admin-addr) before publishing to it; 0 leaves it")
	f.IntVar(&groupMaxInFlight, "group-max-in-flight", 0, "the same for group_max_in_flight")
	cmd.AddCommand(c.ceilingServerCmd(), c.delayProxyCmd())
	return cmd
}

func findScenario(name string) (struct {
	name    string
	run     func(context.Context, bench.Config) (bench.Result, error)
	ceiling bool
}, bool) {
	for _, s := range benchScenarios {
		if s.name == name {
			return s, true
		}
	}
	return benchScenarios[0], false
}

func httpAddr(a string) string {
	if strings.HasPrefix(a, "http://") || strings.HasPrefix(a, "https://") {
		return strings.TrimRight(a, "/")
	}
	return "http://" + a
}

type benchRow struct {
	median   bench.Result
	min, max float64
	ceiling  *bench.Result // the ceiling server's median run, with --ceiling
}

// measure runs a scenario n times and keeps the median run (by rate, or by
// p99 for the latency-type scenarios) with the min-max of the rates.
func measure(ctx context.Context, run func(context.Context, bench.Config) (bench.Result, error), cfg bench.Config, n int) (benchRow, error) {
	if n < 1 {
		n = 1
	}
	var rs []bench.Result
	for i := 0; i < n; i++ {
		r, err := run(ctx, cfg)
		if err != nil {
			return benchRow{}, err
		}
		rs = append(rs, r)
	}
	return rowOf(rs), nil
}

// rowOf is the row of a scenario's runs rs (at least one): the median run
// (by rate, or by p99 for the latency-type scenarios) with the min-max of
// the rates.
func rowOf(rs []bench.Result) benchRow {
	sort.Slice(rs, func(i, j int) bool { return rs[i].PerSec < rs[j].PerSec })
	row := benchRow{min: rs[0].PerSec, max: rs[len(rs)-1].PerSec}
	switch rs[0].Scenario {
	case "publish_to_consume", "delayed_lateness", "idle_long_polls", "burst_due":
		sort.Slice(rs, func(i, j int) bool { return rs[i].P99MS+rs[i].MaxMS < rs[j].P99MS+rs[j].MaxMS })
	}
	row.median = rs[len(rs)/2]
	return row
}

func printBench(w io.Writer, rows []benchRow, runs int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tops\terrors\tper sec\tmin-max\tp50 ms\tp99 ms\tmax ms\tmin ms\tceiling/s\tshare\t")
	for _, r := range rows {
		m := r.median
		ceil, share := "-", "-"
		if r.ceiling != nil && r.ceiling.PerSec > 0 {
			ceil = fmt.Sprintf("%.0f", r.ceiling.PerSec)
			share = fmt.Sprintf("%.0f%%", 100*m.PerSec/r.ceiling.PerSec)
		}
		spread := "-"
		if runs > 1 {
			spread = fmt.Sprintf("%.0f-%.0f", r.min, r.max)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t\n",
			m.Scenario, m.Ops, m.Errors, m.PerSec, spread, m.P50MS, m.P99MS, m.MaxMS, m.MinMS, ceil, share)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nCPU µs per job (median run):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tload generator\tserver\tredis\tceiling: load generator\tceiling: server\t")
	us := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	for _, r := range rows {
		m := r.median
		cl, cs := "-", "-"
		if r.ceiling != nil {
			cl, cs = us(r.ceiling.LoadgenCPUUS), us(r.ceiling.ServerCPUUS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Scenario, us(m.LoadgenCPUUS), us(m.ServerCPUUS), us(m.RedisCPUUS), cl, cs)
	}
	_ = tw.Flush()
	printMasters(w, rows)
	for _, r := range rows {
		if r.median.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.median.Scenario, r.median.Note)
		}
	}
}

// printMasters prints, for a Redis Cluster (--redis on a cluster), each
// master's part of Redis's CPU per job and the replicas' total.
func printMasters(w io.Writer, rows []benchRow) {
	var addrs []string
	slots := make(map[string]int)
	for _, r := range rows {
		for _, m := range r.median.RedisMasters {
			if _, ok := slots[m.Addr]; !ok {
				addrs = append(addrs, m.Addr)
			}
			slots[m.Addr] = m.Slots
		}
	}
	if len(addrs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nRedis CPU µs per job by cluster master (share of the masters' total), median run:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "scenario\tmasters")
	for _, a := range addrs {
		fmt.Fprintf(tw, "\t%s (%d slots)", a, slots[a])
	}
	fmt.Fprintln(tw, "\treplicas\t")
	for _, r := range rows {
		m := r.median
		if len(m.RedisMasters) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f", m.Scenario, m.RedisCPUUS)
		for _, a := range addrs {
			cell := "-"
			for _, mc := range m.RedisMasters {
				if mc.Addr == a {
					cell = fmt.Sprintf("%.1f (%.0f%%)", mc.CPUUS, 100*mc.Share)
				}
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintf(tw, "\t%.1f\t\n", m.RedisReplicasCPUUS)
	}
	_ = tw.Flush()
}

// redisBenchmark runs redis-benchmark against the same Redis: plain
// commands, and the shape of Kairos's publish (one Lua script doing SET NX
// and LPUSH) and consume (RPOP + ZADD + GET), at one round trip per job.
func (c *cli) redisBenchmark(ctx context.Context, addr string, conc int) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--redis-benchmark: %v", err)
	}
	if conc <= 0 {
		conc = 64
	}
	base := []string{"-h", host, "-p", port, "-c", fmt.Sprint(conc), "-n", "200000", "-q"}
	labels := []string{"", "publish-shaped Lua (SET NX PX + LPUSH)", "consume-shaped Lua (RPOP + ZADD + GET)"}
	runs := [][]string{
		append(append([]string{}, base...), "-t", "set,lpush,rpop"),
		append(append([]string{}, base...), "eval", "redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 3600000) return redis.call('LPUSH', KEYS[2], ARGV[1])", "2", "bench:j:__rand_int__", "bench:q", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
		append(append([]string{}, base...), "eval", "local e = redis.call('RPOP', KEYS[1]) if e then redis.call('ZADD', KEYS[2], 1, e) return redis.call('GET', KEYS[3]) end return false", "3", "bench:q", "bench:t", "bench:j:1"),
	}
	fmt.Fprintln(c.io.out, "redis-benchmark (same Redis; Lua lines: publish-shaped SET NX + LPUSH, consume-shaped RPOP + ZADD + GET):")
	for i, a := range runs {
		out, err := exec.CommandContext(ctx, "redis-benchmark", a...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("redis-benchmark: %v: %s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if j := strings.LastIndex(line, "\r"); j >= 0 {
				line = line[j+1:]
			}
			line = strings.TrimSpace(line)
			if labels[i] != "" {
				if _, rest, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(line, "eval") {
					line = labels[i] + ": " + rest
				}
			}
			fmt.Fprintln(c.io.out, "  "+line)
		}
	}
	_, _ = exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port, "del", "bench:q", "bench:t").CombinedOutput()
	return nil
}
