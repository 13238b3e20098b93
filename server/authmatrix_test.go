package server

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// matrixRoute is one public route of the auth matrix: the role a scoped
// token needs, and the statuses a valid token may get (nil: anything but
// 401, 403 and 5xx).
type matrixRoute struct {
	method, path, body string
	role               auth.Role
	size               bool // one of the two size routes
	ok                 []int
}

func matrixRoutes(jobID string) []matrixRoute {
	return []matrixRoute{
		{method: "PUT", path: "/api/ns/q", body: "job", role: auth.RolePublish, ok: []int{201}},
		{method: "PUT", path: "/api/ns/q/bulk", body: `["a",1]`, role: auth.RolePublish, ok: []int{201}},
		{method: "PUT", path: "/api/ns/q/job/" + jobID, body: "again", role: auth.RolePublish, ok: []int{201}},
		{method: "GET", path: "/api/ns/q", role: auth.RoleConsume, ok: []int{200, 404}},
		{method: "GET", path: "/api/ns/q/peek", role: auth.RoleRead, ok: []int{200, 404}},
		{method: "GET", path: "/api/ns/q/job/" + jobID, role: auth.RoleRead, ok: []int{200, 404}},
		{method: "DELETE", path: "/api/ns/q/job/" + jobID, role: auth.RoleConsume, ok: []int{204}},
		{method: "GET", path: "/api/ns/q/deadletter", role: auth.RoleRead, ok: []int{200}},
		{method: "PUT", path: "/api/ns/q/deadletter", role: auth.RoleManage, ok: []int{200}},
		{method: "DELETE", path: "/api/ns/q/deadletter", role: auth.RoleManage, ok: []int{204}},
		{method: "DELETE", path: "/api/ns/q", role: auth.RoleManage, ok: []int{204}},
		{method: "GET", path: "/api/ns/q/size", role: auth.RoleRead, size: true, ok: []int{200}},
		{method: "GET", path: "/api/ns/q/deadletter/size", role: auth.RoleRead, size: true, ok: []int{200}},
		// Kairos extensions
		{method: "PUT", path: "/api/ns/q/job/" + jobID + "/release", role: auth.RoleConsume},
		{method: "PUT", path: "/api/ns/q/job/" + jobID + "/touch", role: auth.RoleConsume},
		{method: "DELETE", path: "/api/ns/q/job_key/some-key", role: auth.RolePublish},
		{method: "PUT", path: "/api/ns/q/pause", role: auth.RoleManage},
		{method: "PUT", path: "/api/ns/q/resume", role: auth.RoleManage},
		{method: "GET", path: "/api/ns/q/deadletter/jobs", role: auth.RoleRead},
		{method: "PUT", path: "/api/ns/q/deadletter/job/" + jobID, role: auth.RoleManage},
		{method: "DELETE", path: "/api/ns/q/deadletter/job/" + jobID, role: auth.RoleManage},
		{method: "POST", path: "/api/ns/q/deadletter/jobs/respawn", body: `{"match":{}}`, role: auth.RoleManage, ok: []int{200}},
		{method: "POST", path: "/api/ns/q/deadletter/jobs/delete", body: `{"job_ids":["x"]}`, role: auth.RoleManage, ok: []int{200}},
		{method: "GET", path: "/api/ns/q/schedule", role: auth.RolePublish, ok: []int{200}},
		{method: "PUT", path: "/api/ns/q/schedule/s", body: "job", role: auth.RolePublish},
		{method: "GET", path: "/api/ns/q/schedule/s", role: auth.RolePublish},
		{method: "PUT", path: "/api/ns/q/schedule/s/pause", role: auth.RolePublish},
		{method: "PUT", path: "/api/ns/q/schedule/s/resume", role: auth.RolePublish},
		{method: "DELETE", path: "/api/ns/q/schedule/s", role: auth.RolePublish},
	}
}

// TestAuthMatrix: every public route × {no token, wrong token, another
// namespace's token, scoped token outside its scope, revoked token, valid
// token}, with the token in X-Token and in ?token=, with and without
// hashed tokens, with the event loops on and off (the hot routes are then
// admitted by the fast path): only the valid token gets through. The size
// routes are open (lmstfy) unless AuthenticateSize is set. A rate-limited
// token gets its limit and then lmstfy's 429 on both paths.
func TestAuthMatrix(t *testing.T) {
	for _, loops := range []int{0, -1} {
		for _, hash := range []bool{false, true} {
			for _, authSize := range []bool{false, true} {
				t.Run(fmt.Sprintf("EventLoops=%d/HashTokens=%v/AuthenticateSize=%v", loops, hash, authSize), func(t *testing.T) {
					t.Parallel()
					testAuthMatrix(t, loops, hash, authSize)
				})
			}
		}
	}
}

