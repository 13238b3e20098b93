package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// The quotas end to end (issue #31): the admin routes over real HTTP, and
// a publish refused for its namespace's quota answered 429 with the
// engine's message on every publishing path — single (served by an event
// loop when loops are on), bulk and re-publish — while the other routes
// and the other namespaces keep working, on miniredis and a real
// redis-server, loops on and off.

// quotaMsg is the body of a quota's refusal.
func quotaMsg(limit string, v int64) string {
	return `{"error":"namespace quota exceeded: ` + limit + ` ` + strconv.FormatInt(v, 10) + `"}`
}

// getQuotaJSON reads GET /quota/:namespace.
func getQuotaJSON(t testing.TB, l *live, ns string) quotaJSON {
	t.Helper()
	r := liveDo(t, "GET", l.admin+"/quota/"+ns, nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /quota/%s: %d %s", ns, r.status, r.body)
	}
	var q quotaJSON
	if err := json.Unmarshal([]byte(r.body), &q); err != nil {
		t.Fatalf("GET /quota/%s: %v in %s", ns, err, r.body)
	}
	return q
}

// publishUntilRefused publishes to ns/q until the quota refuses one, at
// most max times, and returns how many were accepted and the refusal.
// The quota reaches the engine's publishes within its refresh interval,
// so that the first publishes after a PUT may still pass: the caller
// checks the count against the usage, never against the quota alone.
func publishUntilRefused(t testing.TB, l *live, ns, q, token string, max int) (int, liveResponse) {
	t.Helper()
	for i := 0; i < max; i++ {
		r := liveDo(t, "PUT", l.api+"/api/"+ns+"/"+q+"?ttl=0", strings.NewReader("0123456789"), map[string]string{"X-Token": token})
		switch r.status {
		case http.StatusCreated:
		case http.StatusTooManyRequests:
			return i, r
		default:
			t.Fatalf("publish %d to %s: %d %s", i, ns, r.status, r.body)
		}
	}
	t.Fatalf("%d publishes to %s, none refused", max, ns)
	return 0, liveResponse{}
}

func TestQuotaOverHTTP(t *testing.T) {
	for name, backend := range liveBackends {
		for _, loops := range []int{0, -1} {
			t.Run(fmt.Sprintf("%s/EventLoops=%d", name, loops), func(t *testing.T) {
				testQuotaOverHTTP(t, backend(t), loops)
			})
		}
	}
}

