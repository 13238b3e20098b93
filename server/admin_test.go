package server

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
)

func TestAdminSimpleRoutes(t *testing.T) {
	env := newEnv(t)
	env.eng.info = func(context.Context) (map[string][]string, error) {
		return map[string][]string{"ns": {"q2", "q1"}, "a": nil}, nil
	}
	env.engB.info = func(context.Context) (map[string][]string, error) { return nil, nil }

	tests := []struct {
		name   string
		req    request
		status int
		resp   string
	}{
		{"pools", request{method: "GET", target: "/pools"}, 200, "[\n    \"b\",\n    \"default\"\n]"},
		{"version", request{method: "GET", target: "/version"}, 200,
			"{\n    \"build_commit\": \"unknown\",\n    \"build_date\": \"unknown\",\n    \"version\": \"v1.2.3\"\n}"},
		{"info of the default pool", request{method: "GET", target: "/info"}, 200,
			"{\n    \"a\": [],\n    \"ns\": [\n        \"q1\",\n        \"q2\"\n    ]\n}\n"},
		{"info of pool b", request{method: "GET", target: "/info?pool=b"}, 200, "{}\n"},
		{"info of an unknown pool", request{method: "GET", target: "/info?pool=zz"}, 400, `{"error":"the pool was not exists"}`},
		{"access log status", request{method: "GET", target: "/accesslog"}, 200, `{"status":"disabled"}`},
		{"enable access log", request{method: "POST", target: "/accesslog?status=enable"}, 200, `{"status":"enabled"}`},
		{"bad access log status", request{method: "POST", target: "/accesslog?status=on"}, 400, `{"error":"invalid status"}`},
		{"unknown route", request{method: "GET", target: "/nope"}, 404, `{"error":"api not found"}`},
		{"wrong method", request{method: "DELETE", target: "/pools"}, 404, `{"error":"api not found"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := env.admin(t, tc.req)
			expect(t, w, tc.status, tc.resp)
		})
	}
}

func TestAdminInfoFailure(t *testing.T) {
	env := newEnv(t)
	env.eng.info = func(context.Context) (map[string][]string, error) { return nil, errUnexpected }
	expect(t, env.admin(t, request{method: "GET", target: "/info"}), 500, `{"error":"internal error"}`)
}

func TestAdminMetricsAndPprof(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	env.api(t, request{method: "GET", target: "/api/ns/q/size"})
	w := env.admin(t, request{method: "GET", target: "/metrics"})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `infra_lmstfy_http_http_codes{api="/api/:namespace/:queue/size",code="200",method="GET",namespace="",pool="default"} 1`) {
		t.Errorf("metrics: %d\n%s", w.Code, w.Body)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		w := env.admin(t, request{method: "GET", target: p})
		if w.Code != 200 || w.Body.Len() == 0 {
			t.Errorf("%s: %d", p, w.Code)
		}
	}
}

func TestAdminTokens(t *testing.T) {
	type call struct {
		pool, ns, desc, token string
		scope                 auth.Scope
		prefix                bool
	}
	tests := []struct {
		name   string
		req    request
		err    error // returned by the store
		status int
		resp   string
		want   *call // nil: the store must not be called
	}{
		{
			name: "list", req: request{method: "GET", target: "/token/ns"}, status: 200,
			resp: "{\n    \"tokens\": {\n        \"t1\": \"first\",\n        \"t2\": \"second\"\n    }\n}",
			want: &call{pool: "default", ns: "ns"},
		},
		{
			name: "list with a pool prefixes", req: request{method: "GET", target: "/token/ns?pool=default"}, status: 200,
			resp: "{\n    \"tokens\": {\n        \"t1\": \"first\",\n        \"t2\": \"second\"\n    }\n}",
			want: &call{pool: "default", ns: "ns", prefix: true},
		},
		{name: "list of an unknown pool", req: request{method: "GET", target: "/token/ns?pool=zz"}, status: 400, resp: `{"error":"the pool was not exists"}`},
		{name: "list of a bad namespace", req: request{method: "GET", target: "/token/n.s"}, status: 400, resp: `{"error":"namespace name contains forbidden characters"}`},
		{
			name: "list failure", req: request{method: "GET", target: "/token/ns"}, err: errUnexpected, status: 500, resp: `{"error":"internal error"}`,
			want: &call{pool: "default", ns: "ns"},
		},
		{
			name: "create from the query", req: request{method: "POST", target: "/token/ns?description=d"}, status: 201,
			resp: "{\n    \"token\": \"NEW\"\n}",
			want: &call{ns: "ns", desc: "d"},
		},
		{
			name: "create from a form", status: 201,
			req: request{method: "POST", target: "/token/ns?pool=b", body: "description=my+app&token=abcdefghijklmnopqrstuvwxyz",
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}},
			resp: "{\n    \"token\": \"NEW\"\n}",
			want: &call{pool: "b", ns: "ns", desc: "my app", token: "abcdefghijklmnopqrstuvwxyz"},
		},
		{
			name: "create a scoped token", req: request{method: "POST", target: "/token/ns?description=d&queues=q1,q2&roles=consume,publish"}, status: 201,
			resp: "{\n    \"token\": \"NEW\"\n}",
			want: &call{ns: "ns", desc: "d", scope: auth.Scope{Queues: []string{"q1", "q2"}, Roles: []auth.Role{auth.RoleConsume, auth.RolePublish}}},
		},
		{name: "create without description", req: request{method: "POST", target: "/token/ns"}, status: 400, resp: `{"error":"invalid description"}`},
		{name: "create with a short token", req: request{method: "POST", target: "/token/n.s?description=d&token=short"}, status: 400, resp: `{"error":"the user token was too short"}`},
		{name: "create with a long namespace", req: request{method: "POST", target: "/token/" + strings.Repeat("n", 256) + "?description=d"}, status: 400, resp: `{"error":"the namespace name was too long"}`},
		{name: "create with a bad namespace", req: request{method: "POST", target: "/token/n.s?description=d"}, status: 400, resp: `{"error":"namespace name contains forbidden characters"}`},
		{name: "create with a bad role", req: request{method: "POST", target: "/token/ns?description=d&roles=read"}, status: 400},
		{name: "create with a bad queue", req: request{method: "POST", target: "/token/ns?description=d&queues=_q"}, status: 400},
		{
			name: "create a duplicate", req: request{method: "POST", target: "/token/ns?description=d"}, err: fmt.Errorf("create: %w", auth.ErrTokenExists),
			status: 400, resp: `{"error":"the token has already existed"}`, want: &call{ns: "ns", desc: "d"},
		},
		{
			name: "create in an unknown pool", req: request{method: "POST", target: "/token/ns?description=d&pool=zz"}, err: auth.ErrPoolNotFound,
			status: 400, resp: `{"error":"the pool was not exists"}`, want: &call{pool: "zz", ns: "ns", desc: "d"},
		},
		{
			name: "create failure", req: request{method: "POST", target: "/token/ns?description=d"}, err: errUnexpected,
			status: 500, resp: `{"error":"internal error"}`, want: &call{ns: "ns", desc: "d"},
		},
		{
			name: "delete", req: request{method: "DELETE", target: "/token/ns/tok"}, status: 204,
			want: &call{pool: "default", ns: "ns", token: "tok"},
		},
		{
			name: "delete with a pool prefix", req: request{method: "DELETE", target: "/token/ns/b:tok"}, status: 204,
			want: &call{pool: "b", ns: "ns", token: "tok"},
		},
		{
			name: "delete in an unknown pool", req: request{method: "DELETE", target: "/token/ns/zz:tok"}, err: auth.ErrPoolNotFound,
			status: 400, resp: `{"error":"the pool was not exists"}`, want: &call{pool: "zz", ns: "ns", token: "tok"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got *call
			var limitDeleted []string
			env.tokens.list = func(_ context.Context, pool, ns string, prefix bool) (map[string]string, error) {
				got = &call{pool: pool, ns: ns, prefix: prefix}
				return map[string]string{"t2": "second", "t1": "first"}, tc.err
			}
			env.tokens.create = func(_ context.Context, pool, ns, desc, token string, scope auth.Scope) (string, error) {
				got = &call{pool: pool, ns: ns, desc: desc, token: token, scope: scope}
				return "NEW", tc.err
			}
			env.tokens.del = func(_ context.Context, pool, ns, token string) error {
				got = &call{pool: pool, ns: ns, token: token}
				return tc.err
			}
			env.throttler.del = func(_ context.Context, pool, ns, token string) error {
				limitDeleted = []string{pool, ns, token}
				return nil
			}
			w := env.admin(t, tc.req)
			if tc.resp != "" || tc.status == 204 {
				expect(t, w, tc.status, tc.resp)
			} else if w.Code != tc.status {
				t.Errorf("status %d %s, want %d", w.Code, w.Body, tc.status)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("store call %+v, want %+v", got, tc.want)
			}
			if tc.req.method == "DELETE" && tc.status == 204 && !reflect.DeepEqual(limitDeleted, []string{tc.want.pool, "ns", "tok"}) {
				t.Errorf("limit deleted %v", limitDeleted)
			}
		})
	}
}

func TestAdminLimits(t *testing.T) {
	type call struct {
		op, pool, ns, token string
		limit               auth.Limit
	}
	json := map[string]string{"Content-Type": "application/json"}
	tests := []struct {
		name   string
		req    request
		err    error
		found  bool
		status int
		resp   string
		want   *call
	}{
		{
			name: "list sorted", req: request{method: "GET", target: "/limits"}, status: 200,
			resp: `[{"namespace":"a","token":"t","limiter":{"read":1,"write":2,"interval":3}},{"namespace":"ns","token":"b:t","limiter":{"read":0,"write":5,"interval":1}},{"namespace":"ns","token":"t","limiter":{"read":4,"write":0,"interval":60}}]`,
			want: &call{op: "list"},
		},
		{name: "list forced", req: request{method: "GET", target: "/limits?force_update=true"}, status: 200, want: &call{op: "list force"}},
		{
			name: "get", req: request{method: "GET", target: "/token/ns/b:tok/limit"}, found: true, status: 200,
			resp: `{"read":1,"write":2,"interval":3}`, want: &call{op: "get", pool: "b", ns: "ns", token: "tok"},
		},
		{
			name: "get missing", req: request{method: "GET", target: "/token/ns/tok/limit"}, status: 404, resp: `null`,
			want: &call{op: "get", pool: "default", ns: "ns", token: "tok"},
		},
		{
			name: "add", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"read":10,"write":0,"interval":1}`, header: json}, status: 201,
			resp: `{"limiter":{"read":10,"write":0,"interval":1}}`,
			want: &call{op: "add", pool: "default", ns: "ns", token: "tok", limit: auth.Limit{Read: 10, Interval: 1}},
		},
		{
			name: "add existing", req: request{method: "POST", target: "/token/ns/b:tok/limit", body: `{"read":10,"write":0,"interval":1}`},
			err: fmt.Errorf("add: %w", auth.ErrLimitExists), status: 409, resp: `{"error":"throttler token(tok) has already exists"}`,
			want: &call{op: "add", pool: "b", ns: "ns", token: "tok", limit: auth.Limit{Read: 10, Interval: 1}},
		},
		{name: "add bad JSON", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"read":`}, status: 400},
		{name: "add empty body", req: request{method: "POST", target: "/token/ns/tok/limit"}, status: 400},
		{name: "add string numbers", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"read":"1","interval":1}`}, status: 400},
		{name: "add without rates", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"read":0,"write":0,"interval":1}`}, status: 400, resp: `{"limiter":{"read":0,"write":0,"interval":1}}`},
		{name: "add zero interval", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"read":1}`}, status: 400, resp: `{"error":"interval should be \u003e 0"}`},
		{name: "add negative interval", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"write":1,"interval":-1}`}, status: 400, resp: `{"error":"interval should be \u003e 0"}`},
		{name: "add with a bad namespace", req: request{method: "POST", target: "/token/n.s/tok/limit", body: `{"write":1,"interval":1}`}, status: 400, resp: `{"error":"namespace name contains forbidden characters"}`},
		{
			name: "add failure", req: request{method: "POST", target: "/token/ns/tok/limit", body: `{"write":1,"interval":1}`}, err: errUnexpected,
			status: 500, resp: `{"error":"internal error"}`,
			want: &call{op: "add", pool: "default", ns: "ns", token: "tok", limit: auth.Limit{Write: 1, Interval: 1}},
		},
		{
			name: "set", req: request{method: "PUT", target: "/token/ns/tok/limit", body: `{"read":1,"write":2,"interval":3}`}, status: 200,
			resp: `{"limiter":{"read":1,"write":2,"interval":3}}`,
			want: &call{op: "set", pool: "default", ns: "ns", token: "tok", limit: auth.Limit{Read: 1, Write: 2, Interval: 3}},
		},
		{name: "set zero interval", req: request{method: "PUT", target: "/token/ns/tok/limit", body: `{"read":1,"interval":0}`}, status: 400, resp: `{"error":"interval should be \u003e 0"}`},
		{
			name: "delete", req: request{method: "DELETE", target: "/token/ns/tok/limit"}, status: 200, resp: `{"msg":"success"}`,
			want: &call{op: "delete", pool: "default", ns: "ns", token: "tok"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			var got *call
			th := env.throttler
			th.list = func(_ context.Context, force bool) ([]auth.LimitEntry, error) {
				got = &call{op: "list"}
				if force {
					got.op = "list force"
				}
				return []auth.LimitEntry{
					{Namespace: "ns", Token: "t", Limiter: auth.Limit{Read: 4, Interval: 60}},
					{Namespace: "a", Token: "t", Limiter: auth.Limit{Read: 1, Write: 2, Interval: 3}},
					{Namespace: "ns", Token: "b:t", Limiter: auth.Limit{Write: 5, Interval: 1}},
				}, tc.err
			}
			th.get = func(_ context.Context, pool, ns, token string) (auth.Limit, bool, error) {
				got = &call{op: "get", pool: pool, ns: ns, token: token}
				return auth.Limit{Read: 1, Write: 2, Interval: 3}, tc.found, tc.err
			}
			th.add = func(_ context.Context, pool, ns, token string, l auth.Limit) error {
				got = &call{op: "add", pool: pool, ns: ns, token: token, limit: l}
				return tc.err
			}
			th.set = func(_ context.Context, pool, ns, token string, l auth.Limit) error {
				got = &call{op: "set", pool: pool, ns: ns, token: token, limit: l}
				return tc.err
			}
			th.del = func(_ context.Context, pool, ns, token string) error {
				got = &call{op: "delete", pool: pool, ns: ns, token: token}
				return tc.err
			}
			w := env.admin(t, tc.req)
			if tc.resp != "" {
				expect(t, w, tc.status, tc.resp)
			} else if w.Code != tc.status {
				t.Errorf("status %d %s, want %d", w.Code, w.Body, tc.status)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("throttler call %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAdminLimitsWithoutThrottler(t *testing.T) {
	env := newEnv(t, withoutThrottler())
	expect(t, env.admin(t, request{method: "GET", target: "/limits"}), 200, `[]`)
	expect(t, env.admin(t, request{method: "GET", target: "/token/ns/t/limit"}), 404, `null`)
	w := env.admin(t, request{method: "POST", target: "/token/ns/t/limit", body: `{"read":1,"interval":1}`})
	if w.Code != 400 {
		t.Errorf("add without throttler: %d %s", w.Code, w.Body)
	}
	env.tokens.del = func(context.Context, string, string, string) error { return nil }
	expect(t, env.admin(t, request{method: "DELETE", target: "/token/ns/t"}), 204, "")
}

func TestAdminBasicAuth(t *testing.T) {
	env := newEnv(t, withConfig(func(c *config.Config) { c.Accounts = map[string]string{"admin": "pw"} }))
	okEngine(env.eng)
	env.tokens.list = func(context.Context, string, string, bool) (map[string]string, error) { return nil, nil }
	env.throttler.list = func(context.Context, bool) ([]auth.LimitEntry, error) { return nil, nil }
	basic := map[string]string{"Authorization": "Basic YWRtaW46cHc="} // admin:pw
	wrong := map[string]string{"Authorization": "Basic YWRtaW46eA=="} // admin:x
	tests := []struct {
		method, target string
		protected      bool
	}{
		{"GET", "/token/ns", true},
		{"GET", "/limits", true},
		{"POST", "/accesslog?status=enable", true},
		{"GET", "/metrics", true},
		{"GET", "/info", true},
		{"GET", "/debug/pprof/", true},
		{"GET", "/version", false},
		{"GET", "/pools", false},
		{"GET", "/accesslog", false},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			for _, h := range []map[string]string{nil, wrong} {
				w := env.admin(t, request{method: tc.method, target: tc.target, header: h})
				if tc.protected {
					if w.Code != 401 || w.Body.Len() != 0 || w.Header().Get("WWW-Authenticate") != `Basic realm="Authorization Required"` {
						t.Errorf("without credentials: %d %q %v", w.Code, w.Body, w.Header())
					}
				} else if w.Code != 200 {
					t.Errorf("open route: %d", w.Code)
				}
			}
			w := env.admin(t, request{method: tc.method, target: tc.target, header: basic})
			if w.Code != 200 {
				t.Errorf("with credentials: %d %s", w.Code, w.Body)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	good := func() (*config.Config, Deps) {
		return testConfig(), Deps{
			Engines: map[string]engine.Engine{"default": &fakeEngine{}},
			Tokens:  &fakeTokens{},
		}
	}
	tests := []struct {
		name   string
		change func(*config.Config, *Deps)
	}{
		{"nil config", nil},
		{"no default pool", func(_ *config.Config, d *Deps) { d.Engines = map[string]engine.Engine{"b": &fakeEngine{}} }},
		{"nil engine", func(_ *config.Config, d *Deps) { d.Engines["b"] = nil }},
		{"no token store", func(_ *config.Config, d *Deps) { d.Tokens = nil }},
		{"zero tries", func(c *config.Config, _ *Deps) { c.TriesNum = 0 }},
		{"too many tries", func(c *config.Config, _ *Deps) { c.TriesNum = 65536 }},
		{"negative ttl", func(c *config.Config, _ *Deps) { c.TTLSecond = -1 }},
		{"huge delay", func(c *config.Config, _ *Deps) { c.DelaySecond = 1 << 33 }},
		{"empty account user", func(c *config.Config, _ *Deps) { c.Accounts = map[string]string{"": "pw"} }},
		{"role without password", func(c *config.Config, _ *Deps) {
			c.AccountAccess = map[string]config.AccountAccess{"bob": {Role: config.RoleViewer}}
		}},
		{"unknown role", func(c *config.Config, _ *Deps) {
			c.Accounts = map[string]string{"bob": "pw"}
			c.AccountAccess = map[string]config.AccountAccess{"bob": {Role: "root"}}
		}},
		{"empty namespace list", func(c *config.Config, _ *Deps) {
			c.Accounts = map[string]string{"bob": "pw"}
			c.AccountAccess = map[string]config.AccountAccess{"bob": {Namespaces: []string{}}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, deps := good()
			if tc.change == nil {
				cfg = nil
			} else {
				tc.change(cfg, &deps)
			}
			_, err := New(cfg, deps)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
	cfg, deps := good()
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New with minimal deps: %v", err)
	}
	_ = s.Close()
	// A second server may share the registry (collectors are reused).
	cfg, deps = good()
	reg := newEnv(t).reg
	deps.Registerer = reg
	if _, err := New(cfg, deps); err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := New(cfg, deps); err != nil {
		t.Errorf("second New on the same registry: %v", err)
	}
}
