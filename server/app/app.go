// Package app wires a whole Kairos server from a config: Redis clients (or,
// only when the config sets [Kairos] Embedded, an embedded in-memory
// Redis), one engine per pool, the token store, the
// throttler, metrics and the HTTP server. The kairos-server binary and the
// end-to-end tests both build on it, so that tests run what users run.
package app

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/migration"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/redisretry"
	"github.com/kairos-dev/kairos/engine/tracing"
	"github.com/kairos-dev/kairos/server"
	"github.com/kairos-dev/kairos/server/audit"
	"github.com/kairos-dev/kairos/server/webhook"
)

// DefaultPoolSize is the Redis connection pool size when a pool's PoolSize
// is 0. Kairos holds no connection per waiting consumer, so a small pool
// serves thousands of long-polls (lmstfy needed 5000); with the Pub/Sub
// connection, a server holds at most 32 connections per Redis.
const DefaultPoolSize = 31

// Options are the parts of an App that do not come from the config file.
type Options struct {
	Logger     logrus.FieldLogger
	Version    server.VersionInfo
	SkipVerify bool
	// Now is the clock of engines and server; nil means time.Now.
	Now func() time.Time
}

// App is a wired Kairos server.
type App struct {
	cfg       *config.Config
	log       logrus.FieldLogger
	Server    *server.Server
	Engines   map[string]*rdb.Engine
	Tokens    *auth.Store
	Throttler *auth.Throttler
	Webhooks  *webhook.Manager // the queues' push subscriptions
	Registry  *prometheus.Registry
	// Tracing exports the spans ([Kairos] Tracing, OTEL_*); off, its
	// Tracer is nil.
	Tracing *tracing.Provider
	// LmstfyImports are the imports of lmstfy's jobs New ran, by pool
	// (the pools with LmstfyData = "import" whose Redis held lmstfy's
	// jobs).
	LmstfyImports map[string]LmstfyImport
	metrics       *rdb.Metrics // the engines' metrics and the clients' command hooks
	clients       []redis.UniversalClient
	byConf        map[string]redis.UniversalClient // clients by their settings
	embedded      *miniredis.Miniredis
}

