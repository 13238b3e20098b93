package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestE2EAdminRedisFailover: a master of a Redis Cluster that serves both
// the admin data and the pool is SIGKILLed while clients publish to queues
// that live on the other masters, with a token of a namespace that the
// kill concerns:
//
//   - "token master": the master holds the namespace's tokens and the
//     token's rate-limit bucket. Token checks answer from the grace of
//     their last answer, then are retried within the retry window; the
//     bucket script is retried within it. No publish may fail fast (a 503
//     is allowed only after a full retry window, when the failover
//     outlasted it), none may answer 500.
//   - "legacy scope master": the master holds only the namespace's legacy
//     scope hash (another slot); with the grace off, no publish may fail
//     or wait for the failover (beyond the moment every node answers
//     CLUSTERDOWN): a token check reads the token's slot only.
//
// Before, token checks were not retried and read the legacy hash in their
// pipeline: publishes answered 503 at once for the whole failover and
// beyond (until go-redis reloaded its slot map), 162 of 298 in one run.
func TestE2EAdminRedisFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes the cluster node timeout (3s) and more")
	}
	t.Parallel() // clusters of its own; mostly waits on the failovers
	t.Run("token master", func(t *testing.T) { adminFailover(t, false) })
	t.Run("legacy scope master", func(t *testing.T) { adminFailover(t, true) })
}

