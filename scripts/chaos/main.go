// Command chaos is Kairos's chaos suite: it runs publishers and consumers
// with unique sequence numbers against a real kairos-server and real
// redis-servers (all on 127.0.0.1, in a temporary directory) and, while
// they run, SIGKILLs and restarts the server, SIGKILLs and restarts Redis
// (AOF with appendfsync always and everysec), flushes the Lua script cache,
// pauses Redis, fails over a Sentinel setup, moves slots between the
// masters of a Redis Cluster and SIGKILLs its masters (cluster.go), and
// drops consumers mid-job.
// After each scenario it drains the queues and dead letters and reports
// acknowledged publishes, deliveries, dead-lettered and lost jobs,
// duplicates, lateness and outage time, as one JSON line and, at the end,
// a table. It exits 1 when a scenario fails (an acknowledged job lost where
// Redis itself cannot lose it, a job left behind, a disruption not done).
//
//	go run ./scripts/chaos -scenario all -duration 45s
//
// doc/reliability.md explains the guarantees and holds the measured table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command-line flags.
type options struct {
	scenarios   string
	duration    time.Duration
	timeout     time.Duration
	serverKills int
	redisKills  int
	flushes     int
	pauses      int
	failovers   int
	reshards    int
	masterKills int
	rate        int
	publishers  int
	consumers   int
	waitCostN   int
	soak        soakConfig
	noisy       noisyConfig
	limits      limitsConfig
	serverBin   string
	redisBin    string
	jsonOnly    bool
	keep        bool
	verbose     bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.scenarios, "scenario", "all", "comma-separated scenarios, or all: "+strings.Join(scenarioNames(), ", "))
	fs.DurationVar(&o.duration, "duration", 45*time.Second, "chaos time of each scenario (deadletter runs half of it; failover at least 10 s per failover)")
	fs.DurationVar(&o.timeout, "timeout", 21*time.Minute, "abort everything after this long (make chaos takes about 16 minutes)")
	fs.IntVar(&o.serverKills, "server-kills", 32, "kairos-server SIGKILLs in the server-kill scenario")
	fs.IntVar(&o.redisKills, "redis-kills", 6, "redis-server SIGKILLs in each redis-kill scenario")
	fs.IntVar(&o.flushes, "flushes", 8, "SCRIPT FLUSHes in the flush-pause scenario")
	fs.IntVar(&o.pauses, "pauses", 8, "CLIENT PAUSEs in the flush-pause scenario")
	fs.IntVar(&o.failovers, "failovers", 6, "Sentinel failovers in the failover scenario (kill, hang and SENTINEL FAILOVER in turn)")
	fs.IntVar(&o.reshards, "reshards", 8, "slot moves in the cluster-reshard scenario (each: a busy queue's slot, then 200 more with redis-cli --cluster reshard)")
	fs.IntVar(&o.masterKills, "master-kills", 4, "master SIGKILLs in each cluster-master-kill scenario")
	fs.IntVar(&o.rate, "rate", 300, "publishes per second (all publishers together)")
	fs.IntVar(&o.publishers, "publishers", 4, "publishing goroutines (the first publishes in bulk)")
	fs.IntVar(&o.consumers, "consumers", 4, "consuming goroutines (the last takes up to 8 jobs a request)")
	fs.IntVar(&o.waitCostN, "wait-cost-n", 3000, "publishes per variant in the wait-cost measurement")
	fs.DurationVar(&o.soak.Duration, "soak-duration", 4*time.Minute, "length of the soak (-scenario soak)")
	fs.IntVar(&o.soak.Rate, "soak-rate", 1000, "publishes per second in the soak")
	fs.IntVar(&o.soak.Queues, "soak-queues", 50, "queues of the soak")
	fs.IntVar(&o.soak.Unconsumed, "soak-unconsumed", 5, "queues of the soak that nobody consumes (their jobs have a TTL of 10 s or 30 s)")
	o.noisy = defaultNoisyConfig()
	fs.DurationVar(&o.noisy.Phase, "noisy-phase", o.noisy.Phase, "length of the noisy scenario's baseline, flood and full phases")
	fs.IntVar(&o.noisy.Quiet, "noisy-quiet", o.noisy.Quiet, "quiet namespaces of the noisy scenario")
	fs.IntVar(&o.noisy.QuietRate, "noisy-quiet-rate", o.noisy.QuietRate, "publishes per second of each quiet namespace")
	fs.IntVar(&o.noisy.Burst, "noisy-burst", o.noisy.Burst, "jobs of the noisy namespace's burst, all due at one instant (a multiple of 64)")
	fs.StringVar(&o.noisy.MaxMemory, "noisy-maxmemory", o.noisy.MaxMemory, "maxmemory of the noisy scenario's pool (it must hold the burst)")
	fs.Float64Var(&o.noisy.Factor, "noisy-factor", o.noisy.Factor, "a noisy phase's quiet p99s may be this many times the baseline's …")
	fs.DurationVar(&o.noisy.Floor, "noisy-floor", o.noisy.Floor, "… or the baseline's plus this, whichever is more")
	fs.IntVar(&o.noisy.NoisyWriteLimit, "noisy-write-limit", o.noisy.NoisyWriteLimit, "rate limit of the noisy token, publish requests per second (0: none, an unbounded flood)")
	fs.IntVar(&o.noisy.NoisyJobLimit, "noisy-job-limit", o.noisy.NoisyJobLimit, "rate limit of the noisy token in published jobs per second (write_jobs), set once its burst is published (0: none)")
	o.limits = defaultLimitsConfig()
	fs.IntVar(&o.limits.Servers, "limits-servers", o.limits.Servers, "kairos-servers of the limits scenario, on one Redis")
	fs.IntVar(&o.limits.Consumers, "limits-consumers", o.limits.Consumers, "consumers of the limits scenario (spread over its servers)")
	fs.IntVar(&o.limits.Rate, "limits-rate", o.limits.Rate, "publishes per second of the limits scenario")
	fs.IntVar(&o.limits.MaxInFlight, "limits-max-in-flight", o.limits.MaxInFlight, "max_in_flight of the limits scenario's queue fair")
	fs.IntVar(&o.limits.GroupMax, "limits-group-max-in-flight", o.limits.GroupMax, "group_max_in_flight of the queue fair")
	fs.IntVar(&o.limits.Groups, "limits-groups", o.limits.Groups, "named groups of the queue fair (it also has jobs of the default group)")
	fs.IntVar(&o.limits.CappedMax, "limits-capped-max-in-flight", o.limits.CappedMax, "max_in_flight of the queue capped (no group limit)")
	fs.DurationVar(&o.limits.TTR, "limits-ttr", o.limits.TTR, "TTR of the limits scenario's deliveries")
	fs.IntVar(&o.limits.ServerKills, "limits-server-kills", o.limits.ServerKills, "kairos-server SIGKILLs in the limits scenario (its servers in turn)")
	fs.IntVar(&o.limits.RedisKills, "limits-redis-kills", o.limits.RedisKills, "redis-server SIGKILLs (restarted from the AOF) in the limits scenario")
	fs.StringVar(&o.serverBin, "server-bin", "", "kairos-server binary (default: go build it into the temporary directory)")
	fs.StringVar(&o.redisBin, "redis-bin", "", "redis-server binary (default: from PATH)")
	fs.BoolVar(&o.jsonOnly, "json", false, "print only the JSON lines (no table)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, configs, AOF files)")
	fs.BoolVar(&o.verbose, "v", false, "log progress in detail")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.duration <= 0 || o.rate <= 0 || o.publishers <= 0 || o.consumers <= 0 {
		return o, errors.New("-duration, -rate, -publishers and -consumers must be positive")
	}
	if _, err := o.selected(); err != nil {
		return o, err
	}
	if o.soak.Duration <= 0 || o.soak.Rate <= 0 || o.soak.Unconsumed <= 0 || o.soak.Queues <= o.soak.Unconsumed {
		return o, errors.New("-soak-duration, -soak-rate and -soak-unconsumed must be positive, and -soak-queues larger than -soak-unconsumed")
	}
	if o.noisy.Phase < 2*time.Second || o.noisy.Quiet <= 0 || o.noisy.QuietRate <= 0 || o.noisy.Burst < burstPer || o.noisy.Factor < 1 || o.noisy.Floor < 0 || o.noisy.NoisyWriteLimit < 0 || o.noisy.NoisyJobLimit < 0 {
		return o, errors.New("-noisy-phase must be at least 2s, -noisy-quiet and -noisy-quiet-rate positive, -noisy-burst at least 64, -noisy-factor at least 1, -noisy-floor, -noisy-write-limit and -noisy-job-limit not negative")
	}
	if o.limits.Servers < 1 || o.limits.Consumers < 1 || o.limits.Rate < 1 || o.limits.MaxInFlight < 1 || o.limits.GroupMax < 0 ||
		o.limits.Groups < 1 || o.limits.CappedMax < 1 || o.limits.TTR < 100*time.Millisecond || o.limits.ServerKills < 0 || o.limits.RedisKills < 0 {
		return o, errors.New("-limits-servers, -consumers, -rate, -max-in-flight, -groups and -capped-max-in-flight must be positive, -limits-ttr at least 100ms, the rest not negative")
	}
	o.limits.Duration = o.duration
	o.soak.TTLs = []int{10, 30}
	o.soak.Every = min(10*time.Second, max(2*time.Second, o.soak.Duration/24))
	return o, nil
}