// New connects to every Redis of cfg (starting the embedded in-memory one
// for the sections without Addr when cfg sets [Kairos] Embedded), checks
// that they are durable, loads the engines' scripts and builds the HTTP
// server. It refuses a Redis section without Addr unless Embedded is set
// (cfg.ValidateStores), whether or not cfg came from a file. It starts no
// goroutine: call Run.
func New(ctx context.Context, cfg *config.Config, opts Options) (a *App, err error) {
	if opts.Logger == nil {
		opts.Logger = logrus.New()
	}
	if err := cfg.ValidateStores(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// Certificate files are checked before any Redis is dialled: a
	// wrong path stops the server at once, not after a connect timeout.
	if err := server.CheckTLS(cfg); err != nil {
		return nil, err
	}
	if cfg.Kairos.Embedded && !cfg.Embedded() {
		opts.Logger.Warn("[Kairos] Embedded = true, but every Redis section has an Addr: the embedded in-memory store is not used")
	}
	a = &App{cfg: cfg, log: opts.Logger, Engines: make(map[string]*rdb.Engine), Registry: prometheus.NewRegistry(),
		byConf: make(map[string]redis.UniversalClient)}
	defer func(a *App) { // a, not the named result, which "return nil, err" clears
		if err != nil {
			a.closeClients()
		}
	}(a)
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := rdb.NewMetrics(a.Registry)
	if err != nil {
		return nil, err
	}
	a.metrics = metrics
	a.Tracing, err = tracing.New(ctx, tracing.Options{Enabled: cfg.Kairos.Tracing, ServiceVersion: opts.Version.Version})
	if err != nil {
		return nil, err
	}
	tracer := a.Tracing.Tracer()
	if tracer != nil {
		opts.Logger.Info("tracing on: spans are exported over OTLP as the OTEL_* environment says; requests carrying a trace context are served by net/http, which makes their spans")
	}
	engines := make(map[string]engine.Engine)
	var all []*rdb.Engine
	var ready []server.ReadyCheck
	imports := make(map[string]redis.UniversalClient) // pools whose lmstfy jobs are to be imported
	for _, name := range cfg.PoolNames() {
		client, err := a.connect(ctx, "Pool."+name, cfg.Pool[name])
		if err != nil {
			return nil, err
		}
		check := readyCheck("pool "+name, client, cfg.UsesEmbedded(cfg.Pool[name]))
		if found, err := a.checkLmstfy(ctx, name, client); err != nil {
			return nil, err
		} else if found {
			imports[name] = client
		}
		e, err := rdb.New(ctx, client, rdb.Options{
			Pool: name, Logger: opts.Logger, Now: opts.Now, PumpBatch: cfg.Kairos.PumpBatch, Metrics: metrics,
			WaitReplicas: cfg.Pool[name].WaitReplicas, WaitTimeout: time.Duration(cfg.Pool[name].WaitTimeoutMs) * time.Millisecond,
			HistoryFlush: server.HistoryFlushInterval,
			Tracer:       tracer,
			DefaultQuota: cfg.Pool[name].DefaultQuota(), // [Pool.NAME] DefaultMaxJobs, DefaultMaxBytes
			// The embedded store has no maxmemory: no reserve to poll.
			MemoryReserve: memoryReserve(cfg, name),
		})
		if err != nil {
			return nil, err
		}
		ready = append(ready, reserveCheck(check, e))
		a.Engines[name] = e
		engines[name] = e
		all = append(all, e)
	}
	// A pool with MigrateTo is served by the migration engine: publishes go
	// to the new pool, consumers drain the old one first (doc/config.md).
	for _, name := range cfg.PoolNames() {
		if to := cfg.Pool[name].MigrateTo; to != "" {
			engines[name] = migration.New(a.Engines[name], a.Engines[to])
			opts.Logger.WithFields(logrus.Fields{"pool": name, "to": to}).Warn("pool is migrating: publishes go to the new pool, consumers drain this one first")
		}
	}
	if err := a.importLmstfy(ctx, imports); err != nil {
		return nil, err
	}
	a.Registry.MustRegister(rdb.NewStatsCollector(all...), rdb.NewRedisCollector(all...), rdb.NewLimitsCollector(all...))
	admin, err := a.connect(ctx, "AdminRedis", cfg.AdminRedis)
	if err != nil {
		return nil, err
	}
	ready = append(ready, readyCheck("admin redis", admin, cfg.UsesEmbedded(cfg.AdminRedis)))
	if err := auth.LoadScripts(ctx, admin); err != nil {
		return nil, fmt.Errorf("AdminRedis: %w", err)
	}
	if err := audit.LoadScripts(ctx, admin); err != nil {
		return nil, fmt.Errorf("AdminRedis: %w", err)
	}
	a.Tokens = auth.NewStore(admin, cfg.PoolNames(), opts.Logger, auth.StoreOptions{HashTokens: cfg.Kairos.HashTokens, Grace: cfg.Kairos.TokenGrace()})
	a.Throttler = auth.NewThrottler(admin, opts.Logger, auth.ThrottlerOptions{HashTokens: cfg.Kairos.HashTokens})
	if err := a.Throttler.Reload(ctx); err != nil {
		return nil, fmt.Errorf("load rate limits: %w", err)
	}
	hookEngines := make(map[string]webhook.Engine, len(a.Engines))
	for name, e := range a.Engines {
		hookEngines[name] = e
	}
	a.Webhooks, err = webhook.NewManager(webhook.NewStore(admin), hookEngines, webhook.Options{
		Logger: opts.Logger, Registerer: a.Registry, Tracer: tracer,
	})
	if err != nil {
		return nil, err
	}
	a.Server, err = server.New(cfg, server.Deps{
		Engines:    engines,
		Tokens:     a.Tokens,
		Throttler:  a.Throttler,
		Webhooks:   a.Webhooks,
		Logger:     opts.Logger,
		Registerer: a.Registry,
		Gatherer:   a.Registry,
		Version:    opts.Version,
		Now:        opts.Now,
		SkipVerify: opts.SkipVerify,
		Tracer:     tracer,
		Audit:      audit.NewStore(admin, cfg.Kairos.AuditMaxEntries),

		ReadyChecks: ready,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// connect returns a client for one Redis of the config, reusing the client
// of identical settings (an lmstfy config often names one Redis for the
// admin data and a pool). A client never holds more than PoolSize
// connections (go-redis v9 otherwise opens more under bursts, and keeps a
// separate pool for pipelines), plus one Pub/Sub connection per pool.
func (a *App) connect(ctx context.Context, key string, rc config.RedisConf) (redis.UniversalClient, error) {
	size := rc.PoolSize
	if size <= 0 {
		size = DefaultPoolSize
	}
	// A cluster's seed nodes may be written in Addr or Addrs, in any order.
	seeds := rc.Endpoints()
	if rc.IsCluster() {
		sort.Strings(seeds)
	}
	same := fmt.Sprintf("%q|%t|%s|%d|%d|%s|%s", seeds, rc.Cluster, rc.Password, rc.DB, size, rc.MasterName, rc.SentinelPassword)
	if c, ok := a.byConf[same]; ok {
		return c, nil
	}
	// DisableIdentity: go-redis's CLIENT SETINFO at each new connection
	// fails on Redis < 7.2 (6.2 is supported); go-redis ignores the error,
	// but the command metrics would count it. It only names the library in
	// CLIENT LIST.
	//
	// Dialer: go-redis would send a command again after its connection
	// broke or timed out once it was written (MaxRetries, and a cluster
	// client's MaxRedirects), and Redis may have run it: an ACK sent again
	// answers "job not found", a token created again "token exists". The
	// connections of redisretry.Dialer fail such a command at once with a
	// redisretry.LostError (a 503 with Retry-After); go-redis still retries
	// what ran nothing (a refused dial, LOADING, TRYAGAIN, CLUSTERDOWN…)
	// and follows MOVED and ASK. Every client of the server (the pools'
	// engines and their loops, the token store, the throttler, the admin
	// data) comes from here.
	dialer := redisretry.Dialer(redisretry.DialTimeout)
	var client redis.UniversalClient
	node := rc.Addr // the command metrics' node label
	switch {
	case a.cfg.UsesEmbedded(rc):
		if a.embedded == nil {
			m := miniredis.NewMiniRedis()
			if err := m.StartAddr("127.0.0.1:0"); err != nil {
				return nil, fmt.Errorf("%s: start embedded redis: %w", key, err)
			}
			a.embedded = m
			sections := a.cfg.EmbeddedSections()
			a.log.WithFields(logrus.Fields{"addr": m.Addr(), "sections": strings.Join(sections, ",")}).Warn(
				"[Kairos] Embedded = true: " + embeddedList(sections) + " in an in-memory Redis embedded in the process. " +
					"NOTHING THERE IS DURABLE: it is lost when the server stops. For real use give each an Addr and remove Embedded.")
		}
		client = redis.NewClient(&redis.Options{Addr: a.embedded.Addr(), Dialer: dialer, PoolSize: size, MaxActiveConns: size, PipelinePoolSize: -1, ContextTimeoutEnabled: true, DisableIdentity: true})
		node = a.embedded.Addr()
	case rc.IsCluster():
		// PoolSize and MaxActiveConns apply per node: a server holds at
		// most PoolSize connections to each master (plus Pub/Sub), as it
		// does to one Redis. go-redis follows MOVED and ASK (MaxRedirects)
		// and reloads the slot map itself.
		node = strings.Join(rc.Endpoints(), ",")
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: rc.Endpoints(), Dialer: dialer, Password: rc.Password, PoolSize: size, MaxActiveConns: size, PipelinePoolSize: -1,
			ContextTimeoutEnabled: true, DisableIdentity: true,
		})
	case rc.IsSentinel():
		node = rc.MasterName
		client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: rc.MasterName, SentinelAddrs: rc.Endpoints(), Dialer: dialer, Password: rc.Password,
			SentinelPassword: rc.SentinelPassword, DB: rc.DB, PoolSize: size, MaxActiveConns: size, PipelinePoolSize: -1, ContextTimeoutEnabled: true, DisableIdentity: true,
		})
	default:
		client = redis.NewClient(&redis.Options{Addr: rc.Addr, Dialer: dialer, Password: rc.Password, DB: rc.DB, PoolSize: size, MaxActiveConns: size, PipelinePoolSize: -1, ContextTimeoutEnabled: true, DisableIdentity: true})
	}
	client.AddHook(a.metrics.CommandHook(node))
	a.clients = append(a.clients, client)
	a.byConf[same] = client
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		switch {
		case strings.Contains(err.Error(), "SELECT is not allowed in cluster mode"): // DB > 0
			return nil, clusterMismatch(key, rc)
		case rc.IsCluster() && strings.Contains(err.Error(), "cluster support disabled"):
			return nil, clusterMismatch(key, rc)
		}
		return nil, fmt.Errorf("%s: connect to %s: %w", key, rc.Describe(), err)
	}
	if !a.cfg.UsesEmbedded(rc) {
		if err := a.checkClusterMode(pctx, key, rc, client); err != nil {
			return nil, err
		}
		if err := a.checkDurable(pctx, key, client); err != nil {
			return nil, err
		}
	}
	return client, nil
}

