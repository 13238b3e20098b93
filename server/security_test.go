package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// TestHashedTokensThroughTheAdminAPI: with HashTokens, the token is shown
// once at creation, listings show fingerprints, the admin routes take the
// fingerprint, and the admin Redis holds no token.
func TestHashedTokensThroughTheAdminAPI(t *testing.T) {
	l := startLive(t, liveOptions{cacheTTL: -1, config: func(c *config.Config) { c.Kairos.HashTokens = true }})
	created := liveDo(t, "POST", l.admin+"/token/ns?description=workers", nil, nil)
	var tr struct{ Token string }
	if created.status != 201 || json.Unmarshal([]byte(created.body), &tr) != nil || tr.Token == "" {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	tok, fp := tr.Token, auth.Fingerprint(tr.Token)
	hdr := map[string]string{"X-Token": tok}
	if r := liveDo(t, "PUT", l.api+"/api/ns/q", strings.NewReader("x"), hdr); r.status != 201 {
		t.Fatalf("publish with the new token: %d %s", r.status, r.body)
	}

	if r := liveDo(t, "GET", l.admin+"/token/ns", nil, nil); r.body != "{\n    \"tokens\": {\n        \""+fp+"\": \"workers\"\n    }\n}" {
		t.Errorf("listing: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "GET", l.admin+"/token/ns?pool=default", nil, nil); !strings.Contains(r.body, `"default:`+fp+`"`) {
		t.Errorf("listing with pool: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "POST", l.admin+"/token/ns/"+fp+"/limit", strings.NewReader(`{"read":0,"write":1,"interval":100}`), nil); r.status != 201 {
		t.Errorf("limit by fingerprint: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "GET", l.admin+"/token/ns/"+tok+"/limit", nil, nil); r.body != `{"read":0,"write":1,"interval":100}` {
		t.Errorf("limit by token: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "GET", l.admin+"/limits", nil, nil); !strings.Contains(r.body, `"token":"`+fp+`"`) {
		t.Errorf("limits: %s", r.body)
	}
	if r := liveDo(t, "PUT", l.admin+"/token/ns/sha256-ffffffffffff/limit", strings.NewReader(`{"read":1,"write":1,"interval":1}`), nil); r.status != 400 ||
		r.body != `{"error":"the fingerprint matches no token"}` {
		t.Errorf("limit for an unknown fingerprint: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "POST", l.admin+"/token/ns?description=x&token=sha256-0123456789abcdef0123", nil, nil); r.status != 400 ||
		r.body != `{"error":"the token must not start with \"sha256-\""}` {
		t.Errorf("reserved token: %d %s", r.status, r.body)
	}
	if where := redisHolds(t, l, tok); len(where) > 0 {
		t.Errorf("the admin Redis holds the token in %v", where)
	}

	if r := liveDo(t, "DELETE", l.admin+"/token/ns/"+fp, nil, nil); r.status != 204 {
		t.Fatalf("delete by fingerprint: %d %s", r.status, r.body)
	}
	if r := liveDo(t, "PUT", l.api+"/api/ns/q", strings.NewReader("x"), hdr); r.status != 401 {
		t.Errorf("publish with the deleted token: %d %s", r.status, r.body)
	}
	if n, _ := l.client.HLen(context.Background(), "__throttler_keys__").Result(); n != 0 {
		t.Errorf("the token's limit outlived it (%d limits)", n)
	}
}

// redisHolds lists the keys, hash fields and values of the Redis that
// contain s.
func redisHolds(t *testing.T, l *live, s string) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := l.client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		if strings.Contains(k, s) {
			out = append(out, k)
		}
		if typ, _ := l.client.Type(ctx, k).Result(); typ == "hash" {
			m, _ := l.client.HGetAll(ctx, k).Result()
			for f, v := range m {
				if strings.Contains(f, s) || strings.Contains(v, s) {
					out = append(out, k+" "+f)
				}
			}
		}
	}
	return out
}

// TestReadHeaderTimeoutIsCapped: the header timeout never exceeds the read
// timeout, and defaults to 10 s.
func TestReadHeaderTimeoutIsCapped(t *testing.T) {
	for _, tc := range []struct {
		header, read int
		want         time.Duration
	}{
		{0, 30, 10 * time.Second},
		{5, 30, 5 * time.Second},
		{60, 30, 30 * time.Second},
	} {
		env := newEnv(t, withConfig(func(c *config.Config) {
			c.Kairos.ReadHeaderTimeoutSecond, c.Kairos.ReadTimeoutSecond = tc.header, tc.read
		}))
		if got := env.srv.apiSrv.ReadHeaderTimeout; got != tc.want || env.srv.adminSrv.ReadHeaderTimeout != tc.want {
			t.Errorf("ReadHeaderTimeoutSecond %d, ReadTimeoutSecond %d: header timeout %v, want %v", tc.header, tc.read, got, tc.want)
		}
	}
}
