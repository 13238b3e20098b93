package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
)

// okEngine answers every call successfully.
func okEngine(e *fakeEngine) {
	e.publish = func(context.Context, *engine.PublishRequest) (string, error) { return "ID", nil }
	e.publishBatch = func(_ context.Context, r []*engine.PublishRequest) ([]string, error) {
		return repeat("ID", len(r)), nil
	}
	e.consume = func(_ context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		return []*engine.Job{{Namespace: r.Namespace, Queue: r.Queues[0], ID: "ID"}}, nil
	}
	e.del = func(context.Context, string, string, string) error { return nil }
	e.peekQueue = func(_ context.Context, ns, q string) (*engine.Job, error) {
		return &engine.Job{Namespace: ns, Queue: q, ID: "ID"}, nil
	}
	e.peekJob = func(_ context.Context, ns, q, id string) (*engine.Job, error) {
		return &engine.Job{Namespace: ns, Queue: q, ID: id}, nil
	}
	e.size = func(context.Context, string, string) (int64, error) { return 0, nil }
	e.destroy = func(context.Context, string, string) (int64, error) { return 0, nil }
	e.peekDeadLetter = func(context.Context, string, string) (engine.DeadLetter, error) { return engine.DeadLetter{}, nil }
	e.deadLetterSize = func(context.Context, string, string) (int64, error) { return 0, nil }
	e.respawn = func(context.Context, string, string, int64, time.Duration) (int64, error) { return 0, nil }
	e.deleteDead = func(context.Context, string, string, int64) (int64, error) { return 0, nil }
	e.info = func(context.Context) (map[string][]string, error) { return nil, nil }
}