// embeddedList says which sections the embedded store holds: "[AdminRedis]
// and [Pool.default] are".
func embeddedList(sections []string) string {
	names := make([]string, len(sections))
	for i, s := range sections {
		names[i] = "[" + s + "]"
	}
	switch len(names) {
	case 1:
		return names[0] + " is"
	default:
		return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " are"
	}
}

// ErrNotDurable is returned when RequireDurableRedis is set and a Redis may
// lose or evict jobs.
var ErrNotDurable = errors.New("redis is not durable")

// ErrClusterMismatch is returned (wrapped, with the section and the
// address) when a section's Cluster setting does not match its Redis: a
// Redis Cluster node configured as a standalone or Sentinel Redis (its
// keys live on other nodes too: requests would fail with MOVED), or
// Cluster = true pointing at a Redis that is not a cluster node.
var ErrClusterMismatch = errors.New("redis cluster mode does not match the config")

// clusterError is ErrClusterMismatch with the words an operator reads.
type clusterError struct{ msg string }

func (e *clusterError) Error() string { return e.msg }
func (e *clusterError) Unwrap() error { return ErrClusterMismatch }

// checkClusterMode refuses a section whose Cluster setting does not match
// its Redis (see ErrClusterMismatch), and a cluster that does not serve
// every slot (cluster_state is not ok). INFO takes one section, as Redis
// 6.2 requires; if it cannot be read (a renamed or forbidden INFO) the
// server warns and goes on, as checkDurable does.
func (a *App) checkClusterMode(ctx context.Context, key string, rc config.RedisConf, client redis.UniversalClient) error {
	if cc, ok := client.(*redis.ClusterClient); ok {
		// Every master: the seed node answered CLUSTER SLOTS, so it is a
		// cluster node; cluster_state says whether all slots are served.
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			if server, err := n.Info(ctx, "server").Result(); err == nil {
				if err := clusterVersion(n.Options().Addr, server); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: %s: CLUSTER INFO: %w", key, n.Options().Addr, err)
			}
			if st := infoField(info, "cluster_state"); st != "ok" {
				return fmt.Errorf("%s: the Redis Cluster node %s says cluster_state:%s: the cluster does not serve every slot; fix the cluster (redis-cli --cluster check) and start again",
					key, n.Options().Addr, st)
			}
			return nil
		})
	}
	info, err := client.Info(ctx, "cluster").Result()
	if err != nil {
		a.log.WithError(err).WithField("redis", key).Warn("cannot read INFO cluster to check that this Redis is not a Redis Cluster node (set Cluster = true for one)")
		return nil
	}
	if infoField(info, "cluster_enabled") == "1" {
		return clusterMismatch(key, rc)
	}
	return nil
}