// scenarioNames lists every scenario, in the order "all" runs them.
func scenarioNames() []string {
	var names []string
	for _, sc := range catalog(options{duration: time.Second}) {
		names = append(names, sc.Name)
	}
	return append(names, "noisy", "limits", "wait-cost", "soak", "ci", "ci-cluster")
}

// catalog is every scenario, in the order "all" runs them (all but the
// opt-in ones), shaped by the flags.
func catalog(o options) []scenario {
	d := o.duration
	return []scenario{
		{Name: "server-kill", Fsync: "everysec", Tries: 10, TTR: 1, Duration: d, ServerKills: o.serverKills},
		{Name: "redis-kill-always", Fsync: "always", Tries: 10, TTR: 1, Duration: d, RedisKills: o.redisKills},
		{Name: "redis-kill-everysec", Fsync: "everysec", Tries: 10, TTR: 1, Duration: d, RedisKills: o.redisKills, LossExpected: true},
		{Name: "flush-pause", Fsync: "everysec", Tries: 10, TTR: 1, Duration: d, Flushes: o.flushes, Pauses: o.pauses},
		{Name: "consumer-drop", Fsync: "everysec", Tries: 10, TTR: 1, Duration: d, Droppers: 2},
		{Name: "deadletter", Fsync: "everysec", Tries: 1, TTR: 1, Duration: d / 2, Droppers: 2},
		{Name: "failover", Sentinel: true, Fsync: "always", Tries: 10, TTR: 1,
			Duration: max(d, time.Duration(o.failovers)*10*time.Second), Failovers: o.failovers, LossExpected: true},
		// The same failovers with the durability option: a publish is
		// acknowledged only once the replica has it, so nothing is lost.
		// Opt-in (by name): it would push "all" (about 16 minutes) further.
		{Name: "failover-wait", Sentinel: true, Fsync: "always", Tries: 10, TTR: 1, WaitReplicas: 1,
			Duration: max(d, time.Duration(o.failovers)*10*time.Second), Failovers: o.failovers, OptIn: true},
		// Redis Cluster (cluster.go): slot moves of the busy queues' slots
		// while jobs flow, SIGKILLs of the master of a busy queue (without
		// and with WaitReplicas) and of the kairos-server.
		{Name: "cluster-reshard", Cluster: true, Fsync: "everysec", Tries: 10, TTR: 1, Duration: d, Reshards: o.reshards},
		{Name: "cluster-master-kill", Cluster: true, Fsync: "everysec", Tries: 10, TTR: 1, Duration: d,
			MasterKills: o.masterKills, LossExpected: true},
		{Name: "cluster-master-kill-wait", Cluster: true, Fsync: "everysec", Tries: 10, TTR: 1, Duration: d,
			MasterKills: o.masterKills, WaitReplicas: 1},
		{Name: "cluster-server-kill", Cluster: true, Fsync: "everysec", Tries: 10, TTR: 1, Duration: d,
			ServerKills: max(o.serverKills/2, 1)},
		// The negative control: Redis without AOF loses everything at a
		// kill, and the suite must say so.
		{Name: "control-no-aof", Fsync: fsyncOff, Tries: 10, TTR: 1, Duration: max(d/4, 5*time.Second),
			RedisKills: 1, LossExpected: true, MustLose: true},
	}
}

