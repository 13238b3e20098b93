package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// TestRateLimitAcrossInstances: two server instances over one Redis (each
// with its own engine, token store and throttler, as two processes have),
// hammered concurrently through both: in one window exactly the limit gets
// through, for publishes and for consumes, on miniredis and on a real
// redis-server, with tokens in clear and hashed.
func TestRateLimitAcrossInstances(t *testing.T) {
	for name, backend := range liveBackends {
		for _, hash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/HashTokens=%v", name, hash), func(t *testing.T) {
				t.Parallel()
				client := backend(t)
				if client == nil {
					client = startLive(t, liveOptions{}).client // a fresh miniredis
				}
				testRateLimitAcrossInstances(t, client, hash)
			})
		}
	}
}

func testRateLimitAcrossInstances(t *testing.T, client redis.UniversalClient, hash bool) {
	opts := liveOptions{client: client, config: func(c *config.Config) {
		c.Kairos.HashTokens = hash
		c.EnableAccessLog = false
	}}
	a, b := startLive(t, opts), startLive(t, opts)
	tok := a.token(t, "ns", auth.Scope{})
	// An interval of 100,000 s refills one request in 5,000 s: within this
	// test's window, however loaded the machine (100 s refilled two
	// publishes in a -race run at load average 30), the bucket admits
	// exactly its capacity.
	const writes, reads = 20, 10
	limit := fmt.Sprintf(`{"read":%d,"write":%d,"interval":100000}`, reads, writes)
	if r := liveDo(t, "POST", a.admin+"/token/ns/"+tok+"/limit", strings.NewReader(limit), nil); r.status != 201 {
		t.Fatalf("set limit: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "GET", b.admin+"/limits?force_update=true", nil, nil); r.status != 200 || !strings.Contains(r.body, `"write":20`) {
		t.Fatalf("instance b does not see the limit: %d %s", r.status, r.body)
	}
	if hash && strings.Contains(liveDo(t, "GET", b.admin+"/limits", nil, nil).body, tok) {
		t.Error("GET /limits shows the token in hashed mode")
	}

	hammer := func(method, path string, workers, perWorker int) map[int]int {
		var mu sync.Mutex
		counts := map[int]int{}
		var n atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perWorker {
					base := a.api
					if n.Add(1)%2 == int64(w%2) {
						base = b.api
					}
					r := liveDo(t, method, base+path, strings.NewReader("job"), map[string]string{"X-Token": tok})
					mu.Lock()
					counts[r.status]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return counts
	}
	if got := hammer("PUT", "/api/ns/q", 8, 10); got[201] != writes || got[429] != 80-writes || len(got) != 2 {
		t.Errorf("publishes: %v, want %d × 201 and %d × 429", got, writes, 80-writes)
	}
	if got := hammer("GET", "/api/ns/q", 8, 5); got[200] != reads || got[429] != 40-reads || len(got) != 2 {
		t.Errorf("consumes: %v, want %d × 200 and %d × 429", got, reads, 40-reads)
	}
	// The metric names the token by fingerprint in hashed mode.
	metrics := liveDo(t, "GET", a.admin+"/metrics", nil, nil).body
	if !strings.Contains(metrics, "infra_lmstfy_http_rate_limit") {
		t.Error("no rate limit metric")
	}
	if strings.Contains(metrics, tok) != !hash {
		t.Errorf("the token appears in /metrics: %v, want %v", strings.Contains(metrics, tok), !hash)
	}
}

// TestRateLimitJobs: a token's write_jobs limit weighs a bulk publish by
// its jobs and a single publish as one, through the event loops and
// net/http alike, beside its request limit: a publish is admitted on one
// job, before its body is read, a bulk then charged the rest (into debt),
// and while the limit is in debt every publish is lmstfy's 429, giving its
// request back.
func TestRateLimitJobs(t *testing.T) {
	for _, loops := range []int{0, -1} {
		t.Run(fmt.Sprintf("EventLoops=%d", loops), func(t *testing.T) {
			s := startLive(t, liveOptions{config: func(c *config.Config) { c.Kairos.EventLoops = loops }})
			tok := s.token(t, "ns", auth.Scope{})
			// As TestRateLimitAcrossInstances: nothing refills within the test.
			limit := `{"read":0,"write":4,"write_jobs":100,"interval":100000}`
			if r := liveDo(t, "POST", s.admin+"/token/ns/"+tok+"/limit", strings.NewReader(limit), nil); r.status != 201 {
				t.Fatalf("set limit: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "GET", s.admin+"/token/ns/"+tok+"/limit", nil, nil); r.status != 200 || !strings.Contains(r.body, `"write_jobs":100`) {
				t.Fatalf("get limit: %d %s", r.status, r.body)
			}
			bulk := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat(`"j",`, n), ",") + "]" }
			hdr := map[string]string{"X-Token": tok}
			// A limit of jobs alone is a limit.
			jobsOnly := s.token(t, "ns", auth.Scope{})
			if r := liveDo(t, "POST", s.admin+"/token/ns/"+jobsOnly+"/limit", strings.NewReader(`{"read":0,"write":0,"write_jobs":3,"interval":100000}`), nil); r.status != 201 {
				t.Fatalf("set a jobs-only limit: %d %s", r.status, r.body)
			}
			for i, want := range []int{201, 429} {
				if r := liveDo(t, "PUT", s.api+"/api/ns/q/bulk", strings.NewReader(bulk(3)), map[string]string{"X-Token": jobsOnly}); r.status != want {
					t.Fatalf("jobs-only limit, bulk %d: %d %s, want %d", i, r.status, r.body, want)
				}
			}
			for i, step := range []struct {
				path, body string
				want       int
			}{
				{"/api/ns/q/bulk", bulk(64), 201}, // 36 jobs left; 3 requests
				{"/api/ns/q/bulk", bulk(64), 201}, // admitted on 1 of the 36: 28 in debt; 2 requests
				{"/api/ns/q", "one", 429},         // in debt: its request goes back
				{"/api/ns/q/bulk", bulk(1), 429},  // refused before its body
				{"/api/ns/q/bulk", "[]", 429},     // (which is not even read)
			} {
				r := liveDo(t, "PUT", s.api+step.path, strings.NewReader(step.body), hdr)
				if r.status != step.want {
					t.Fatalf("step %d, PUT %s: %d %s, want %d", i, step.path, r.status, r.body, step.want)
				}
				if step.want == 429 && !strings.Contains(r.body, `"msg":"token(`) {
					t.Errorf("step %d: %s, want lmstfy's rate-limit body", i, r.body)
				}
			}
			if r := liveDo(t, "GET", s.api+"/api/ns/q/size", nil, nil); r.status != 200 || !strings.Contains(r.body, "131") {
				t.Fatalf("size: %d %s, want the bulks' 131 jobs", r.status, r.body)
			}
			// Without the jobs limit, the request limit: two of its four
			// requests were delivered, the refused ones gave theirs back.
			reqLimit := `{"read":0,"write":4,"interval":100000}`
			if r := liveDo(t, "PUT", s.admin+"/token/ns/"+tok+"/limit", strings.NewReader(reqLimit), nil); r.status != 200 {
				t.Fatalf("drop the jobs limit: %d %s", r.status, r.body)
			}
			for i, want := range []int{201, 201, 429} {
				if r := liveDo(t, "PUT", s.api+"/api/ns/q/bulk", strings.NewReader(bulk(64)), hdr); r.status != want {
					t.Fatalf("request limit, bulk %d: %d %s, want %d", i, r.status, r.body, want)
				}
			}
		})
	}
}