// clusterVersion refuses a cluster node older than Redis 7.0, given its
// INFO server: waiting consumers are woken through sharded Pub/Sub
// (SSUBSCRIBE, SPUBLISH), which Redis 7.0 brought. A reply without a
// readable version passes.
func clusterVersion(addr, info string) error {
	v := infoField(info, "redis_version")
	major, _, _ := strings.Cut(v, ".")
	if n, err := strconv.Atoi(major); err == nil && n < 7 {
		return fmt.Errorf("the Redis Cluster node %s runs Redis %s: a Redis Cluster needs Redis 7.0 or later (sharded Pub/Sub); upgrade it, or use a standalone or Sentinel-managed Redis 6.2", addr, v)
	}
	return nil
}

// clusterMismatch is the error of a section whose Cluster setting does not
// match its Redis.
func clusterMismatch(key string, rc config.RedisConf) error {
	section := "[" + key + "]"
	if rc.IsCluster() {
		return &clusterError{fmt.Sprintf("%s: Cluster = true, but %s is not a Redis Cluster node (cluster support disabled): "+
			"remove Cluster = true from %s, or list the nodes of a Redis Cluster in Addrs", key, strings.Join(rc.Endpoints(), ","), section)}
	}
	fix := "set Cluster = true in " + section + " (with the seed nodes in Addrs)"
	switch {
	case rc.IsSentinel():
		fix = "a Redis Cluster is not managed by Sentinel: in " + section + " remove MasterName and set Cluster = true with the cluster's nodes in Addrs"
	case rc.DB != 0:
		fix += " and remove DB (a Redis Cluster has only database 0)"
	}
	return &clusterError{fmt.Sprintf("%s: %s is a Redis Cluster node: %s", key, rc.Describe(), fix)}
}