// ciScenario is the short run of the CI test: at least 10 server kills,
// one SCRIPT FLUSH, one CLIENT PAUSE and a consumer that drops jobs.
func ciScenario(d time.Duration) scenario {
	return scenario{Name: "ci", Fsync: "everysec", Tries: 10, TTR: 1, Duration: d,
		ServerKills: 10, Flushes: 1, Pauses: 1, Droppers: 1}
}

// ciClusterScenario is the short cluster run of the CI test: two slot
// moves of busy queues' slots (and redis-cli reshards), one SIGKILL of a
// busy queue's master with WaitReplicas = 1 (so nothing may be lost), and
// three kairos-server SIGKILLs, on a real 6-node cluster.
func ciClusterScenario(d time.Duration) scenario {
	return scenario{Name: "ci-cluster", Cluster: true, Fsync: "everysec", Tries: 10, TTR: 1, Duration: d,
		Reshards: 2, MasterKills: 1, ServerKills: 3, WaitReplicas: 1}
}

// selected returns the scenarios the flags ask for, and whether wait-cost
// is among them.
func (o options) selected() ([]scenario, error) {
	all := catalog(o)
	var out []scenario
	for _, name := range strings.Split(o.scenarios, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "all":
			for _, sc := range all {
				if !sc.OptIn {
					out = append(out, sc)
				}
			}
			continue
		case "ci":
			out = append(out, ciScenario(min(o.duration, 15*time.Second)))
			continue
		case "ci-cluster":
			out = append(out, ciClusterScenario(min(o.duration, 15*time.Second)))
			continue
		case "wait-cost", "soak", "noisy", "limits":
			continue
		}
		i := slices.IndexFunc(all, func(sc scenario) bool { return sc.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(scenarioNames(), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func (o options) wantWaitCost() bool {
	for _, name := range strings.Split(o.scenarios, ",") {
		if n := strings.TrimSpace(name); n == "all" || n == "wait-cost" {
			return o.waitCostN > 0
		}
	}
	return false
}

// wantNoisy reports whether the noisy-neighbour scenario (noisy.go) is
// asked for: by name, or with all.
func (o options) wantNoisy() bool {
	for _, name := range strings.Split(o.scenarios, ",") {
		if n := strings.TrimSpace(name); n == "all" || n == "noisy" {
			return true
		}
	}
	return false
}

// wantLimits reports whether the limits scenario (limits.go) is asked
// for: by name, or with all.
func (o options) wantLimits() bool {
	for _, name := range strings.Split(o.scenarios, ",") {
		if n := strings.TrimSpace(name); n == "all" || n == "limits" {
			return true
		}
	}
	return false
}

// wantSoak reports whether the soak (opt-in, by name) was asked for.
func (o options) wantSoak() bool {
	for _, name := range strings.Split(o.scenarios, ",") {
		if strings.TrimSpace(name) == "soak" {
			return true
		}
	}
	return false
}

// run is main without the exit: 0 all passed, 1 a scenario failed, 2 the
// harness failed.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	log := logrus.New()
	log.Out = stderr
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000"})
	if o.verbose {
		log.SetLevel(logrus.DebugLevel)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	startInfo := machineInfo(ctx, o.redisBin)
	start := time.Now()
	var lims []Limits
	results, wc, soak, noisy, werr := runAll(ctx, o, log, stdout, &lims)
	if !o.jsonOnly && len(results) > 0 {
		fmt.Fprintf(stdout, "\n%s; %s; ran %v; load average at the end %s\n\n",
			start.UTC().Format("2006-01-02 15:04 UTC"), startInfo, time.Since(start).Round(time.Second), loadAverage())
		writeTable(stdout, results)
	}
	if !o.jsonOnly && noisy != nil {
		writeNoisy(stdout, *noisy)
	}
	if !o.jsonOnly {
		for _, l := range lims {
			writeLimits(stdout, l)
		}
	}
	if !o.jsonOnly && wc != nil {
		writeWaitCost(stdout, *wc)
	}
	if !o.jsonOnly && soak != nil {
		writeSoak(stdout, *soak)
	}
	if werr != nil {
		log.WithError(werr).Error("chaos harness failed")
		return 2
	}
	for _, r := range results {
		if !r.Pass {
			return 1
		}
	}
	if soak != nil && !soak.Pass {
		return 1
	}
	if noisy != nil && !noisy.Pass {
		return 1
	}
	for _, l := range lims {
		if !l.Pass {
			return 1
		}
	}
	return 0
}

// runAll runs the selected scenarios in a temporary directory, printing
// each JSON line as it comes; the directory is removed unless -keep (or a
// failure) asks to keep it. The limits scenario's report goes to lims.
func runAll(ctx context.Context, o options, log logrus.FieldLogger, stdout io.Writer, lims *[]Limits) (results []Result, wc *WaitCost, soak *Soak, noisy *Noisy, err error) {
	dir, err := os.MkdirTemp("", "kairos-chaos-")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	keep := o.keep
	defer func() {
		if keep {
			log.Infof("logs, configs and AOF files kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	rc := runConfig{
		ServerBin: o.serverBin, RedisBin: o.redisBin, Dir: dir, Rate: o.rate,
		Publishers: o.publishers, Consumers: o.consumers, DrainLimit: 60 * time.Second, Log: log,
	}
	if rc.RedisBin == "" {
		if rc.RedisBin, err = exec.LookPath("redis-server"); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("redis-server not found (scripts/install-redis.sh installs it): %w", err)
		}
	}
	scs, err := o.selected()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if rc.ServerBin == "" && (len(scs) > 0 || o.wantSoak() || o.wantNoisy() || o.wantLimits()) {
		log.Info("building kairos-server")
		if rc.ServerBin, err = buildServer(ctx, dir); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	enc := json.NewEncoder(stdout)
	for _, sc := range scs {
		res, err := sc.run(ctx, rc)
		if err != nil {
			keep = true
			return results, nil, nil, nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		if !res.Pass {
			keep = true
		}
		results = append(results, res)
		if err := enc.Encode(res); err != nil {
			return results, nil, nil, nil, err
		}
		log.WithField("scenario", sc.Name).Infof("acknowledged %d, delivered %d, dead %d, lost %d, duplicates %d, pass %v",
			res.Acknowledged, res.Delivered, res.DeadLettered, res.Lost, res.Duplicates, res.Pass)
	}
	if o.wantNoisy() {
		r, err := runNoisy(ctx, rc, o.noisy)
		if err != nil {
			keep = true
			return results, nil, nil, nil, fmt.Errorf("noisy: %w", err)
		}
		if !r.Pass {
			keep = true
		}
		if err := enc.Encode(r); err != nil {
			return results, nil, nil, nil, err
		}
		log.WithField("scenario", "noisy").Infof("quiet namespaces: acknowledged %d, lost %d, pass %v", r.Acknowledged, r.Lost, r.Pass)
		noisy = &r
	}
	if o.wantLimits() {
		r, err := runLimits(ctx, rc, o.limits)
		if err != nil {
			keep = true
			return results, nil, nil, noisy, fmt.Errorf("limits: %w", err)
		}
		if !r.Pass {
			keep = true
		}
		if err := enc.Encode(r); err != nil {
			return results, nil, nil, noisy, err
		}
		log.WithField("scenario", "limits").Infof("acknowledged %d, lost %d, violations %d, pass %v", r.Acknowledged, r.Lost, r.violations(), r.Pass)
		*lims = append(*lims, r)
	}
	if o.wantWaitCost() {
		m, err := measureWaitCost(ctx, rc, o.waitCostN)
		if err != nil {
			keep = true
			return results, nil, nil, noisy, fmt.Errorf("wait-cost: %w", err)
		}
		if err := enc.Encode(m); err != nil {
			return results, nil, nil, noisy, err
		}
		wc = &m
	}
	if o.wantSoak() {
		r, err := runSoak(ctx, rc, o.soak)
		if err != nil {
			keep = true
			return results, wc, nil, noisy, fmt.Errorf("soak: %w", err)
		}
		if !r.Pass {
			keep = true
		}
		if err := enc.Encode(r); err != nil {
			return results, wc, nil, noisy, err
		}
		soak = &r
	}
	return results, wc, soak, noisy, nil
}

// buildServer builds ./server/cmd/kairos-server of the enclosing module into
// dir.
func buildServer(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the kairos module")
	}
	bin := filepath.Join(dir, "kairos-server")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./server/cmd/kairos-server")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./server/cmd/kairos-server: %w\n%s", err, out)
	}
	return bin, nil
}

// machineInfo describes where the suite runs, for the report.
func machineInfo(ctx context.Context, redisBin string) string {
	if redisBin == "" {
		redisBin = "redis-server"
	}
	redisVersion := "redis-server unknown"
	if out, err := exec.CommandContext(ctx, redisBin, "--version").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				redisVersion = "redis-server " + v
			}
		}
	}
	return fmt.Sprintf("%d CPUs %s/%s, %s, %s, load average at the start %s",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), redisVersion, loadAverage())
}

// loadAverage is the 1-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
