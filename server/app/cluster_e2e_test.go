package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
)

// TestMain stops the Redis Cluster the tests share (redistest.SharedCluster)
// and removes the kairos-server binary they share (buildServer).
func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if builtServer.dir != "" {
		_ = os.RemoveAll(builtServer.dir)
	}
	os.Exit(code)
}

// TestE2ECluster runs the end-to-end tests on a real 6-node Redis Cluster
// (3 masters, 1 replica each; redistest.SharedCluster), the default pool
// and the admin Redis both with Cluster = true: startE2E sees the suite's
// name (onCluster). Every HTTP answer the tests check on one Redis must
// come the same on a cluster: publish, consume, ACK, delays, dead letters,
// tokens, limits, webhooks, metrics, lmstfy's own Go client. The subtests
// run one after another on the one cluster, which startE2E flushes before
// each. Left out: the tests that kill, restart or reconfigure their own
// redis-server (TestE2EOutage, TestE2ELoading, TestE2EMasterDown...),
// which need a Redis of their own, and TestE2EScheduleKill, whose
// SIGKILLed servers TestE2EScheduleTwoServers's racing apps stand for.
func TestE2ECluster(t *testing.T) {
	redistest.SharedCluster(t) // fail (or skip) once, before the subtests
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"Walkthrough", TestE2EWalkthrough},
		{"Errors", TestE2EErrors},
		{"BulkPublish", TestE2EBulkPublish},
		{"Attributes", TestE2EAttributes},
		{"MultiQueuePriority", TestE2EMultiQueuePriority},
		{"LongPollWakeup", TestE2ELongPollWakeup},
		{"Delay", TestE2EDelay},
		{"GracefulShutdown", TestE2EGracefulShutdown},
		{"ExtRelease", TestE2EExtRelease},
		{"ExtBackoff", TestE2EExtBackoff},
		{"ExtTouch", TestE2EExtTouch},
		{"ExtMillis", TestE2EExtMillis},
		{"ExtPriority", TestE2EExtPriority},
		{"ExtIdempotency", TestE2EExtIdempotency},
		{"ExtWebhook", TestE2EExtWebhook},
		{"ExtDeadLetter", TestE2EExtDeadLetter},
		{"ExtPause", TestE2EExtPause},
		{"ExtInspection", TestE2EExtInspection},
		{"Metrics", TestE2EMetrics},
		{"LmstfyClient", TestLmstfyClient},
		{"Schedules", TestE2ESchedules},
		{"ScheduleTwoServers", TestE2EScheduleTwoServers},
		{"HistoryTwoServers", TestE2EHistoryTwoServers},
		{"Tracing", TestE2ETracing},
		{"DashboardHTTP", TestDashboardHTTP},
		{"Shards", TestE2EShards},
		{"Quota", TestE2EQuota},
		{"Groups", TestE2EGroups},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !onCluster(t) {
				t.Fatalf("%s does not run under %s", t.Name(), clusterSuite)
			}
			tc.run(t)
		})
	}
}

// TestE2EClusterMismatch: a section whose Cluster setting does not match
// its Redis stops the server at start-up, naming the section and what to
// change. Before, a standalone section pointing at a cluster node started
// and then answered 500 (MOVED, CROSSSLOT) to requests whose keys live on
// other nodes; Cluster = true on a plain Redis must not start either.
func TestE2EClusterMismatch(t *testing.T) {
	c := redistest.SharedCluster(t)
	// The node holding the rate limits, which the admin Redis loads at
	// start-up: from any other node that load answers MOVED.
	node := c.MasterOf(t, "__throttler_keys__")
	standalone := redistest.Start(t)
	tests := []struct {
		name string
		cfg  func() *config.Config
		want string
	}{
		{"default pool", func() *config.Config { return redisConfig(node) },
			"Pool.default: " + node + " is a Redis Cluster node: set Cluster = true in [Pool.default] (with the seed nodes in Addrs)"},
		{"admin redis", func() *config.Config {
			cfg := redisConfig(standalone.Addr)
			cfg.AdminRedis = config.RedisConf{Addr: node}
			return cfg
		}, "AdminRedis: " + node + " is a Redis Cluster node: set Cluster = true in [AdminRedis] (with the seed nodes in Addrs)"},
		// A DB other than 0 fails at the connection's SELECT, before INFO.
		{"pool with DB 1", func() *config.Config {
			cfg := redisConfig(standalone.Addr)
			cfg.Pool["b"] = config.RedisConf{Addr: node, DB: 1}
			return cfg
		}, "Pool.b: " + node + " is a Redis Cluster node: set Cluster = true in [Pool.b] (with the seed nodes in Addrs) and remove DB (a Redis Cluster has only database 0)"},
		{"cluster pool on a plain redis", func() *config.Config {
			cfg := clusterConfig(c)
			cfg.Pool["b"] = config.RedisConf{Cluster: true, Addrs: []string{standalone.Addr}}
			return cfg
		}, "Pool.b: Cluster = true, but " + standalone.Addr + " is not a Redis Cluster node (cluster support disabled): remove Cluster = true from [Pool.b], or list the nodes of a Redis Cluster in Addrs"},
		{"cluster admin redis on a plain redis", func() *config.Config {
			cfg := redisConfig(standalone.Addr)
			cfg.AdminRedis = config.RedisConf{Cluster: true, Addr: standalone.Addr}
			return cfg
		}, "AdminRedis: Cluster = true, but " + standalone.Addr + " is not a Redis Cluster node (cluster support disabled): remove Cluster = true from [AdminRedis], or list the nodes of a Redis Cluster in Addrs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			_, err := app.New(context.Background(), cfg, app.Options{Logger: testLogger(t)})
			if err == nil {
				t.Fatalf("app.New accepted the config, want %q", tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("app.New error:\n got %s\nwant %s", got, tc.want)
			}
			if !errors.Is(err, app.ErrClusterMismatch) {
				t.Errorf("app.New error %v: want errors.Is ErrClusterMismatch", err)
			}
		})
	}
}

