package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestKillServersUsage (issue #31): three kairos-server processes on one
// redis-server, clients publishing, bulk-publishing, consuming and ACKing
// through all of them, and the servers SIGKILLed one after another mid-load
// (then all three at once). Each namespace's usage is then compared with
// what Redis holds (its job keys, found by SCAN, and their lengths):
// namespace "keep" (no TTL) is exact at once, as the scripts left it with
// no server running; "ttl" (jobs of 1 s TTL, expired in its ready lists)
// and "big" (a backlog of more than 2,000 entries, half of them of 3 s TTL
// expired in the middle of its list, recounted in chunks) are exact after one
// reconcile pass; and GET /quota/:ns of a server started again answers
// exactly that.
func TestKillServersUsage(t *testing.T) {
	rs := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	start := time.Now()
	bin := buildServer(t)
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	procs := make([]*serverProc, 3)
	for i := range procs {
		procs[i] = newServerProc(t, bin, rs.Addr)
		procs[i].start()
	}
	spaces := []string{"keep", "ttl", "big"}
	tokens := map[string]string{}
	for _, ns := range spaces {
		r := doHTTP(t, http.MethodPost, procs[0].admin+"/token/"+ns+"?description=kill-usage", "", nil, nil)
		r.wantStatus(t, http.StatusCreated)
		var tok struct{ Token string }
		r.decode(t, &tok)
		tokens[ns] = tok.Token
	}
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16, ResponseHeaderTimeout: 2 * time.Second}}
	defer hc.CloseIdleConnections()
	// A server keeps its ports when it starts again.
	api := func(rnd *rand.Rand) string { return procs[rnd.IntN(len(procs))].api }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var ok, failed, backlog atomic.Int64
	do := func(method, u, token string, body []byte) *response {
		r, err := tryHTTP(ctx, hc, method, u, token, body, nil)
		if err != nil || r.Status >= 300 && r.Status != http.StatusNotFound {
			failed.Add(1)
			return nil
		}
		ok.Add(1)
		return r
	}
	// keep and ttl: publish, consume (1 s TTR: some come back, some die
	// with one try), ACK most.
	for w := 0; w < 6; w++ {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				ns := spaces[rnd.IntN(2)]
				base := fmt.Sprintf("%s/api/%s/q%d", api(rnd), ns, rnd.IntN(3))
				ttl := 0
				if ns == "ttl" {
					ttl = 1
				}
				q := fmt.Sprintf("?tries=%d&ttl=%d&delay=%d", 1+rnd.IntN(2), ttl, rnd.IntN(4)/3)
				do(http.MethodPut, base+q, tokens[ns], []byte(strings.Repeat("k", 1+rnd.IntN(200))))
				if rnd.IntN(2) == 0 {
					continue
				}
				r := do(http.MethodGet, base+"?ttr=1&timeout=0", tokens[ns], nil)
				if r == nil || r.Status != http.StatusOK {
					continue
				}
				var j jobJSON
				if json.Unmarshal(r.Body, &j) == nil && rnd.IntN(4) != 0 {
					do(http.MethodDelete, base+"/job/"+j.JobID, tokens[ns], nil)
				}
			}
		})
	}
	// big: bulks of 64 into a queue nobody consumes, every other one of
	// 3 s TTL, until it holds 3,000 entries (the servers are all killed
	// then: the last ones expire after).
	wg.Go(func() {
		rnd := rand.New(rand.NewPCG(99, 7))
		for n := 0; ctx.Err() == nil && backlog.Load() < 3000; n++ {
			bodies := make([]string, 64)
			for i := range bodies {
				bodies[i] = strings.Repeat("b", 1+rnd.IntN(100))
			}
			b, _ := json.Marshal(bodies)
			if r := do(http.MethodPut, fmt.Sprintf("%s/api/big/backlog/bulk?ttl=%d", api(rnd), 3*(n%2)), tokens["big"], b); r != nil {
				backlog.Add(64)
			}
		}
	})

	// Kill a server every 250-500 ms, five times, then all three at once.
	for k := 0; k < 5; k++ {
		time.Sleep(250*time.Millisecond + rand.N(250*time.Millisecond))
		p := procs[k%len(procs)]
		p.kill()
		p.start()
	}
	for deadline := time.Now().Add(60 * time.Second); backlog.Load() < 3000; {
		if time.Now().After(deadline) {
			t.Fatalf("backlog of %d entries after 60 s", backlog.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range procs {
		p.kill()
	}
	cancel()
	wg.Wait()
	t.Logf("%d requests answered, %d failed (killed servers); backlog %d; at %v", ok.Load(), failed.Load(), backlog.Load(), time.Since(start).Round(time.Millisecond))
	if ok.Load() < 500 {
		t.Fatalf("only %d requests answered: the test did not exercise the servers", ok.Load())
	}

	e, err := rdb.New(context.Background(), admin, rdb.Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	usage := func(ns string) engine.Usage {
		u, err := e.Usage(context.Background(), ns)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// No server runs: "keep" is as the scripts left it.
	if got, want := usage("keep"), redisHolds(t, admin, "keep"); got != want || want.Jobs == 0 {
		t.Fatalf("usage of keep after the kills %+v, Redis holds %+v", got, want)
	}
	// The jobs of 1 and 3 s TTL expire.
	for deadline := time.Now().Add(15 * time.Second); ; {
		n := 0
		for _, ns := range []string{"ttl", "big"} {
			it := admin.Scan(context.Background(), 0, "j/{??}"+ns+"/*", 1000).Iterator()
			for it.Next(context.Background()) {
				if admin.PTTL(context.Background(), it.Val()).Val() > 0 {
					n++
				}
			}
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs of 1 or 3 s TTL still there", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The servers' expiry-ledger sweeps take off the big queue's jobs
	// that expired while they ran (most of them, when the load outlasts
	// their 3 s); those that expired after the kills are left over.
	if got, want := usage("big"), redisHolds(t, admin, "big"); got.Jobs < want.Jobs || got.Bytes < want.Bytes {
		t.Fatalf("usage of big %+v once its jobs expired, below what Redis holds %+v", got, want)
	} else {
		t.Logf("usage of big %+v once its jobs expired, Redis holds %+v", got, want)
	}
	st, err := e.Reconcile(context.Background())
	if err != nil || st.Passes == 0 || st.Aborted != 0 {
		t.Fatalf("one reconcile pass: %+v %v", st, err)
	}
	t.Logf("one reconcile pass at %v: %+v", time.Since(start).Round(time.Millisecond), st)
	for _, ns := range spaces {
		if got, want := usage(ns), redisHolds(t, admin, ns); got != want {
			t.Errorf("usage of %s after one reconcile pass %+v, Redis holds %+v", ns, got, want)
		}
	}
	// A server again: its pump takes the expired jobs' timer entries off
	// (and the job they count) while GET /quota answers.
	p := procs[0]
	p.start()
	for _, ns := range spaces {
		for deadline := time.Now().Add(10 * time.Second); ; {
			r := doHTTP(t, http.MethodGet, p.admin+"/quota/"+ns, "", nil, nil)
			r.wantStatus(t, http.StatusOK)
			var q struct{ Jobs, Bytes int64 }
			r.decode(t, &q)
			want := redisHolds(t, admin, ns)
			if q.Jobs == want.Jobs && q.Bytes == want.Bytes {
				t.Logf("GET /quota/%s: %s", ns, r.Body)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /quota/%s = %s, Redis holds %+v", ns, r.Body, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// redisHolds is namespace ns's usage as Redis holds it: its job keys
// (SCAN) and the sum of their lengths, and one job for each timer entry
// whose job expired (the pump takes it off when it meets the entry).
func redisHolds(t *testing.T, c *redis.Client, ns string) engine.Usage {
	t.Helper()
	ctx := context.Background()
	var u engine.Usage
	timers := c.Scan(ctx, 0, "t/{??}"+ns+"/*", 1000).Iterator()
	for timers.Next(ctx) {
		tk := timers.Val()
		for _, id := range c.ZRange(ctx, tk, 0, -1).Val() {
			if c.Exists(ctx, "j"+tk[1:]+"/"+id).Val() == 0 {
				u.Jobs++
			}
		}
	}
	it := c.Scan(ctx, 0, "j/{??}"+ns+"/*", 1000).Iterator()
	for it.Next(ctx) {
		n, err := c.StrLen(ctx, it.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			u.Jobs++
			u.Bytes += n
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}
