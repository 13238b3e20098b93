package server

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// TestTokensNeverLogged drives a live server (access log on, debug level)
// with tokens in ?token= (and in admin paths, queries and forms) through
// successes, every kind of 4xx, redirects, rate limiting and, with Redis
// gone, 500s: no log line ever holds a token. With HashTokens the admin
// listings and /metrics do not show them either.
func TestTokensNeverLogged(t *testing.T) {
	for _, hash := range []bool{false, true} {
		t.Run(fmt.Sprintf("HashTokens=%v", hash), func(t *testing.T) {
			t.Parallel()
			testTokensNeverLogged(t, hash)
		})
	}
}

func testTokensNeverLogged(t *testing.T, hash bool) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{
		Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
	})
	t.Cleanup(func() { _ = client.Close() })
	l := startLive(t, liveOptions{client: client, cacheTTL: 50 * time.Millisecond, config: func(c *config.Config) {
		c.Kairos.HashTokens = hash
	}})
	secret := l.token(t, "ns", auth.Scope{})
	scoped := l.token(t, "ns", auth.Scope{Queues: []string{"other"}})
	const created = "created-by-query-0123456789"
	const formToken = "created-by-form-01234567890"
	const unknown = "unknown-token-0123456789"
	secrets := []string{secret, scoped, created, formToken, unknown}

	q := func(tok string) string { return "token=" + url.QueryEscape(tok) }
	admin := func(method, path, body string) liveResponse {
		t.Helper()
		hdr := map[string]string{}
		if strings.HasPrefix(body, "description") {
			hdr["Content-Type"] = "application/x-www-form-urlencoded"
		}
		return liveDo(t, method, l.admin+path, strings.NewReader(body), hdr)
	}
	api := func(method, pathQuery, body string) liveResponse {
		t.Helper()
		return liveDo(t, method, l.api+pathQuery, strings.NewReader(body), nil)
	}

	// Admin routes carrying tokens in paths, queries and forms.
	if r := admin("POST", "/token/ns?description=q&"+q(created), ""); r.status != 201 {
		t.Fatalf("create by query: %d %s", r.status, r.body)
	}
	if r := admin("POST", "/token/ns", "description=f&token="+formToken); r.status != 201 {
		t.Fatalf("create by form: %d %s", r.status, r.body)
	}
	admin("POST", "/token/ns?description=dup&"+q(created), "")
	admin("POST", "/token/ns/"+secret+"/limit", `{"read":2,"write":2,"interval":100}`)
	admin("POST", "/token/ns/"+secret+"/limit", `{"read":2,"write":2,"interval":100}`) // 409
	admin("GET", "/token/ns/"+secret+"/limit", "")
	admin("PUT", "/token/ns/"+unknown+"/limit", `{"read":1`)
	admin("DELETE", "/token/ns/"+created, "")
	admin("GET", "/limits?force_update=true", "")
	if hash {
		for _, path := range []string{"/token/ns", "/token/ns?pool=default", "/limits", "/metrics"} {
			if body := admin("GET", path, "").body; containsAny(body, secrets) {
				t.Errorf("GET %s shows a token in hashed mode:\n%s", path, body)
			}
		}
	}

	// The public API, token in the query: success, 4xx of every kind,
	// redirects, rate limiting, odd separators.
	for _, r := range []struct{ method, pathQuery, body string }{
		{"PUT", "/api/ns/q?" + q(secret), "job"},
		{"PUT", "/api/ns/q?" + q(secret), "job"},
		{"PUT", "/api/ns/q?" + q(secret), "job"}, // 429
		{"GET", "/api/ns/q?ttr=5&" + q(secret), ""},
		{"GET", "/api/ns/q?ttr=5&" + q(secret), ""},
		{"GET", "/api/ns/q?ttr=5&" + q(secret), ""}, // 429
		{"PUT", "/api/ns/q?delay=-1&" + q(secret), "x"},
		{"PUT", "/api/ns/q/bulk?" + q(formToken), "[nope"},
		{"PUT", "/api/ns/q?" + q(formToken), strings.Repeat("x", 2<<20)},
		{"GET", "/api/ns/q/peek?" + q(unknown), ""},
		{"GET", "/api/ns/q/peek?" + q(scoped), ""},
		{"GET", "/api/ns/q/peek?" + q("nopool:"+secret), ""},
		{"GET", "/api/ns/q/peek/?" + q(secret), ""},
		{"GET", "/api/ns/q/job/nope?" + q(secret), ""},
		{"GET", "/api/n.s/q?" + q(secret), ""},
		{"GET", "/nowhere?" + q(secret), ""},
		{"GET", "/api/ns/q/peek?x=1;" + q(secret), ""},
		{"GET", "/api/ns/q/peek?tok%65n=" + url.QueryEscape(secret), ""},
		{"GET", "/api/ns/q/peek?" + q(secret) + "&" + q(scoped), ""},
	} {
		api(r.method, r.pathQuery, r.body)
	}

	// Redis goes away: verification (once the cache expires), the engine
	// and the throttler fail, and every failure is logged.
	m.Close()
	time.Sleep(100 * time.Millisecond)
	for _, pq := range []string{"/api/ns/q?" + q(secret), "/api/ns/q/peek?" + q(formToken), "/api/ns/q/size?" + q(secret)} {
		if r := api("GET", pq, ""); r.status != 503 {
			t.Errorf("GET %s with Redis gone: %d %s, want 503", pq, r.status, r.body)
		}
	}
	admin("DELETE", "/token/ns/"+formToken, "")
	admin("GET", "/token/ns/"+secret+"/limit", "")

	out := l.logs.String()
	if containsAny(out, secrets) {
		t.Errorf("a token was logged:\n%s", out)
	}
	for _, want := range []string{"token=REDACTED", "x=1;token=REDACTED", "tok%65n=REDACTED", "request failed", "/token/:namespace/:token"} {
		if !strings.Contains(out, want) {
			t.Errorf("the logs lack %q (did the requests run?):\n%s", want, out)
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