// checkDurable warns (or refuses, with RequireDurableRedis) when a Redis
// has AOF off or a maxmemory-policy that evicts keys: either loses jobs. On
// a Redis Cluster every master is checked.
func (a *App) checkDurable(ctx context.Context, key string, client redis.UniversalClient) error {
	var mu sync.Mutex
	var problems []string
	err := eachMaster(ctx, client, func(ctx context.Context, addr string, c redis.UniversalClient) error {
		info, err := infoSections(ctx, c, "persistence", "memory")
		if err != nil {
			return err
		}
		var found []string
		if v := infoField(info, "aof_enabled"); v != "1" {
			found = append(found, "appendonly is off (jobs acknowledged since the last snapshot are lost when Redis restarts)")
		}
		if v := infoField(info, "maxmemory_policy"); v != "" && v != "noeviction" {
			found = append(found, fmt.Sprintf("maxmemory-policy is %q (Redis may evict jobs; use noeviction)", v))
		}
		if addr != "" {
			for i, f := range found {
				found[i] = "node " + addr + ": " + f
			}
		}
		mu.Lock()
		problems = append(problems, found...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		a.log.WithError(err).WithField("redis", key).Warn("cannot read INFO to check durability")
		return nil
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	msg := key + ": " + strings.Join(problems, "; ")
	if a.cfg.Kairos.RequireDurableRedis {
		return fmt.Errorf("%w: %s", ErrNotDurable, msg)
	}
	a.log.WithField("redis", key).Warn("REDIS IS NOT DURABLE: " + msg + " (set [Kairos] RequireDurableRedis = true to refuse to start)")
	return nil
}

// eachMaster runs fn on the Redis of client: on every master of a Redis
// Cluster, concurrently, with each node's address (the first error wins);
// on client itself otherwise, with addr "".
func eachMaster(ctx context.Context, client redis.UniversalClient, fn func(ctx context.Context, addr string, c redis.UniversalClient) error) error {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return fn(ctx, "", client)
	}
	return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		return fn(ctx, n.Options().Addr, n)
	})
}

// readyCheck is the /readyz check of one Redis: it answers INFO within the
// deadline, is not loading its dataset, and is a master; a master at
// maxmemory under noeviction is full (server.ErrFull: still ready). Every pool and the
// admin Redis take writes (publish, consume, tokens, rate limits), so a
// replica is never ready. On a Redis Cluster every master of the slot map
// is checked so, and each must say cluster_state:ok (else "cluster down":
// some slots have no master). The embedded in-memory store lives in the
// process, never loads nor replicates, and has no INFO sections for
// either: it is ready when it answers PING.
func readyCheck(name string, client redis.UniversalClient, embedded bool) server.ReadyCheck {
	return server.ReadyCheck{Name: name, Check: func(ctx context.Context) error {
		if embedded {
			if err := client.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		}
		_, cluster := client.(*redis.ClusterClient)
		err := eachMaster(ctx, client, func(ctx context.Context, addr string, c redis.UniversalClient) error {
			info, err := infoSections(ctx, c, "persistence", "replication", "memory")
			if err == nil && cluster {
				var ci string
				if ci, err = c.ClusterInfo(ctx).Result(); err == nil {
					info += ci
				}
			}
			if addr != "" {
				return nodeReady(name+": node "+addr, info, err, cluster)
			}
			return nodeReady(name, info, err, cluster)
		})
		if cc, ok := client.(*redis.ClusterClient); ok && errors.Is(err, server.ErrNotMaster) {
			// The slot map is stale (a replica took over): the next check
			// asks the new masters.
			cc.ReloadState(ctx)
		}
		return err
	}}
}