// TestE2EClusterReady: /readyz on a cluster pool and admin Redis checks
// every master and names the pool and the admin Redis, as on one Redis.
func TestE2EClusterReady(t *testing.T) {
	c := redistest.SharedCluster(t)
	k := startKairos(t, clusterConfig(c))
	r := doHTTP(t, http.MethodGet, k.API+"/readyz", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, `{"ready":true,"checks":{"admin redis":"ok","pool default":"ok"}}`)
	if strings.Contains(string(r.Body), "127.0.0.1") {
		t.Errorf("/readyz names an address: %s", r.Body)
	}
}

// TestE2EClusterFailover: when a master of the cluster dies, /readyz turns
// 503 (the pool and the admin Redis "unreachable" or "cluster down", no
// address), /healthz stays 200, and once its replica has taken over
// /readyz is 200 again without a restart of Kairos.
func TestE2EClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes the node timeout (3s) and more")
	}
	t.Parallel() // a cluster of its own; mostly waits on the failover
	c := redistest.StartCluster(t)
	k := startKairos(t, clusterConfig(c))
	waitReady(t, k.API, http.StatusOK, 5*time.Second)
	token := k.newToken(t, "ns")

	victim := c.Masters(t)[0]
	c.Kill(t, victim)
	r := waitReady(t, k.API, http.StatusServiceUnavailable, 5*time.Second)
	var body struct {
		Ready  bool
		Checks map[string]string
	}
	r.decode(t, &body)
	for _, check := range []string{"pool default", "admin redis"} {
		if st := body.Checks[check]; st != "unreachable" && st != "cluster down" {
			t.Errorf("/readyz with master %s dead: %s is %q, want unreachable or cluster down (%s)", victim, check, st, r.Body)
		}
	}
	if strings.Contains(string(r.Body), "127.0.0.1") || r.Header.Get("Retry-After") != "1" {
		t.Errorf("/readyz: %v: want Retry-After 1 and no address", r)
	}
	doHTTP(t, http.MethodGet, k.API+"/healthz", "", nil, nil).wantStatus(t, http.StatusOK)
	// Publishes to queues on the dead master answer 503 + Retry-After (the
	// others 201), never 500, never an address.
	unavailable := 0
	for i := range 12 {
		r := doHTTP(t, http.MethodPut, k.API+"/api/ns/q"+strconv.Itoa(i), token, []byte("x"), nil)
		switch r.Status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			unavailable++
			wantUnavailable(t, r, victim)
		default:
			t.Errorf("publish to q%d with master %s dead: %v, want 201 or 503", i, victim, r)
		}
	}
	if unavailable == 0 {
		t.Errorf("no publish to 12 queues met the dead master %s", victim)
	}

	c.Wait(t) // the replica took over
	r = waitReady(t, k.API, http.StatusOK, 15*time.Second)
	r.wantBody(t, `{"ready":true,"checks":{"admin redis":"ok","pool default":"ok"}}`)
	for i := range 12 {
		q := k.API + "/api/ns/q" + strconv.Itoa(i)
		doHTTP(t, http.MethodPut, q, token, []byte("y"), nil).wantStatus(t, http.StatusCreated)
	}
}