func testQuotaOverHTTP(t *testing.T, client redis.UniversalClient, loops int) {
	l := startLive(t, liveOptions{client: client, config: func(c *config.Config) {
		c.Kairos.EventLoops = loops
		c.EnableAccessLog = false
	}})
	if served := l.srv.eventLoops() > 0; served != (loops >= 0 && runtime.GOOS == "linux") {
		t.Fatalf("event loops: %v, want %v", served, loops >= 0)
	}
	noisy, quiet := l.token(t, "noisy", auth.Scope{}), l.token(t, "quiet", auth.Scope{})
	hdr := map[string]string{"X-Token": noisy}

	// No quota: GET answers the default (none) and the usage.
	if q := getQuotaJSON(t, l, "noisy"); q.Source != quotaDefault || q.MaxJobs != 0 || q.MaxBytes != 0 || q.Jobs != 0 {
		t.Fatalf("before any quota: %+v", q)
	}
	r := liveDo(t, "PUT", l.admin+"/quota/noisy", strings.NewReader(`{"max_jobs":3}`), nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"max_jobs":3`) || !strings.Contains(r.body, `"source":"namespace"`) {
		t.Fatalf("PUT /quota/noisy: %d %s", r.status, r.body)
	}

	// Single publishes until the quota refuses one: 429 with the
	// engine's message, and nothing written.
	n, refused := publishUntilRefused(t, l, "noisy", "q", noisy, 50)
	if refused.body != quotaMsg("max_jobs", 3) || refused.header.Get("Retry-After") != "" {
		t.Fatalf("refused publish: %d %q (Retry-After %q), want 429 %s", refused.status, refused.body, refused.header.Get("Retry-After"), quotaMsg("max_jobs", 3))
	}
	u := getQuotaJSON(t, l, "noisy")
	// Bytes are the stored jobs': each body and its metadata.
	if u.Jobs != int64(n) || u.Bytes < int64(10*n) || n != 3 {
		t.Fatalf("after %d accepted publishes of 10 bytes: usage %+v", n, u)
	}
	// Bulk: refused whole.
	r = liveDo(t, "PUT", l.api+"/api/noisy/q/bulk", strings.NewReader(`[{"data":"a"},{"data":"b"}]`), hdr)
	if r.status != http.StatusTooManyRequests || r.body != quotaMsg("max_jobs", 3) {
		t.Fatalf("bulk publish over the quota: %d %s", r.status, r.body)
	}
	if after := getQuotaJSON(t, l, "noisy"); after != u {
		t.Fatalf("refused publishes wrote: usage %+v, was %+v", after, u)
	}
	// A re-publish of a job that exists replaces it: the namespace holds
	// no more, and it is accepted at the quota.
	job := consumeOne(t, l, "noisy", hdr)
	if r = liveDo(t, "PUT", l.api+"/api/noisy/q/job/"+job, strings.NewReader("0123456789"), hdr); r.status != http.StatusCreated {
		t.Fatalf("re-publish of a live job at the quota: %d %s", r.status, r.body)
	}
	if after := getQuotaJSON(t, l, "noisy"); after.Jobs != 3 {
		t.Fatalf("after a re-publish: usage %+v", after)
	}
	// The other routes keep working: consume, size, ACK, and the other
	// namespace's publishes. An ACK gives the room back at once.
	if r = liveDo(t, "GET", l.api+"/api/noisy/q/size", nil, hdr); r.status != http.StatusOK {
		t.Fatalf("size: %d %s", r.status, r.body)
	}
	if r = liveDo(t, "PUT", l.api+"/api/quiet/q", strings.NewReader("hello"), map[string]string{"X-Token": quiet}); r.status != http.StatusCreated {
		t.Fatalf("the other namespace's publish: %d %s", r.status, r.body)
	}
	gone := consumeOne(t, l, "noisy", hdr)
	if r = liveDo(t, "DELETE", l.api+"/api/noisy/q/job/"+gone, nil, hdr); r.status != http.StatusNoContent {
		t.Fatalf("ACK: %d %s", r.status, r.body)
	}
	if r = liveDo(t, "PUT", l.api+"/api/noisy/q", strings.NewReader("0123456789"), hdr); r.status != http.StatusCreated {
		t.Fatalf("publish right after an ACK: %d %s", r.status, r.body)
	}
	// A re-publish of a job that is gone makes a new one: refused.
	r = liveDo(t, "PUT", l.api+"/api/noisy/q/job/"+gone, strings.NewReader("again"), hdr)
	if r.status != http.StatusTooManyRequests || r.body != quotaMsg("max_jobs", 3) {
		t.Fatalf("re-publish of a gone job over the quota: %d %s", r.status, r.body)
	}
	if after := getQuotaJSON(t, l, "noisy"); after.Jobs != 3 {
		t.Fatalf("after a refused re-publish: usage %+v", after)
	}

	// A bytes quota names its limit.
	if r = liveDo(t, "PUT", l.admin+"/quota/noisy", strings.NewReader(`{"max_bytes":35}`), nil); r.status != http.StatusOK {
		t.Fatalf("PUT max_bytes: %d %s", r.status, r.body)
	}
	if _, refused = publishUntilRefused(t, l, "noisy", "q", noisy, 50); refused.body != quotaMsg("max_bytes", 35) {
		t.Fatalf("bytes refusal: %d %s", refused.status, refused.body)
	}

	// The list, the metrics, then DELETE: the default (none) again.
	r = liveDo(t, "GET", l.admin+"/quota", nil, nil)
	var list quotaListJSON
	if err := json.Unmarshal([]byte(r.body), &list); r.status != http.StatusOK || err != nil {
		t.Fatalf("GET /quota: %d %s", r.status, r.body)
	}
	seen := map[string]quotaJSON{}
	for _, q := range list.Namespaces {
		seen[q.Namespace] = q
	}
	if seen["noisy"].MaxBytes != 35 || seen["noisy"].Source != quotaOwn || seen["quiet"].Jobs != 1 || seen["quiet"].Source != quotaDefault {
		t.Fatalf("GET /quota: %s", r.body)
	}
	m := liveDo(t, "GET", l.admin+"/metrics", nil, nil).body
	for _, want := range []string{
		`kairos_publish_refused_total{namespace="noisy",pool="default",reason="quota_jobs"}`,
		`kairos_publish_refused_total{namespace="noisy",pool="default",reason="quota_bytes"} 1`,
		`kairos_namespace_jobs{namespace="quiet",pool="default"} 1`,
		`kairos_namespace_quota_bytes{namespace="noisy",pool="default"} 35`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if !regexp.MustCompile(`kairos_namespace_bytes\{namespace="quiet",pool="default"\} [1-9]`).MatchString(m) {
		t.Error("/metrics has no bytes for the namespace quiet")
	}
	if strings.Contains(m, `kairos_namespace_quota_jobs{namespace="quiet"`) {
		t.Error("/metrics has a jobs quota for a namespace without one")
	}
	if l.srv.eventLoops() > 0 {
		// The single publishes' 429 came from the fast path.
		if !regexp.MustCompile(`kairos_http_responses\{api="/api/:namespace/:queue",code="429",method="PUT",pool="default",served_by="loop"\} [1-9]`).MatchString(m) {
			t.Errorf("no 429 served by an event loop in /metrics")
		}
	}
	if r = liveDo(t, "DELETE", l.admin+"/quota/noisy", nil, nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE /quota/noisy: %d %s", r.status, r.body)
	}
	if q := getQuotaJSON(t, l, "noisy"); q.Source != quotaDefault || q.MaxBytes != 0 {
		t.Fatalf("after DELETE: %+v", q)
	}
	waitPublishes(t, l, "noisy", noisy)
}

// consumeOne consumes one job of ns/q (30 s TTR) and returns its ID.
func consumeOne(t testing.TB, l *live, ns string, hdr map[string]string) string {
	t.Helper()
	c := liveDo(t, "GET", l.api+"/api/"+ns+"/q?ttr=30&timeout=0", nil, hdr)
	var job struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(c.body), &job); c.status != http.StatusOK || err != nil || job.JobID == "" {
		t.Fatalf("consume from %s: %d %s", ns, c.status, c.body)
	}
	return job.JobID
}

// waitPublishes waits until a publish to ns is accepted (a removed quota
// reaches the publishes within the engine's refresh interval).
func waitPublishes(t testing.TB, l *live, ns, token string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := liveDo(t, "PUT", l.api+"/api/"+ns+"/q", strings.NewReader("x"), map[string]string{"X-Token": token})
		if r.status == http.StatusCreated {
			return
		}
		if r.status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("publish to %s after its quota was removed: %d %s", ns, r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestQuotaDefaultFromConfig: [Pool.default] DefaultMaxJobs limits every
// namespace without a quota of its own; GET says "default"; an own quota
// of {} exempts one namespace.
func TestQuotaDefaultFromConfig(t *testing.T) {
	l := startLive(t, liveOptions{config: func(c *config.Config) {
		c.Pool = map[string]config.RedisConf{"default": {DefaultMaxJobs: 2}}
	}})
	tok := l.token(t, "any", auth.Scope{})
	if q := getQuotaJSON(t, l, "any"); q.Source != quotaDefault || q.MaxJobs != 2 {
		t.Fatalf("GET /quota/any: %+v", q)
	}
	n, refused := publishUntilRefused(t, l, "any", "q", tok, 10)
	if n != 2 || refused.body != quotaMsg("max_jobs", 2) {
		t.Fatalf("default quota: %d accepted, then %d %s", n, refused.status, refused.body)
	}
	r := liveDo(t, "GET", l.admin+"/quota", nil, nil)
	if !strings.Contains(r.body, `"defaults":{"default":{"max_bytes":0,"max_jobs":2}}`) {
		t.Fatalf("GET /quota: %s", r.body)
	}
	if r = liveDo(t, "PUT", l.admin+"/quota/any", strings.NewReader(`{}`), nil); r.status != http.StatusOK || !strings.Contains(r.body, `"max_jobs":0`) {
		t.Fatalf("PUT {}: %d %s", r.status, r.body)
	}
	waitPublishes(t, l, "any", tok)
}

// TestQuotaBadInput: a body that is not a quota, a negative value and a
// bad namespace or pool answer 400 with a JSON error, never 500, and
// change nothing.
func TestQuotaBadInput(t *testing.T) {
	l := startLive(t, liveOptions{})
	for _, body := range []string{
		`{"max_jobs":-1}`, `{"max_bytes":-5}`, `{"max_jobs":"50"}`, `{"max_jobs":1.5}`, `{"max_jobs":1e30}`,
		`{"max_job":5}`, `[5]`, `{"max_jobs":5} {}`, `not json`, ``, `null5`,
	} {
		r := liveDo(t, "PUT", l.admin+"/quota/ns", strings.NewReader(body), nil)
		var e struct{ Error string }
		if r.status != http.StatusBadRequest || json.Unmarshal([]byte(r.body), &e) != nil || !strings.HasPrefix(e.Error, "invalid quota") {
			t.Errorf("PUT %q: %d %s, want 400 invalid quota", body, r.status, r.body)
		}
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/quota/bad%20name"}, {"PUT", "/quota/bad%20name"}, {"DELETE", "/quota/bad%20name"},
		{"GET", "/quota/ns?pool=nope"}, {"GET", "/quota?pool=nope"},
	} {
		r := liveDo(t, tc.method, l.admin+tc.path, strings.NewReader(`{"max_jobs":1}`), nil)
		if r.status != http.StatusBadRequest || !strings.HasPrefix(r.body, `{"error":`) {
			t.Errorf("%s %s: %d %s, want a 400 JSON error", tc.method, tc.path, r.status, r.body)
		}
	}
	if q := getQuotaJSON(t, l, "ns"); q.Source != quotaDefault || q.MaxJobs != 0 {
		t.Fatalf("after bad requests: %+v", q)
	}
}

// TestQuotaWithoutTenancy: a pool whose engine keeps no usage (the fakes
// here) answers the quota routes 501, as doc/openapi.yaml describes; GET
// /quota over every pool leaves such pools out, and answers 501 when the
// one asked for is one.
func TestQuotaWithoutTenancy(t *testing.T) {
	env := newEnv(t)
	const body = `{"error":"this pool's engine keeps no usage or quotas"}`
	for _, r := range []request{
		{method: "GET", target: "/quota/ns"},
		{method: "PUT", target: "/quota/ns", body: `{"max_jobs":1}`},
		{method: "DELETE", target: "/quota/ns?pool=b"},
		{method: "GET", target: "/quota?pool=default"},
	} {
		expect(t, env.admin(t, r), http.StatusNotImplemented, body)
	}
	expect(t, env.admin(t, request{method: "GET", target: "/quota"}), http.StatusOK, `{"defaults":{},"namespaces":[]}`)
	expect(t, env.admin(t, request{method: "GET", target: "/quota?pool=nope"}), http.StatusBadRequest, `{"error":"the pool was not exists"}`) // lmstfy's admin wording
}