// nodeReady judges one Redis node by its INFO (and CLUSTER INFO).
func nodeReady(name, info string, err error, cluster bool) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	case infoField(info, "loading") == "1":
		return fmt.Errorf("%s: %w", name, server.ErrLoading)
	}
	if role := infoField(info, "role"); role != "master" {
		return fmt.Errorf("%s: role %q: %w", name, role, server.ErrNotMaster)
	}
	if cluster {
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s: %w", name, st, server.ErrClusterDown)
		}
	}
	if used, max, ok := memoryFull(info); ok {
		return fmt.Errorf("%s: used_memory %d > maxmemory %d under noeviction: %w", name, used, max, server.ErrFull)
	}
	return nil
}

// memoryFull reports whether a Redis (its INFO memory) refuses the writes
// that take memory: maxmemory set, the noeviction policy, and the memory
// Redis counts against maxmemory (used_memory less what it does not count
// for eviction: replica and AOF buffers) above it, as Redis decides.
func memoryFull(info string) (used, max int64, full bool) {
	max, _ = strconv.ParseInt(infoField(info, "maxmemory"), 10, 64)
	if max <= 0 || infoField(info, "maxmemory_policy") != "noeviction" {
		return 0, max, false
	}
	used, _ = strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
	notCounted, _ := strconv.ParseInt(infoField(info, "mem_not_counted_for_evict"), 10, 64)
	used -= notCounted
	return used, max, used > max
}

// RedisLogger sends go-redis's own log lines (reconnections, pool
// problems) to a logrus logger, so that they keep the server's format;
// main installs it with redis.SetLogger (go-redis's logger is global).
type RedisLogger struct{ Log logrus.FieldLogger }

// Printf implements go-redis's internal.Logging.
func (l RedisLogger) Printf(_ context.Context, format string, v ...interface{}) {
	l.Log.WithField("component", "redis").Warnf(format, v...)
}

// infoSections reads INFO sections one INFO command each, in one round
// trip: Redis before 7.0 answers an INFO of several sections with a syntax
// error, and Kairos supports Redis 6.2.
func infoSections(ctx context.Context, client redis.UniversalClient, sections ...string) (string, error) {
	cmds := make([]*redis.StringCmd, len(sections))
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sections {
			cmds[i] = p.Info(ctx, s)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(c.Val())
	}
	return b.String(), nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Listen binds the server's listeners (see server.Server.Listen).
func (a *App) Listen() error { return a.Server.Listen() }

// Run runs the engines, the throttler and the HTTP server until ctx is
// done, then shuts down in order: HTTP first (waiting consumers are
// answered), then the engines, then the Redis connections.
func (a *App) Run(ctx context.Context) error {
	bg, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, e := range a.Engines {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(bg) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Throttler.Run(bg) }()
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Webhooks.Run(bg) }()
	err := a.Server.Serve(ctx)
	stop()
	wg.Wait()
	a.closeClients()
	return err
}

// Close closes the Redis connections of an App that was built and never
// run (kairos-server -migrate-from-lmstfy); Run closes them itself.
func (a *App) Close() { a.closeClients() }

func (a *App) closeClients() {
	if a.Tracing != nil {
		// The spans still buffered go out, within the shutdown timeout.
		ctx, cancel := context.WithTimeout(context.Background(), max(a.cfg.Kairos.ShutdownTimeout(), 5*time.Second))
		if err := a.Tracing.Shutdown(ctx); err != nil {
			a.log.WithError(err).Warn("tracing: spans not exported at shutdown")
		}
		cancel()
		a.Tracing = nil
	}
	for _, c := range a.clients {
		_ = c.Close()
	}
	a.clients = nil
	if a.embedded != nil {
		a.embedded.Close()
		a.embedded = nil
	}
}