// TestE2EScopesOfEarlierVersion: scoped tokens made before Redis Cluster
// support, their scope in tks/POOL/NS (since moved to the token hash's
// slot, tks/{tk/POOL/NS}), keep their scope on upgrade: no migration step,
// the token may still consume and may not publish. And a scoped token made
// now is written where servers of the earlier version look too, so that a
// rolling upgrade never runs one unrestricted.
func TestE2EScopesOfEarlierVersion(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	rc := rs.Client()
	ctx := context.Background()
	const token = "earlier-scoped-token-0123"
	if err := rc.HSet(ctx, "tk/default/ns", token, "made by an earlier version").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, "tks/default/ns", token, `{"roles":["consume"]}`).Err(); err != nil {
		t.Fatal(err)
	}
	k := startKairos(t, redisConfig(rs.Addr))
	api := k.API + "/api/ns/q"
	r := doHTTP(t, http.MethodPut, api, token, []byte("x"), nil)
	r.wantStatus(t, http.StatusForbidden)
	r.wantBody(t, `{"error":"token is not allowed to publish queue q"}`)
	doHTTP(t, http.MethodGet, api, token, nil, nil).wantStatus(t, http.StatusNotFound) // may consume: no job

	r = doHTTP(t, http.MethodPost, k.Admin+"/token/ns?description=now&roles=consume", "", nil, nil)
	r.wantStatus(t, http.StatusCreated)
	var out struct{ Token string }
	r.decode(t, &out)
	for _, key := range []string{"tks/{tk/default/ns}", "tks/default/ns"} {
		if v, err := rc.HGet(ctx, key, out.Token).Result(); err != nil || v != `{"roles":["consume"]}` {
			t.Errorf("HGET %s %s = %q, %v; want the scope", key, out.Token, v, err)
		}
	}
}

// TestE2EClusterRedisGauges: the Redis gauges of a cluster pool (keys,
// memory, connections) add up every master, not one node picked at
// random.
func TestE2EClusterRedisGauges(t *testing.T) {
	c := redistest.SharedCluster(t)
	c.Flush(t)
	ctx := context.Background()
	cl := c.Client(t)
	for i := range 60 { // spread over the three masters
		if err := cl.Set(ctx, fmt.Sprintf("gauge-test-%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	k := startKairos(t, clusterConfig(c))
	e := &e2e{kairos: k}
	sum := func() (keys float64) {
		for _, m := range c.Masters(t) {
			n := redis.NewClient(&redis.Options{Addr: m})
			size, err := n.DBSize(ctx).Result()
			_ = n.Close()
			if err != nil {
				t.Fatal(err)
			}
			if size == 0 {
				t.Fatalf("master %s holds no key: the test keys did not spread", m)
			}
			keys += float64(size)
		}
		return keys
	}
	for attempt := 0; ; attempt++ {
		before := sum()
		fams := scrapeMetrics(t, e)
		after := sum()
		f := servedFamily(fams, "infra_lmstfy_redis_total_keys")
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("infra_lmstfy_redis_total_keys: %v", f)
		}
		got := f.Metric[0].GetGauge().GetValue()
		if got >= before && got <= after {
			break
		}
		if before == after || attempt >= 5 { // else Kairos wrote a key meanwhile
			t.Fatalf("infra_lmstfy_redis_total_keys = %v, want the masters' sum %v", got, after)
		}
	}
	for _, name := range []string{"infra_lmstfy_redis_used_mem_bytes", "infra_lmstfy_redis_connections"} {
		f := servedFamily(scrapeMetrics(t, e), name)
		if f == nil || len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() <= 0 {
			t.Errorf("%s: %v, want one positive series", name, f)
		}
	}
}

// TestE2EClusterDurabilityCheck: RequireDurableRedis checks every master
// of a cluster and names each that would lose jobs (the shared cluster
// runs without AOF).
func TestE2EClusterDurabilityCheck(t *testing.T) {
	c := redistest.SharedCluster(t)
	cfg := clusterConfig(c)
	cfg.Kairos.RequireDurableRedis = true
	_, err := app.New(context.Background(), cfg, app.Options{Logger: testLogger(t)})
	if !errors.Is(err, app.ErrNotDurable) {
		t.Fatalf("app.New = %v, want ErrNotDurable", err)
	}
	for _, m := range c.Masters(t) {
		if want := "node " + m + ": appendonly is off"; !strings.Contains(err.Error(), want) {
			t.Errorf("app.New error %q does not say %q", err, want)
		}
	}
	if !strings.HasPrefix(err.Error(), "redis is not durable: Pool.default: node ") {
		t.Errorf("app.New error %q: want it to name Pool.default first", err)
	}
}