func testAuthMatrix(t *testing.T, loops int, hash, authSize bool) {
	l := startLive(t, liveOptions{
		cacheTTL: 300 * time.Millisecond,
		config: func(c *config.Config) {
			c.Kairos.EventLoops = loops
			c.Kairos.HashTokens = hash
			c.Kairos.AuthenticateSize = authSize
			c.EnableAccessLog = false
		},
	})
	if served := l.srv.eventLoops() > 0; served != (loops >= 0) {
		t.Fatalf("event loops: %v, want %v", served, loops >= 0)
	}
	valid := l.token(t, "ns", auth.Scope{})
	other := l.token(t, "ns2", auth.Scope{})
	scoped := l.token(t, "ns", auth.Scope{Queues: []string{"other"}})
	revoked := l.token(t, "ns", auth.Scope{})
	revokeElsewhere(t, l, revoked)

	pub := liveDo(t, "PUT", l.api+"/api/ns/q", strings.NewReader("x"), map[string]string{"X-Token": valid})
	if pub.status != 201 {
		t.Fatalf("publish: %d %s", pub.status, pub.body)
	}
	jobID := pub.body[len(`{"job_id":"`) : len(`{"job_id":"`)+26]

	type tokenCase struct {
		name, token string
		valid       bool
	}
	cases := []tokenCase{
		{"no token", "", false},
		{"wrong token", "wrong-token-0123456789", false},
		{"other namespace's token", other, false},
		{"scoped token outside its scope", scoped, false},
		{"revoked token", revoked, false},
		{"a stored hashed form", auth.HashToken(valid), false},
		{"valid token", valid, true},
	}
	for _, transport := range []string{"header", "query"} {
		for _, rt := range matrixRoutes(jobID) {
			for _, tc := range cases {
				target := l.api + rt.path
				hdr := map[string]string{}
				if tc.token != "" {
					if transport == "header" {
						hdr["X-Token"] = tc.token
					} else {
						target += "?token=" + url.QueryEscape(tc.token)
					}
				}
				var body *strings.Reader
				if rt.body != "" {
					body = strings.NewReader(rt.body)
				} else {
					body = strings.NewReader("")
				}
				got := liveDo(t, rt.method, target, body, hdr)
				name := fmt.Sprintf("%s %s, %s in %s", rt.method, rt.path, tc.name, transport)
				open := rt.size && !authSize
				if tc.valid || open {
					if rt.ok == nil && (got.status == 401 || got.status == 403 || got.status >= 500) ||
						rt.ok != nil && !slices.Contains(rt.ok, got.status) {
						t.Errorf("%s: %d %s, want through (%v)", name, got.status, got.body, rt.ok)
					}
					continue
				}
				want := refusal(tc.name, rt)
				if got.status != want.status || got.body != want.body {
					t.Errorf("%s: %d %s, want %d %s", name, got.status, got.body, want.status, want.body)
				}
			}
		}
	}
	testLimitedToken(t, l)
}

// testLimitedToken: a token limited to one publish and one consume per
// long interval gets exactly those, then lmstfy's 429s; an ACK is not
// throttled, and a consume that finds no job gives its turn back.
func testLimitedToken(t *testing.T, l *live) {
	t.Helper()
	tok := l.token(t, "ns", auth.Scope{})
	if r := liveDo(t, "POST", l.admin+"/token/ns/"+tok+"/limit", strings.NewReader(`{"read":1,"write":1,"interval":1000}`), nil); r.status != 201 {
		t.Fatalf("set limit: %d %s", r.status, r.body)
	}
	hdr := map[string]string{"X-Token": tok}
	limited := func(action string) liveResponse {
		return liveResponse{status: 429, body: fmt.Sprintf(`{"msg":"token(%s) %s reach the limit rate, please retry later"}`, tok, action)}
	}
	if r := liveDo(t, "GET", l.api+"/api/ns/limited", nil, hdr); r.status != 404 {
		t.Fatalf("consume of an empty queue: %d %s", r.status, r.body) // refunded
	}
	pub := liveDo(t, "PUT", l.api+"/api/ns/limited", strings.NewReader("x"), hdr)
	if pub.status != 201 {
		t.Fatalf("first publish: %d %s", pub.status, pub.body)
	}
	steps := []struct {
		method string
		want   liveResponse
	}{
		{"PUT", limited("produce")},
		{"GET", liveResponse{status: 200}},
		{"GET", limited("consume")},
	}
	for _, st := range steps {
		var body *strings.Reader
		if st.method == "PUT" {
			body = strings.NewReader("y")
		} else {
			body = strings.NewReader("")
		}
		r := liveDo(t, st.method, l.api+"/api/ns/limited", body, hdr)
		if r.status != st.want.status || st.want.body != "" && r.body != st.want.body {
			t.Errorf("limited token, %s: %d %s, want %d %s", st.method, r.status, r.body, st.want.status, st.want.body)
		}
	}
	jobID := pub.body[len(`{"job_id":"`) : len(`{"job_id":"`)+26]
	if r := liveDo(t, "DELETE", l.api+"/api/ns/limited/job/"+jobID, nil, hdr); r.status != 204 {
		t.Errorf("limited token, ACK: %d %s, want 204", r.status, r.body)
	}
}

