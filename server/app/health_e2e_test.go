package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// Health, readiness and Redis outages end to end: a real server on a real
// redis-server that the test stops and restarts.

// readyz fetches base+/readyz.
func readyz(tb testing.TB, base string) *response {
	tb.Helper()
	return doHTTP(tb, http.MethodGet, base+"/readyz", "", nil, nil)
}

// waitReady polls base+/readyz until it answers status, and returns that
// answer.
func waitReady(tb testing.TB, base string, status int, within time.Duration) *response {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		r := readyz(tb, base)
		if r.Status == status {
			return r
		}
		if time.Now().After(deadline) {
			tb.Fatalf("/readyz did not answer %d within %v; last: %v", status, within, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantUnavailable checks an outage answer: 503, Retry-After, the JSON
// error, and no address of Redis.
func wantUnavailable(tb testing.TB, r *response, redisAddr string) {
	tb.Helper()
	r.wantStatus(tb, http.StatusServiceUnavailable)
	if ra := r.Header.Get("Retry-After"); ra != "1" {
		tb.Errorf("%v: Retry-After %q, want 1", r, ra)
	}
	r.wantBody(tb, `{"error":"redis is unavailable, retry later"}`)
	if strings.Contains(string(r.Body), redisAddr) {
		tb.Errorf("%v: leaks the Redis address", r)
	}
}

// TestE2EOutage: /healthz stays 200 and /readyz turns 503 (naming the pool
// and the admin Redis, without addresses) while Redis is down; every public
// route and the admin token creation answer 503 + Retry-After, never 500,
// on the event-loop fast path and on net/http; all comes back when Redis
// does.
func TestE2EOutage(t *testing.T) {
	e := startE2E(t)
	for _, base := range []string{e.API, e.Admin} {
		doHTTP(t, http.MethodGet, base+"/healthz", "", nil, nil).wantStatus(t, http.StatusOK)
		r := readyz(t, base)
		r.wantStatus(t, http.StatusOK)
		r.wantBody(t, `{"ready":true,"checks":{"admin redis":"ok","pool default":"ok"}}`)
	}
	id := e.publish(t, "q", "", "before")
	inFlight := e.consume(t, "q", "ttr=60").JobID

	e.Redis.Kill()
	for _, base := range []string{e.API, e.Admin} {
		r := waitReady(t, base, http.StatusServiceUnavailable, 3*time.Second)
		r.wantBody(t, `{"ready":false,"checks":{"admin redis":"unreachable","pool default":"unreachable"}}`)
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%v: no Retry-After", r)
		}
		doHTTP(t, http.MethodGet, base+"/healthz", "", nil, nil).wantStatus(t, http.StatusOK)
	}

	// keepAlive leaves the request in the fast path's subset; close sends
	// "Connection: close", which the event loops hand to net/http.
	keepAlive := map[string]string(nil)
	closeConn := map[string]string{"Connection": "close"}
	for _, tc := range []struct {
		name, method, path, q, body string
		hdr                         map[string]string
	}{
		{"publish fast", http.MethodPut, "q", "", "x", keepAlive},
		{"publish", http.MethodPut, "q", "", "x", closeConn},
		{"publish keyed", http.MethodPut, "q", "", "x", map[string]string{"Idempotency-Key": "k1"}},
		{"bulk publish", http.MethodPut, "q/bulk", "", `[1,2]`, keepAlive},
		{"consume fast", http.MethodGet, "q", "timeout=0", "", keepAlive},
		{"consume", http.MethodGet, "q", "timeout=0", "", closeConn},
		{"consume waiting", http.MethodGet, "q", "timeout=1", "", closeConn},
		{"ack fast", http.MethodDelete, "q/job/" + inFlight, "", "", keepAlive},
		{"ack", http.MethodDelete, "q/job/" + inFlight, "", "", closeConn},
		{"size", http.MethodGet, "q/size", "", "", keepAlive},
		{"peek", http.MethodGet, "q/peek", "", "", keepAlive},
		{"peek job", http.MethodGet, "q/job/" + id, "", "", keepAlive},
		{"deadletter", http.MethodGet, "q/deadletter", "", "", keepAlive},
		{"deadletter size", http.MethodGet, "q/deadletter/size", "", "", keepAlive},
		{"respawn", http.MethodPut, "q/deadletter", "limit=1", "", keepAlive},
		{"schedule put", http.MethodPut, "q/schedule/s", "cron=%40hourly", "x", keepAlive},
		{"schedule get", http.MethodGet, "q/schedule/s", "", "", keepAlive},
		{"schedule list", http.MethodGet, "q/schedule", "", "", keepAlive},
		{"schedule pause", http.MethodPut, "q/schedule/s/pause", "", "", keepAlive},
		{"schedule resume", http.MethodPut, "q/schedule/s/resume", "", "", keepAlive},
		{"schedule delete", http.MethodDelete, "q/schedule/s", "", "", keepAlive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			wantUnavailable(t, e.do(t, tc.method, tc.path, tc.q, body, tc.hdr), e.Redis.Addr)
		})
	}
	t.Run("admin token create", func(t *testing.T) {
		r := doHTTP(t, http.MethodPost, e.Admin+"/token/"+e.NS+"?description=outage", "", nil, nil)
		wantUnavailable(t, r, e.Redis.Addr)
	})
	t.Run("unknown token", func(t *testing.T) {
		// The token store cannot say whether the token exists: 503, not 401.
		r := doHTTP(t, http.MethodPut, e.url("q", ""), "no-such-token", []byte("x"), nil)
		wantUnavailable(t, r, e.Redis.Addr)
	})

	e.Redis.Restart()
	waitReady(t, e.API, http.StatusOK, 10*time.Second)
	waitReady(t, e.Admin, http.StatusOK, 10*time.Second)
	e.publish(t, "q", "", "after")
	e.ack(t, "q", inFlight)
}

// TestE2ENotReplicated: with WaitReplicas and no replica to confirm it, a
// publish is written but not confirmed: the server answers 503 "the job
// may exist" with its job ID (fast path and net/http), the job does exist,
// and the Go client never makes a duplicate: without a key it returns
// ErrMayExist with the ID at once; with WithPublishKeys its retries find
// the first job, still unconfirmed, and it returns ErrMayExist too.
func TestE2ENotReplicated(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	cfg := redisConfig(rs.Addr)
	cfg.Pool[config.DefaultPoolName] = config.RedisConf{Addr: rs.Addr, WaitReplicas: 1, WaitTimeoutMs: 20}
	k := startKairos(t, cfg)
	e := &e2e{kairos: k, Redis: rs, NS: "e2e", Token: k.newToken(t, "e2e")}
	size := func() int {
		t.Helper()
		var out struct {
			Size int `json:"size"`
		}
		e.do(t, http.MethodGet, "q/size", "", nil, nil).decode(t, &out)
		return out.Size
	}

	for _, hdr := range []map[string]string{nil, {"Connection": "close"}} {
		r := e.do(t, http.MethodPut, "q", "", []byte("x"), hdr)
		r.wantStatus(t, http.StatusServiceUnavailable)
		var out struct {
			Error string `json:"error"`
			JobID string `json:"job_id"`
		}
		r.decode(t, &out)
		r.wantBody(t, `{"error":"publish not replicated: the job may exist","job_id":"`+out.JobID+`"}`)
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%v: no Retry-After", r)
		}
		e.do(t, http.MethodGet, "q/job/"+out.JobID, "", nil, nil).wantStatus(t, http.StatusOK)
	}
	if n := size(); n != 2 {
		t.Fatalf("size %d, want 2", n)
	}

	opts := []client.Option{client.WithNamespace(e.NS), client.WithToken(e.Token), client.WithRetry(3, time.Millisecond, 2*time.Millisecond)}
	plain, err := client.New(k.API, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.Publish(context.Background(), "q", []byte("plain"))
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrMayExist) || !errors.As(err, &apiErr) || apiErr.JobID == "" {
		t.Fatalf("Publish without a key: %v, want ErrMayExist with the job ID", err)
	}
	if n := size(); n != 3 {
		t.Fatalf("size %d after a may-exist publish without a key, want 3 (not re-sent)", n)
	}

	// With keys, the client retries (3 times here); each retry finds the
	// key, and as no replica confirms the first write, each answers "may
	// exist" again with the same job: one job, and still ErrMayExist.
	keyed, err := client.New(k.API, append(opts, client.WithPublishKeys())...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = keyed.Publish(context.Background(), "q", []byte("keyed"))
	if !errors.Is(err, client.ErrMayExist) || !errors.As(err, &apiErr) || apiErr.JobID == "" {
		t.Fatalf("Publish with generated keys: %v; want ErrMayExist after the retries", err)
	}
	if n := size(); n != 4 {
		t.Fatalf("size %d after a retried keyed publish, want 4 (no duplicate)", n)
	}
	if r := e.do(t, http.MethodGet, "q/job/"+apiErr.JobID, "", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the keyed job: %v", r)
	}
}

// TestE2ELoading: while Redis loads its AOF after a restart, /readyz
// answers 503 "loading" and the API 503 + Retry-After (not 500 with
// Redis's LOADING text); both recover once it is loaded.
func TestE2ELoading(t *testing.T) {
	e := startE2E(t)
	ctx := context.Background()
	rc := e.Redis.Client()
	const keys = 40000
	p := rc.Pipeline()
	for i := range keys {
		p.Set(ctx, fmt.Sprintf("filler:%d", i), "x", 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Rewrite the AOF (an RDB preamble), so that key-load-delay applies.
	if err := rc.BgRewriteAOF(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		info, err := rc.Info(ctx, "persistence").Result()
		if err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") &&
			strings.Contains(info, "aof_last_bgrewrite_status:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("AOF rewrite did not finish: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// 40,000 keys at 50 µs each: about 2 s of loading.
	e.Redis.RestartLoading("key-load-delay 50", "loading-process-events-interval-bytes 1024")
	var sawLoading, sawPublish503 bool
	for deadline := time.Now().Add(30 * time.Second); ; {
		r := readyz(t, e.API)
		if r.Status == http.StatusOK {
			break
		}
		r.wantStatus(t, http.StatusServiceUnavailable)
		if strings.Contains(string(r.Body), `"pool default":"loading"`) {
			sawLoading = true
			if !sawPublish503 {
				pr := e.do(t, http.MethodPut, "q", "", []byte("x"), nil)
				if pr.Status == http.StatusCreated {
					break // loaded meanwhile
				}
				wantUnavailable(t, pr, e.Redis.Addr)
				sawPublish503 = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still not ready: %v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawLoading || !sawPublish503 {
		t.Fatalf("never saw loading (%v) or a 503 publish (%v) while Redis loaded", sawLoading, sawPublish503)
	}
	e.publish(t, "q", "", "loaded")
}

// TestE2EReplicaNotReady: a server whose Redis is a replica (a Sentinel
// failover left it pointed at the old master, say) is not ready ("not
// master"), and its writes answer 503 (Redis's READONLY), not 500.
func TestE2EReplicaNotReady(t *testing.T) {
	master := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	replica := redistest.StartWith(t, redistest.Options{AppendOnly: true, Extra: []string{"replicaof " + strings.Replace(master.Addr, ":", " ", 1)}})
	// The token is made on the master, so that the replica has it.
	km := startKairos(t, redisConfig(master.Addr))
	token := km.newToken(t, "e2e")
	// The replica holds the master's data before a server uses it, the
	// layout marker among them: a server that finds no marker writes one
	// at start, and stops with Redis's READONLY on a replica.
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, _ := replica.Client().Info(context.Background(), "replication").Result()
		n, _ := replica.Client().Exists(context.Background(), "kairos/layout").Result()
		if strings.Contains(info, "master_link_status:up") && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync")
		}
		time.Sleep(20 * time.Millisecond)
	}
	k := startKairos(t, redisConfig(replica.Addr))
	r := readyz(t, k.API)
	r.wantStatus(t, http.StatusServiceUnavailable)
	r.wantBody(t, `{"ready":false,"checks":{"admin redis":"not master","pool default":"not master"}}`)
	readyz(t, km.API).wantStatus(t, http.StatusOK)

	e := &e2e{kairos: k, Redis: replica, NS: "e2e", Token: token}
	for _, hdr := range []map[string]string{nil, {"Connection": "close"}} {
		wantUnavailable(t, e.do(t, http.MethodPut, "q", "", []byte("x"), hdr), replica.Addr)
	}
	// The admin writes made in a MULTI/EXEC: Redis refuses the queued
	// command (READONLY, LOADING, OOM...) and EXEC answers EXECABORT, which
	// said nothing of an outage and answered 500.
	limit := []byte(`{"read":10,"write":10,"interval":1}`)
	for _, tc := range []struct {
		method, path string
		body         []byte
	}{
		{http.MethodDelete, "/token/e2e/" + token, nil},
		{http.MethodPut, "/token/e2e/" + token + "/limit", limit},
		{http.MethodPut, "/queue/e2e/q/config", []byte(`{"paused":true}`)},
	} {
		wantUnavailable(t, doHTTP(t, tc.method, k.Admin+tc.path, "", tc.body, nil), replica.Addr)
	}
}

// TestE2EMasterDown: a Redis turned into a replica whose master is gone,
// with replica-serve-stale-data no, answers MASTERDOWN to every command:
// the server is not ready and its routes answer 503, not 500; it is ready
// again once Redis is a master again.
func TestE2EMasterDown(t *testing.T) {
	e := startE2E(t)
	id := e.publish(t, "q", "", "x")
	rc := e.Redis.Client()
	ctx := context.Background()
	if err := rc.ConfigSet(ctx, "replica-serve-stale-data", "no").Err(); err != nil {
		t.Fatal(err)
	}
	dead := redistest.FreePort(t)
	if err := rc.SlaveOf(ctx, "127.0.0.1", fmt.Sprint(dead)).Err(); err != nil {
		t.Fatal(err)
	}
	r := waitReady(t, e.API, http.StatusServiceUnavailable, 3*time.Second)
	r.wantBody(t, `{"ready":false,"checks":{"admin redis":"not master","pool default":"not master"}}`)
	for _, tc := range []struct{ method, path, q string }{
		{http.MethodPut, "q", ""},
		{http.MethodGet, "q", "timeout=0"},
		{http.MethodGet, "q/size", ""},
		{http.MethodGet, "q/job/" + id, ""},
		{http.MethodDelete, "q/job/" + id, ""},
	} {
		var body []byte
		if tc.method == http.MethodPut {
			body = []byte("x")
		}
		wantUnavailable(t, e.do(t, tc.method, tc.path, tc.q, body, nil), e.Redis.Addr)
	}
	if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e.API, http.StatusOK, 5*time.Second)
	e.publish(t, "q", "", "again")
}