func TestAuthPrecedence(t *testing.T) {
	tests := []struct {
		name   string
		req    request
		status int
		resp   string
		poolB  bool // the request must reach pool b's engine
	}{
		{name: "names before pool and token", req: request{method: "PUT", target: "/api/n.s/q", header: tok("nopool:x")}, status: 400, resp: `{"error":"namespace name contains forbidden characters"}`},
		{name: "long names", req: request{method: "PUT", target: "/api/ns/" + strings.Repeat("q", 256)}, status: 400, resp: `{"error":"namespace or queue name too long"}`},
		{name: "reserved queue", req: request{method: "PUT", target: "/api/ns/_q"}, status: 400, resp: `{"error":"queue name contains forbidden characters"}`},
		{name: "invalid UTF-8 namespace", req: request{method: "GET", target: "/api/%ff/q/peek"}, status: 400, resp: `{"error":"namespace name contains forbidden characters"}`},
		{name: "escaped space in queue", req: request{method: "DELETE", target: "/api/ns/q%20q"}, status: 400, resp: `{"error":"queue name contains forbidden characters"}`},
		{name: "pool before token", req: request{method: "PUT", target: "/api/ns/q", header: tok("nopool:secret")}, status: 404, resp: `{"error":"pool not found"}`},
		{name: "empty pool prefix is the default pool", req: request{method: "PUT", target: "/api/ns/q", header: tok(":" + goodToken)}, status: 201, resp: `{"job_id":"ID","msg":"published"}`},
		{name: "missing token", req: request{method: "PUT", target: "/api/ns/q"}, status: 401, resp: `{"error":"token not found"}`},
		{name: "pool prefix without secret", req: request{method: "PUT", target: "/api/ns/q", header: tok("b:")}, status: 401, resp: `{"error":"token not found"}`},
		{name: "unknown token", req: request{method: "PUT", target: "/api/ns/q", header: tok("bogus")}, status: 401, resp: `{"error":"invalid token"}`},
		{name: "token of another namespace", req: request{method: "PUT", target: "/api/other/q", header: tok(goodToken)}, status: 401, resp: `{"error":"invalid token"}`},
		{name: "token in the query", req: request{method: "PUT", target: "/api/ns/q?token=" + goodToken}, status: 201, resp: `{"job_id":"ID","msg":"published"}`},
		{name: "header wins over query", req: request{method: "PUT", target: "/api/ns/q?token=" + goodToken, header: tok("bogus")}, status: 401, resp: `{"error":"invalid token"}`},
		{name: "pool b token", req: request{method: "PUT", target: "/api/ns/q", header: tok(poolBToken)}, status: 201, resp: `{"job_id":"ID","msg":"published"}`, poolB: true},
		{name: "pool b secret in the default pool", req: request{method: "PUT", target: "/api/ns/q", header: tok(bToken)}, status: 401, resp: `{"error":"invalid token"}`},
		{name: "scope: publish refused", req: request{method: "PUT", target: "/api/ns/q", header: tok(scopedToken)}, status: 403, resp: `{"error":"token is not allowed to publish queue q"}`},
		{name: "scope: bulk refused", req: request{method: "PUT", target: "/api/ns/q/bulk", body: "[1]", header: tok(scopedToken)}, status: 403, resp: `{"error":"token is not allowed to publish queue q"}`},
		{name: "scope: consume allowed", req: request{method: "GET", target: "/api/ns/q2,q", header: tok(scopedToken)}, status: 200, resp: `{"attributes":null,"data":"","elapsed_ms":0,"job_id":"ID","msg":"new job","namespace":"ns","queue":"q2","remain_tries":0,"ttl":0}`},
		{name: "scope: consume of another queue", req: request{method: "GET", target: "/api/ns/q,q3", header: tok(scopedToken)}, status: 403, resp: `{"error":"token is not allowed to consume queue q3"}`},
		{name: "scope: ack allowed", req: request{method: "DELETE", target: "/api/ns/q/job/x", header: tok(scopedToken)}, status: 204},
		{name: "scope: read allowed", req: request{method: "GET", target: "/api/ns/q/peek", header: tok(scopedToken)}, status: 200, resp: `{"attributes":null,"data":"","elapsed_ms":0,"job_id":"ID","namespace":"ns","queue":"q","remain_tries":0,"ttl":0}`},
		{name: "scope: read of another queue", req: request{method: "GET", target: "/api/ns/q3/deadletter", header: tok(scopedToken)}, status: 403, resp: `{"error":"token is not allowed to read queue q3"}`},
		{name: "scope: destroy refused", req: request{method: "DELETE", target: "/api/ns/q", header: tok(scopedToken)}, status: 403, resp: `{"error":"token is not allowed to manage queue q"}`},
		{name: "scope: respawn refused", req: request{method: "PUT", target: "/api/ns/q/deadletter", header: tok(scopedToken)}, status: 403, resp: `{"error":"token is not allowed to manage queue q"}`},
		{name: "scope: size is public", req: request{method: "GET", target: "/api/ns/q9/size", header: tok(scopedToken)}, status: 200, resp: `{"namespace":"ns","queue":"q9","size":0}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			okEngine(env.eng)
			okEngine(env.engB)
			w := env.api(t, tc.req)
			expect(t, w, tc.status, tc.resp)
			usedB := len(env.engB.Calls()) > 0
			if usedB != tc.poolB {
				t.Errorf("pool b engine used: %v, want %v", usedB, tc.poolB)
			}
			if tc.status >= 400 && len(env.eng.Calls())+len(env.engB.Calls()) > 0 {
				t.Errorf("engine called on a refused request")
			}
		})
	}
}

func TestVerifyFailure(t *testing.T) {
	env := newEnv(t)
	env.tokens.err = errors.New("redis down")
	w := env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)})
	expect(t, w, 500, `{"error":"internal error"}`)
	if !logged(env, logrus.ErrorLevel, "redis down") {
		t.Errorf("failure not logged")
	}
}

func TestSkipVerify(t *testing.T) {
	env := newEnv(t, withSkipVerify())
	okEngine(env.eng)
	w := env.api(t, request{method: "PUT", target: "/api/ns/q"})
	expect(t, w, 201, `{"job_id":"ID","msg":"published"}`)
	w = env.api(t, request{method: "DELETE", target: "/api/ns/q", header: tok(scopedToken)})
	expect(t, w, 204, "")
	w = env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok("nopool:x")})
	expect(t, w, 404, `{"error":"pool not found"}`)
	if calls := env.throttler.Calls(); len(calls) != 1 || calls[0].token != "" {
		t.Errorf("throttler calls %+v, want one for the empty token", calls)
	}
}

func TestThrottle(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	okEngine(env.engB)
	env.throttler.budget[goodToken] = 1

	w := env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)})
	expect(t, w, 201, `{"job_id":"ID","msg":"published"}`)
	w = env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)})
	expect(t, w, 429, `{"msg":"token(good-token-0123456789) produce reach the limit rate, please retry later"}`)
	w = env.api(t, request{method: "PUT", target: "/api/ns/q/job/OLD", header: tok(goodToken)})
	expect(t, w, 429, `{"msg":"token(good-token-0123456789) produce reach the limit rate, please retry later"}`)
	w = env.api(t, request{method: "PUT", target: "/api/ns/q/bulk", body: "[1]", header: tok(goodToken)})
	expect(t, w, 429, `{"msg":"token(good-token-0123456789) produce reach the limit rate, please retry later"}`)
	w = env.api(t, request{method: "GET", target: "/api/ns/q", header: tok(goodToken)})
	expect(t, w, 429, `{"msg":"token(good-token-0123456789) consume reach the limit rate, please retry later"}`)
	// Peek is never throttled.
	w = env.api(t, request{method: "GET", target: "/api/ns/q/peek", header: tok(goodToken)})
	expect(t, w, 200, `{"attributes":null,"data":"","elapsed_ms":0,"job_id":"ID","namespace":"ns","queue":"q","remain_tries":0,"ttl":0}`)

	got := counterValue(t, env.srv.metrics.rateLimit.WithLabelValues("default", "ns", goodToken, "produce"))
	if got != 3 {
		t.Errorf("rate_limit produce = %v, want 3", got)
	}
	if got := counterValue(t, env.srv.metrics.rateLimit.WithLabelValues("default", "ns", goodToken, "consume")); got != 1 {
		t.Errorf("rate_limit consume = %v, want 1", got)
	}
	for _, c := range env.throttler.Calls() {
		if c.op != "allow" || c.pool != "default" || c.ns != "ns" || c.token != goodToken {
			t.Errorf("unexpected throttler call %+v", c)
		}
	}

	// Pool b's token has its own bucket, keyed by pool.
	w = env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(poolBToken)})
	expect(t, w, 201, `{"job_id":"ID","msg":"published"}`)
	calls := env.throttler.Calls()
	if last := calls[len(calls)-1]; last != (throttleCall{"allow", "b", "ns", bToken, true}) {
		t.Errorf("last throttler call %+v", last)
	}
}

func TestThrottleRefund(t *testing.T) {
	tests := []struct {
		name   string
		req    request
		setup  func(e *fakeEngine)
		status int
		want   []throttleCall
	}{
		{
			name: "consume that found nothing", req: request{method: "GET", target: "/api/ns/q", header: tok(goodToken)},
			setup: func(e *fakeEngine) {
				e.consume = func(context.Context, *engine.ConsumeRequest) ([]*engine.Job, error) { return nil, nil }
			},
			status: 404,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, false}, {"refund", "default", "ns", goodToken, false}},
		},
		{
			name: "consume that delivered", req: request{method: "GET", target: "/api/ns/q", header: tok(goodToken)},
			setup:  okEngine,
			status: 200,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, false}},
		},
		{
			name: "consume with a bad parameter", req: request{method: "GET", target: "/api/ns/q?count=0", header: tok(goodToken)},
			setup:  okEngine,
			status: 400,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, false}, {"refund", "default", "ns", goodToken, false}},
		},
		{
			name: "publish with a bad parameter", req: request{method: "PUT", target: "/api/ns/q?delay=x", header: tok(goodToken)},
			setup:  okEngine,
			status: 400,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, true}, {"refund", "default", "ns", goodToken, true}},
		},
		{
			name: "publish that failed", req: request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)},
			setup:  func(e *fakeEngine) {},
			status: 500,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, true}, {"refund", "default", "ns", goodToken, true}},
		},
		{
			name: "publish that succeeded", req: request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)},
			setup:  okEngine,
			status: 201,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, true}},
		},
		{
			name: "re-publish is produce", req: request{method: "PUT", target: "/api/ns/q/job/OLD", header: tok(goodToken)},
			setup:  okEngine,
			status: 201,
			want:   []throttleCall{{"allow", "default", "ns", goodToken, true}},
		},
		{
			name: "refused token is not throttled", req: request{method: "PUT", target: "/api/ns/q", header: tok("bogus")},
			setup:  okEngine,
			status: 401,
		},
		{
			name: "ack is not throttled", req: request{method: "DELETE", target: "/api/ns/q/job/x", header: tok(goodToken)},
			setup:  okEngine,
			status: 204,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			tc.setup(env.eng)
			env.throttler.budget[goodToken] = 1
			w := env.api(t, tc.req)
			if w.Code != tc.status {
				t.Fatalf("status %d %s, want %d", w.Code, w.Body, tc.status)
			}
			if got := env.throttler.Calls(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("throttler calls\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestThrottlerFailure(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	env.throttler.err = errors.New("redis down")
	w := env.api(t, request{method: "GET", target: "/api/ns/q", header: tok(goodToken)})
	expect(t, w, 500, `{"err":"internal error"}`)
	if calls := env.eng.Calls(); len(calls) != 0 {
		t.Errorf("engine called: %v", calls)
	}
}

func TestNoThrottler(t *testing.T) {
	env := newEnv(t, withoutThrottler())
	okEngine(env.eng)
	for range 3 {
		w := env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)})
		expect(t, w, 201, `{"job_id":"ID","msg":"published"}`)
	}
}

func TestUnknownRoutes(t *testing.T) {
	tests := []struct {
		method, target string
		status         int
		location       string
	}{
		{"GET", "/", 404, ""},
		{"GET", "/api", 404, ""},
		{"GET", "/api/ns", 404, ""},
		{"POST", "/api/ns/q", 404, ""},
		{"PATCH", "/api/ns/q/deadletter", 404, ""},
		{"PUT", "/api/ns/q/peek", 404, ""},
		{"GET", "/api/ns/q/unknown", 404, ""},
		{"GET", "/api/ns/q/job/x/y", 404, ""},
		{"DELETE", "/api/ns/q/bulk", 404, ""},
		{"GET", "/api/ns/q/", 301, "/api/ns/q"},
		{"PUT", "/api/ns/q/", 307, "/api/ns/q"},
		{"GET", "/api/ns/q/size/", 301, "/api/ns/q/size"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			env := newEnv(t)
			okEngine(env.eng)
			w := env.api(t, request{method: tc.method, target: tc.target, header: tok(goodToken)})
			if tc.status == 404 {
				expect(t, w, 404, `{"error":"api not found"}`)
			} else if w.Code != tc.status || w.Header().Get("Location") != tc.location {
				t.Errorf("got %d Location %q, want %d %q", w.Code, w.Header().Get("Location"), tc.status, tc.location)
			}
			if w.Header().Get("X-Request-ID") == "" {
				t.Errorf("no X-Request-ID")
			}
			if calls := env.eng.Calls(); len(calls) != 0 {
				t.Errorf("engine called: %v", calls)
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	seen := map[string]bool{}
	for _, h := range []http.Handler{env.srv.Handler(), env.srv.AdminHandler()} {
		for range 3 {
			w := do(t, h, request{method: "GET", target: "/api/ns/q/size", header: map[string]string{"X-Request-ID": "mine"}})
			id := w.Header().Get("X-Request-ID")
			if _, err := ulid.ParseStrict(id); err != nil {
				t.Errorf("X-Request-ID %q is not a ULID: %v", id, err)
			}
			if seen[id] {
				t.Errorf("X-Request-ID %q repeated", id)
			}
			seen[id] = true
		}
	}
}

func TestRecovery(t *testing.T) {
	env := newEnv(t)
	env.eng.size = func(context.Context, string, string) (int64, error) { panic("boom") }
	w := env.api(t, request{method: "GET", target: "/api/ns/q/size"})
	expect(t, w, 500, `{"error":"internal error"}`)
	if !logged(env, logrus.ErrorLevel, "panic") {
		t.Errorf("panic not logged")
	}
	codes := counterValue(t, env.srv.metrics.codes.WithLabelValues("default", "", "/api/:namespace/:queue/size", "GET", "500"))
	if codes != 1 {
		t.Errorf("http_codes 500 = %v, want 1", codes)
	}
}

func TestMetrics(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)})
	env.api(t, request{method: "PUT", target: "/api/ns/q", header: tok(goodToken)})
	env.api(t, request{method: "PUT", target: "/api/random-name/q", header: tok(goodToken)})
	env.api(t, request{method: "GET", target: "/nothing"})

	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"default", "ns", "/api/:namespace/:queue", "PUT", "201"}, 2},
		// An unauthenticated namespace is not a label value.
		{[]string{"default", "", "/api/:namespace/:queue", "PUT", "401"}, 1},
		{[]string{"", "", "", "GET", "404"}, 1},
	} {
		if got := counterValue(t, env.srv.metrics.codes.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("http_codes%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
	n, err := seriesCount(env.reg, "infra_lmstfy_http_latency_milliseconds")
	if err != nil || n != 1 {
		t.Errorf("latency series = %d (%v), want 1 (only the 201s)", n, err)
	}
	n, err = seriesCount(env.reg, "infra_lmstfy_http_http_codes")
	if err != nil || n != 3 {
		t.Errorf("http_codes series = %d (%v), want 3", n, err)
	}
}

func TestAccessLog(t *testing.T) {
	env := newEnv(t, withConfig(func(c *config.Config) { c.EnableAccessLog = true }))
	okEngine(env.eng)
	env.api(t, request{method: "PUT", target: "/api/ns/q?delay=1&token=" + goodToken})
	env.api(t, request{method: "PUT", target: "/api/ns/q?tok%65n=" + goodToken + "&ttl=9"})
	var lines []*logrus.Entry
	for _, e := range env.logs.AllEntries() {
		if e.Message == "access" {
			lines = append(lines, e)
		}
		b, _ := json.Marshal(e.Data)
		if strings.Contains(string(b), goodToken) || strings.Contains(e.Message, goodToken) {
			t.Errorf("token logged: %s %s", e.Message, b)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d access lines, want 2", len(lines))
	}
	l := lines[0]
	if l.Data["query"] != "delay=1&token=REDACTED" || l.Data["code"] != 201 || l.Data["method"] != "PUT" ||
		l.Data["path"] != "/api/ns/q" || l.Data["pool"] != "default" || l.Data["req_id"] == "" || l.Level != logrus.InfoLevel {
		t.Errorf("access line %v %v", l.Level, l.Data)
	}

	// Runtime toggle through the admin API.
	w := env.admin(t, request{method: "POST", target: "/accesslog?status=disable"})
	expect(t, w, 200, `{"status":"disabled"}`)
	env.logs.Reset()
	env.api(t, request{method: "GET", target: "/api/ns/q/size"})
	for _, e := range env.logs.AllEntries() {
		if e.Message == "access" {
			t.Errorf("access logged while disabled")
		}
	}
}

func TestRedactQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"delay=1", "delay=1"},
		{"token=abc", "token=REDACTED"},
		{"a=1&token=abc&b=2", "a=1&token=REDACTED&b=2"},
		{"tok%65n=abc", "tok%65n=REDACTED"},
		{"token", "token=REDACTED"},
		{"tokens=abc&xtoken=1", "tokens=abc&xtoken=1"},
		{"a=%zz&token=x", "a=%zz&token=REDACTED"},
		{"x=1;token=abc", "x=1;token=REDACTED"},
		{"token=abc;x=1&token=d&", "token=REDACTED;x=1&token=REDACTED&"},
		{"&;token", "&;token=REDACTED"},
	}
	for _, tc := range tests {
		if got := redactQuery(tc.in); got != tc.want {
			t.Errorf("redactQuery(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestBadInputNever500 throws malformed requests at every route: the
// answer is always a 4xx (or a redirect), never a 500 or a panic.
func TestBadInputNever500(t *testing.T) {
	env := newEnv(t)
	okEngine(env.eng)
	okEngine(env.engB)
	routes := []struct{ method, path string }{
		{"PUT", "/api/ns/q"}, {"PUT", "/api/ns/q/bulk"}, {"PUT", "/api/ns/q/job/J"}, {"GET", "/api/ns/q"},
		{"GET", "/api/ns/q/peek"}, {"GET", "/api/ns/q/job/J"}, {"DELETE", "/api/ns/q/job/J"}, {"DELETE", "/api/ns/q"},
		{"GET", "/api/ns/q/deadletter"}, {"PUT", "/api/ns/q/deadletter"}, {"DELETE", "/api/ns/q/deadletter"},
		{"GET", "/api/ns/q/size"}, {"GET", "/api/ns/q/deadletter/size"},
	}
	queries := []string{
		"?delay=-1", "?ttl=18446744073709551616", "?tries=99999", "?ttr=1e3", "?timeout=0x10", "?count=%00",
		"?limit=-9223372036854775809", "?ttl=9223372036854775807", "?delay=%ff", "?count=1&count=x", "?limit=1.0",
		"?ttl=+1", "?tries=%201", "?timeout=99999999999999999999999", "?%zz=1&delay=1;x",
	}
	paths := []string{
		"/api/%ff/q", "/api/ns/%c3%28", "/api/" + strings.Repeat("n", 300) + "/q", "/api/ns/" + strings.Repeat("q", 300),
		"/api/ns/_", "/api/-/-", "/api/ns/q/job/%00", "/api//q", "/api/ns//peek", "/api/ns/q,,,/peek", "/api/ns/..",
	}
	bodies := []string{"", "[", "[]", "null", "\xff\xfe", `[{"a":` + strings.Repeat("[", 10000) + `}]`}
	check := func(r request) {
		t.Helper()
		w := env.api(t, r)
		if w.Code >= 500 || w.Code < 200 {
			t.Errorf("%s %s (body %.20q) → %d %s", r.method, r.target, r.body, w.Code, w.Body)
		}
		if w.Code >= 400 && !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s %s → %d with a non-JSON body %q", r.method, r.target, w.Code, w.Body)
		}
	}
	h := map[string]string{"X-Token": goodToken, "Enable-Job-Version": "yes", "Job-Attr-\xff": "\xff"}
	for _, rt := range routes {
		for _, q := range queries {
			check(request{method: rt.method, target: rt.path + q, header: h})
		}
		for _, b := range bodies {
			check(request{method: rt.method, target: rt.path, body: b, header: h})
		}
	}
	for _, p := range paths {
		for _, m := range []string{"GET", "PUT", "DELETE", "POST"} {
			check(request{method: m, target: p, header: h})
		}
	}
}

// logged reports whether a log entry at level mentions text.
func logged(env *testEnv, level logrus.Level, text string) bool {
	for _, e := range env.logs.AllEntries() {
		if e.Level != level {
			continue
		}
		b, _ := json.Marshal(e.Data)
		if strings.Contains(e.Message, text) || strings.Contains(string(b), text) {
			return true
		}
		if err, ok := e.Data[logrus.ErrorKey].(error); ok && strings.Contains(err.Error(), text) {
			return true
		}
	}
	return false
}

// counterValue reads a counter.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	return m.GetCounter().GetValue()
}

// seriesCount counts the series of the metric family name.
func seriesCount(g prometheus.Gatherer, name string) (int, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric()), nil
		}
	}
	return 0, nil
}

// TestAdminAccessLogRedaction checks that tokens in admin paths and
// queries stay out of the access log.
func TestAdminAccessLogRedaction(t *testing.T) {
	env := newEnv(t, withConfig(func(c *config.Config) { c.EnableAccessLog = true }))
	env.tokens.del = func(context.Context, string, string, string) error { return nil }
	env.throttler.del = func(context.Context, string, string, string) error { return nil }
	env.tokens.create = func(context.Context, string, string, string, string, auth.Scope) (string, error) {
		return goodToken, nil
	}
	expect(t, env.admin(t, request{method: "DELETE", target: "/token/ns/" + goodToken}), 204, "")
	expect(t, env.admin(t, request{method: "POST", target: "/token/ns?description=d&token=" + goodToken}), 201, "{\n    \"token\": \""+goodToken+"\"\n}")
	var paths []any
	for _, e := range env.logs.AllEntries() {
		b, _ := json.Marshal(e.Data)
		if strings.Contains(string(b), goodToken) {
			t.Errorf("token logged: %s %s", e.Message, b)
		}
		if e.Message == "access" {
			paths = append(paths, e.Data["path"])
		}
	}
	if want := []any{"/token/:namespace/:token", "/token/ns"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("access log paths %v, want %v", paths, want)
	}
}