// refusal is the answer a bad token gets on a route.
func refusal(caseName string, rt matrixRoute) liveResponse {
	switch caseName {
	case "no token":
		return liveResponse{status: 401, body: `{"error":"token not found"}`}
	case "scoped token outside its scope":
		return liveResponse{status: 403, body: fmt.Sprintf(`{"error":"token is not allowed to %s queue q"}`, rt.role)}
	}
	return liveResponse{status: 401, body: `{"error":"invalid token"}`}
}

// revokeElsewhere uses token on l (so that l caches it as valid), deletes
// it through another instance's store, and checks that l refuses it within
// a second.
func revokeElsewhere(t *testing.T, l *live, token string) {
	t.Helper()
	hdr := map[string]string{"X-Token": token}
	if r := liveDo(t, "GET", l.api+"/api/ns/q/peek", nil, hdr); r.status != 404 {
		t.Fatalf("token before revocation: %d %s", r.status, r.body)
	}
	elsewhere := auth.NewStore(l.client, []string{auth.DefaultPool}, nil, auth.StoreOptions{HashTokens: l.cfg.Kairos.HashTokens})
	if err := elsewhere.Delete(context.Background(), "", "ns", token); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		r := liveDo(t, "GET", l.api+"/api/ns/q/peek", nil, hdr)
		if r.status == 401 {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("a revoked token still answered %d after %v", r.status, time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAdminAuthMatrix: with Accounts set, every admin route refuses
// requests without basic auth, with a wrong password and with an unknown
// user, and lets valid credentials through; /pools, /version and GET
// /accesslog are open, and /metrics, /info and /debug/pprof follow
// ProtectAdminEndpoints.
func TestAdminAuthMatrix(t *testing.T) {
	for _, protect := range []*bool{nil, ptrTo(true), ptrTo(false)} {
		name := "ProtectAdminEndpoints unset"
		if protect != nil {
			name = fmt.Sprintf("ProtectAdminEndpoints=%v", *protect)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := startLive(t, liveOptions{config: func(c *config.Config) {
				c.Accounts = map[string]string{"ops": "s3cret", "viewer": "other"}
				c.Kairos.ProtectAdminEndpoints = protect
				c.EnableAccessLog = false
			}})
			l.srv.logins.limit = 1 << 30 // many wrong passwords from one address: not the throttle's test
			tok := l.token(t, "ns", auth.Scope{})
			opsOpen := protect != nil && !*protect
			routes := []struct {
				method, path, body string
				open               bool
			}{
				{"GET", "/pools", "", true},
				{"GET", "/version", "", true},
				{"GET", "/accesslog", "", true},
				{"POST", "/accesslog?status=enable", "", false},
				{"GET", "/info", "", opsOpen},
				{"GET", "/metrics", "", opsOpen},
				{"GET", "/debug/pprof/", "", opsOpen},
				{"GET", "/debug/pprof/cmdline", "", opsOpen},
				{"POST", "/debug/pprof/symbol", "", opsOpen},
				{"GET", "/limits", "", false},
				{"GET", "/token/ns", "", false},
				{"POST", "/token/ns?description=d", "", false},
				{"GET", "/token/ns/" + tok + "/limit", "", false},
				{"POST", "/token/ns/" + tok + "/limit", `{"read":5,"write":5,"interval":1}`, false},
				{"PUT", "/token/ns/" + tok + "/limit", `{"read":5,"write":5,"interval":1}`, false},
				{"DELETE", "/token/ns/" + tok + "/limit", "", false},
				{"DELETE", "/token/ns/" + tok, "", false},
				{"GET", "/queue/ns/q/config", "", false},
				{"PUT", "/queue/ns/q/config", `{}`, false},
				{"GET", "/webhooks", "", false},
				{"GET", "/webhook/ns/q", "", false},
				{"PUT", "/webhook/ns/q", `{}`, false},
				{"DELETE", "/webhook/ns/q", "", false},
			}
			creds := []struct {
				name, user, pass string
				valid            bool
			}{
				{"no credentials", "", "", false},
				{"wrong password", "ops", "wrong", false},
				{"another account's password", "ops", "other", false},
				{"unknown user", "nobody", "s3cret", false},
				{"valid", "ops", "s3cret", true},
			}
			for _, rt := range routes {
				for _, cr := range creds {
					req := newRequest(t, rt.method, l.admin+rt.path, rt.body)
					if cr.user != "" {
						req.SetBasicAuth(cr.user, cr.pass)
					}
					resp, err := httpClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					name := fmt.Sprintf("%s %s with %s", rt.method, rt.path, cr.name)
					switch {
					case resp.StatusCode >= 500:
						t.Errorf("%s: %d", name, resp.StatusCode)
					case rt.open || cr.valid:
						if resp.StatusCode == 401 {
							t.Errorf("%s: 401, want through", name)
						}
					default:
						if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Basic realm="Authorization Required"` {
							t.Errorf("%s: %d (WWW-Authenticate %q), want 401", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
						}
					}
				}
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