func adminFailover(t *testing.T, legacy bool) {
	c := redistest.StartCluster(t)
	cfg := clusterConfig(c)
	tokenMaster := func(ns string) string { return c.MasterOf(t, "tk/"+auth.DefaultPool+"/"+ns) } // lmstfy's token hash
	legacyMaster := func(ns string) string { return c.MasterOf(t, "tks/"+auth.DefaultPool+"/"+ns) }
	ns := "failover"
	victim := tokenMaster(ns)
	if legacy {
		cfg.Kairos.TokenGraceOnFailureMs = 0
		for i := 0; tokenMaster(ns) == legacyMaster(ns); i++ {
			ns = fmt.Sprintf("failover%d", i)
		}
		victim = legacyMaster(ns)
	}
	k := startKairos(t, cfg)
	var token string
	for i := 0; token == ""; i++ {
		// Its publish bucket on the victim too, unless the kill must not
		// concern the token's own keys.
		cand := fmt.Sprintf("failover-token-%08d", i)
		if onVictim := c.MasterOf(t, "tb/"+auth.DefaultPool+"/"+ns+"/"+cand+"/w") == victim; onVictim != legacy {
			token = cand
		}
	}
	doHTTP(t, http.MethodPost, k.Admin+"/token/"+ns+"?description=failover&token="+token, "", nil, nil).wantStatus(t, http.StatusCreated)
	doHTTP(t, http.MethodPost, k.Admin+"/token/"+ns+"/"+token+"/limit", "", []byte(`{"read":0,"write":1000000,"interval":1}`), nil).wantStatus(t, http.StatusCreated)

	// Queues on the healthy masters.
	var queues []string
	for i := 0; len(queues) < 4; i++ {
		q := fmt.Sprintf("q%d", i)
		if c.MasterOf(t, rdb.ReadyKey(ns, q)) != victim {
			queues = append(queues, q)
		}
	}

	type result struct {
		start, end time.Time
		status     int
		body       string
		err        error
	}
	client := &http.Client{Timeout: 30 * time.Second}
	publish := func(q string) result {
		r := result{start: time.Now()}
		req, _ := http.NewRequest(http.MethodPut, k.API+"/api/"+ns+"/"+q+"?tries=1", strings.NewReader("x"))
		req.Header.Set("X-Token", token)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r.status, r.body = resp.StatusCode, string(b)
		}
		r.err, r.end = err, time.Now()
		return r
	}
	// Warm up: the token checked and cached, the limits loaded.
	for _, q := range queues {
		if r := publish(q); r.status != http.StatusCreated {
			t.Fatalf("publish to %s before the kill: %d %s %v", q, r.status, r.body, r.err)
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	for _, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r := publish(q)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	c.Kill(t, victim)
	c.Wait(t)
	failover := time.Since(killed)
	// Publish on for a while after: the clients' slot maps catch up.
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()

	const window = auth.DefaultClusterRetry
	var ok, unavailable int
	var worst time.Duration
	for _, r := range results {
		d := r.end.Sub(r.start)
		worst = max(worst, d)
		if d > time.Second {
			t.Logf("slow publish at +%v: %v, %d", r.start.Sub(killed).Round(time.Millisecond), d.Round(time.Millisecond), r.status)
		}
		switch {
		case r.err != nil:
			t.Errorf("publish at +%v: %v", r.start.Sub(killed).Round(time.Millisecond), r.err)
		case r.status == http.StatusCreated:
			ok++
		case r.status == http.StatusServiceUnavailable && d >= window-500*time.Millisecond:
			unavailable++ // the failover outlasted a full retry window
		default:
			t.Errorf("publish at +%v answered %d after %v: %s", r.start.Sub(killed).Round(time.Millisecond), r.status, d.Round(time.Millisecond), r.body)
		}
	}
	t.Logf("failover took %v; %d publishes: %d created, %d answered 503 after a full retry window; slowest %v",
		failover.Round(time.Millisecond), len(results), ok, unavailable, worst.Round(time.Millisecond))
	if ok == 0 {
		t.Fatal("no publish succeeded")
	}
	// A healthy master answers CLUSTERDOWN too, from when the cluster
	// marks the victim failed until its replica takes over (a second or
	// so): the retry rides that out.
	if legacy && (unavailable > 0 || worst >= 4*time.Second) {
		t.Errorf("the failover of a master that holds none of the token's keys held publishes up: %d answered 503, the slowest took %v", unavailable, worst)
	}
	// A failover well within the window leaves no request without an
	// answer in it (a second for the clients' slot maps to follow).
	if failover < window-time.Second && unavailable > 0 {
		t.Errorf("%d publishes answered 503 although the failover (%v) was shorter than the retry window (%v)", unavailable, failover, window)
	}
}

// TestE2EClusterManualFailoverWait: on a cluster pool with WaitReplicas =
// 1, the master of busy queues is demoted by CLUSTER FAILOVER on its
// replica while clients publish to them: a WAIT pending on the old master
// then ends with UNBLOCKED, which must answer 503 "the job may exist" with
// the job's ID, never 500; the other 503s are the moments the slot has no
// master that takes writes. Every publish answered 201 or 503.
func TestE2EClusterManualFailoverWait(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of its own and fails a master over")
	}
	t.Parallel() // a cluster of its own; mostly waits on the failover
	c := redistest.StartCluster(t)
	cfg := clusterConfig(c)
	pool := cfg.Pool["default"]
	pool.WaitReplicas = 1
	pool.WaitTimeoutMs = 1000
	cfg.Pool["default"] = pool
	k := startKairos(t, cfg)
	const ns = "demote"
	token := k.newToken(t, ns)
	victim := c.MasterOf(t, rdb.ReadyKey(ns, "q0"))
	var replica string
	for _, sh := range c.Shards(t) {
		if sh.Master == victim {
			replica = sh.Replicas[0]
		}
	}
	var queues []string
	for i := 0; len(queues) < 4; i++ {
		q := fmt.Sprintf("q%d", i)
		if c.MasterOf(t, rdb.ReadyKey(ns, q)) == victim {
			queues = append(queues, q)
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	statuses := map[int]int{}
	mayExist := 0
	var wg sync.WaitGroup
	for _, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodPut, k.API+"/api/"+ns+"/"+q+"?tries=1", strings.NewReader("x"))
				req.Header.Set("X-Token", token)
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				if strings.Contains(string(b), "may exist") {
					mayExist++
				}
				mu.Unlock()
				switch {
				case resp.StatusCode == http.StatusCreated:
				case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "may exist"):
					if !strings.Contains(string(b), `"job_id":"`) {
						t.Errorf("503 may exist without the job ID: %s", b)
					}
				case resp.StatusCode == http.StatusServiceUnavailable:
				default:
					t.Errorf("publish to %s answered %d: %s", q, resp.StatusCode, b)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer rc.Close()
	// TAKEOVER: the replica takes the slots at once, without the old
	// master's agreement; that one learns of it by gossip a moment later
	// and demotes itself, meanwhile its WAITs have no replica to count.
	if err := rc.Do(context.Background(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", replica, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.MasterOf(t, rdb.ReadyKey(ns, "q0")) != replica {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not take over from %s", replica, victim)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Wait(t)
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	t.Logf("answers by status: %v, %d of the 503s \"may exist\" with the job's ID", statuses, mayExist)
	if statuses[http.StatusCreated] == 0 {
		t.Fatal("no publish succeeded")
	}
}
