package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/audit"
)

const (
	auditUser     = "alice"
	auditPassword = "alice-password-0001"
)

// auditEnv is a test server with [Accounts] and an audit store.
type auditEnv struct {
	*testEnv
	client redis.UniversalClient
	store  *audit.Store
}

func newMiniredisClient(tb testing.TB) (*miniredis.Miniredis, redis.UniversalClient) {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return m, c
}

// newAuditEnv builds a server whose fakes succeed at the admin operations
// the audit tests make, with an audit store on client (nil: no store).
func newAuditEnv(t testing.TB, client redis.UniversalClient, opts ...envOption) *auditEnv {
	t.Helper()
	a := &auditEnv{client: client}
	if client != nil {
		a.store = audit.NewStore(client, 0)
	}
	opts = append([]envOption{func(c *config.Config, d *Deps) {
		c.Accounts = map[string]string{auditUser: auditPassword, "bob": "bob-password-0002"}
		if a.store != nil {
			d.Audit = a.store
		}
	}}, opts...)
	a.testEnv = newEnv(t, opts...)
	a.tokens.create = func(_ context.Context, pool, ns, desc, token string, _ auth.Scope) (string, error) {
		if token == "" {
			token = "generated-token-0123456789"
		}
		return token, nil
	}
	a.tokens.del = func(context.Context, string, string, string) error { return nil }
	a.tokens.list = func(context.Context, string, string, bool) (map[string]string, error) { return nil, nil }
	a.throttler.add = func(context.Context, string, string, string, auth.Limit) error { return nil }
	a.throttler.set = func(context.Context, string, string, string, auth.Limit) error { return nil }
	a.throttler.del = func(context.Context, string, string, string) error { return nil }
	a.throttler.get = func(context.Context, string, string, string) (auth.Limit, bool, error) {
		return auth.Limit{Read: 1, Write: 1, Interval: 1}, true, nil
	}
	for _, e := range []*fakeEngine{a.eng, a.engB} {
		e.queueConfig = func(context.Context, string, string) (engine.QueueConfig, error) { return engine.QueueConfig{}, nil }
		e.setQueueConfig = func(context.Context, string, string, engine.QueueConfig) error { return nil }
	}
	return a
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// send runs a request against the admin handler with the given
// Authorization ("" for none) and form body (sent as a form when not "").
func (a *auditEnv) send(t testing.TB, method, target, authz, form string) *httptest.ResponseRecorder {
	t.Helper()
	var req *http.Request
	if form != "" {
		req = httptest.NewRequest(method, target, strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	req.Host = "localhost" // a name the admin listener answers (admin_door.go)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	w := httptest.NewRecorder()
	a.srv.AdminHandler().ServeHTTP(w, req)
	return w
}

// entries returns every stored entry, newest first.
func (a *auditEnv) entries(t testing.TB) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	var before int64
	for {
		es, next, err := a.store.List(context.Background(), audit.Query{Limit: audit.MaxPage, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, es...)
		if next == 0 {
			return out
		}
		before = next
	}
}

// concrete fills a route pattern's parameters.
func concrete(route, jobID string) string {
	var parts []string
	for _, p := range strings.Split(route, "/") {
		switch {
		case p == ":namespace":
			p = "ns"
		case p == ":queue":
			p = "q"
		case p == ":token":
			p = goodToken
		case p == ":job_id":
			p = jobID
		case p == ":pool":
			p = "default"
		case p == ":name":
			p = "s"
		case p == ":action" && strings.HasPrefix(route, "/ui/job/"):
			p = "delete"
		case p == ":action":
			p = "pause"
		case p == "*profile":
			p = "cmdline"
		case strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*"):
			p = "x"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/")
}

// TestAuditEveryMutatingRoute: every state-changing route of the admin
// listener (enumerated from the router: a new route is covered without
// being listed here) leaves exactly one entry per request, with its
// method, route pattern, account and status, whether the request is
// accepted, refused for a wrong password or refused for no credentials;
// a read (GET, HEAD, OPTIONS) leaves none.
func TestAuditEveryMutatingRoute(t *testing.T) {
	_, client := newMiniredisClient(t)
	a := newAuditEnv(t, client)
	a.srv.logins.limit = 1 << 30 // wrong passwords on every route: not the failed-login throttle's test
	jobID := testJobID(a.testEnv)
	routes := a.srv.adminRoutes().Routes()
	mutating := 0
	for _, authz := range []struct {
		name, header, account string
		authenticated         bool
	}{
		{"valid account", basicAuth(auditUser, auditPassword), auditUser, true},
		{"wrong password", basicAuth(auditUser, "wrong"), auditUser, false},
		{"unknown account", basicAuth("mallory", auditPassword), "", false},
		{"no credentials", "", "", false},
	} {
		for _, r := range routes {
			path := concrete(r.Path, jobID)
			before := len(a.entries(t))
			w := a.send(t, r.Method, path, authz.header, "")
			got := a.entries(t)
			if !audited(r.Method) {
				if len(got) != before {
					t.Errorf("%s: %s %s left %d entries, want none", authz.name, r.Method, path, len(got)-before)
				}
				continue
			}
			if authz.name == "valid account" {
				mutating++
			}
			if len(got) != before+1 {
				t.Errorf("%s: %s %s (%d) left %d entries, want 1", authz.name, r.Method, path, w.Code, len(got)-before)
				continue
			}
			e := got[0]
			if e.Method != r.Method || e.Route != r.Path || e.Status != w.Code ||
				e.Account != authz.account || e.Authenticated != authz.authenticated || e.Remote != "192.0.2.1" ||
				e.RequestID != w.Header().Get("X-Request-ID") || e.RequestID == "" || e.Time.IsZero() {
				t.Errorf("%s: %s %s (%d): entry %+v", authz.name, r.Method, path, w.Code, e)
			}
			if !authz.authenticated && (w.Code != http.StatusUnauthorized || e.OK) {
				t.Errorf("%s: %s %s answered %d, entry ok=%v; want a refused 401", authz.name, r.Method, path, w.Code, e.OK)
			}
			if wantSource := map[bool]string{true: "dashboard", false: "api"}[strings.HasPrefix(r.Path, "/ui/")]; e.Source != wantSource {
				t.Errorf("%s %s: source %q, want %q", r.Method, r.Path, e.Source, wantSource)
			}
		}
	}
	// The token, limit, queue config, webhook, accesslog and dashboard
	// POST routes and pprof's any-method route: a router that lost them
	// would make this test pass vacuously.
	if mutating < 20 {
		t.Fatalf("only %d mutating admin routes found", mutating)
	}
}

// TestAuditBounded: a refused request with a huge path or form leaves an
// entry of bounded size.
func TestAuditBounded(t *testing.T) {
	_, client := newMiniredisClient(t)
	a := newAuditEnv(t, client)
	long := strings.Repeat("é", 20000)
	a.send(t, "POST", "/debug/pprof/"+url.PathEscape(long), basicAuth(auditUser, "wrong"), "")
	a.send(t, "POST", "/ui/tokens/create?pool="+url.QueryEscape(long), basicAuth(auditUser, auditPassword),
		url.Values{"namespace": {long}, "_csrf": {"x"}}.Encode())
	raw, err := client.LRange(context.Background(), audit.ListKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 2 {
		t.Fatalf("%d entries, want 2", len(raw))
	}
	for _, r := range raw {
		if len(r) > 2000 {
			t.Errorf("an entry of %d bytes: %.300s…", len(r), r)
		}
	}
	for _, e := range a.entries(t) {
		for k, v := range e.Target {
			if !utf8.ValidString(v) || !strings.HasSuffix(v, "…") {
				t.Errorf("target %s = %.40q…, want a clipped valid string", k, v)
			}
		}
	}
}

// TestAuditAnonymous: without [Accounts], entries name "anonymous".
func TestAuditAnonymous(t *testing.T) {
	_, client := newMiniredisClient(t)
	a := newAuditEnv(t, client, withConfig(func(c *config.Config) { c.Accounts = nil }))
	w := a.send(t, "POST", "/accesslog?status=enable", "", "")
	if w.Code != http.StatusOK {
		t.Fatalf("POST /accesslog: %d", w.Code)
	}
	got := a.entries(t)
	if len(got) != 1 || got[0].Account != "anonymous" || !got[0].Authenticated || !got[0].OK {
		t.Fatalf("entries %+v", got)
	}
}

// TestAuditRedaction: no token value and no password ever reaches the
// store or the log (access log on), whether the token comes in the path,
// the query, a form body or the answer, with or without a pool prefix;
// the entries name the tokens by fingerprint instead. A password typed
// into the user field is not recorded either. Run on miniredis and a real
// redis-server.
func TestAuditRedaction(t *testing.T) {
	for _, tier := range []string{"miniredis", "redis"} {
		t.Run(tier, func(t *testing.T) {
			var client redis.UniversalClient
			if tier == "redis" {
				client = redistest.Start(t).Client()
			} else {
				_, client = newMiniredisClient(t)
			}
			testAuditRedaction(t, client)
		})
	}
}

func testAuditRedaction(t *testing.T, client redis.UniversalClient) {
	a := newAuditEnv(t, client, withConfig(func(c *config.Config) { c.EnableAccessLog = true }))
	const (
		chosen  = "user-chosen-secret-0000001"
		inQuery = "query-chosen-secret-000002"
		pathTok = "path-secret-token-00000003"
		bSecret = "pool-b-secret-token-000004"
	)
	ok := basicAuth(auditUser, auditPassword)
	steps := []struct {
		method, target, form string
		authz                string
		wantToken            string // the fingerprint the entry must name
		status               int
	}{
		{"POST", "/token/ns?description=d", "token=" + chosen, ok, auth.Fingerprint(chosen), 201},
		{"POST", "/token/ns?description=d&token=" + inQuery, "", ok, auth.Fingerprint(inQuery), 201},
		{"POST", "/token/ns?description=d", "", ok, auth.Fingerprint("generated-token-0123456789"), 201},
		{"POST", "/token/ns/" + pathTok + "/limit", "", ok, auth.Fingerprint(pathTok), 0},
		{"PUT", "/token/ns/" + pathTok + "/limit", "", ok, auth.Fingerprint(pathTok), 0},
		{"DELETE", "/token/ns/" + pathTok + "/limit", "", ok, auth.Fingerprint(pathTok), 0},
		{"DELETE", "/token/ns/" + pathTok, "", ok, auth.Fingerprint(pathTok), 204},
		{"DELETE", "/token/ns/b:" + bSecret, "", ok, auth.Fingerprint(bSecret), 204},
		{"DELETE", "/token/ns/" + pathTok, "", basicAuth(auditUser, "wrong-"+pathTok), auth.Fingerprint(pathTok), 401},
		{"DELETE", "/token/ns/" + pathTok, "", basicAuth(auditPassword, "x"), auth.Fingerprint(pathTok), 401},
	}
	for _, s := range steps {
		w := a.send(t, s.method, s.target, s.authz, s.form)
		if s.status != 0 && w.Code != s.status {
			t.Fatalf("%s %s: %d %s, want %d", s.method, s.target, w.Code, w.Body, s.status)
		}
	}
	got := a.entries(t)
	if len(got) != len(steps) {
		t.Fatalf("%d entries, want %d", len(got), len(steps))
	}
	for i, s := range steps {
		e := got[len(got)-1-i]
		if e.Target["token"] != s.wantToken {
			t.Errorf("%s %s: target %v, want token %s", s.method, s.target, e.Target, s.wantToken)
		}
	}
	if e := got[len(got)-1-7]; e.Target["pool"] != "b" {
		t.Errorf("DELETE of a b: token: target %v, want pool b", e.Target)
	}
	if e := got[0]; e.Account != "" || e.Authenticated {
		t.Errorf("a password typed as the user: entry %+v", e)
	}
	raw, err := client.LRange(context.Background(), audit.ListKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	for _, e := range a.logs.AllEntries() {
		line, err := e.String()
		if err != nil {
			t.Fatal(err)
		}
		logs.WriteString(line)
	}
	if !strings.Contains(logs.String(), "audit") || !strings.Contains(logs.String(), auth.Fingerprint(pathTok)) {
		t.Fatalf("the log holds no audit entry:\n%s", logs.String())
	}
	for where, text := range map[string]string{"store": strings.Join(raw, "\n"), "log": logs.String()} {
		for _, secret := range []string{chosen, inQuery, pathTok, bSecret, "generated-token-0123456789", auditPassword,
			base64.StdEncoding.EncodeToString([]byte(auditUser + ":" + auditPassword))} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds %q:\n%s", where, secret, text)
			}
		}
	}
}

// TestAuditStoreDown: with the admin Redis down the action is still done
// and answered; its entry goes to the log at warn level, flagged as not
// stored, and is counted in kairos_audit_write_errors_total.
func TestAuditStoreDown(t *testing.T) {
	mr, client := newMiniredisClient(t)
	a := newAuditEnv(t, client)
	mr.Close()
	w := a.send(t, "POST", "/accesslog?status=enable", basicAuth(auditUser, auditPassword), "")
	if w.Code != http.StatusOK {
		t.Fatalf("POST /accesslog with the audit store down: %d %s", w.Code, w.Body)
	}
	if !a.srv.accessLog.Load() {
		t.Fatal("the access log was not enabled")
	}
	var m dto.Metric
	if err := a.srv.auditMetrics.writeErrors.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 1 {
		t.Errorf("kairos_audit_write_errors_total = %v, want 1", n)
	}
	var found bool
	for _, e := range a.logs.AllEntries() {
		if e.Data["audit"] == true {
			found = true
			if e.Level.String() != "warning" || e.Data["audit_stored"] != false || e.Data["account"] != auditUser ||
				e.Data["route"] != "/accesslog" {
				t.Errorf("log entry %s %v", e.Level, e.Data)
			}
		}
	}
	if !found {
		t.Fatal("no audit line in the log")
	}
	w = a.send(t, "GET", "/audit", basicAuth(auditUser, auditPassword), "")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("GET /audit with the store down: %d %v %s, want 503 with Retry-After", w.Code, w.Header(), w.Body)
	}
}

// TestAuditList: GET /audit pages newest first with limit and before,
// filters by account and namespace, refuses bad parameters with 400, needs
// the basic auth, and answers 501 on a server without a store.
func TestAuditList(t *testing.T) {
	_, client := newMiniredisClient(t)
	a := newAuditEnv(t, client)
	alice, bob := basicAuth(auditUser, auditPassword), basicAuth("bob", "bob-password-0002")
	for _, r := range []struct{ authz, target string }{
		{alice, "/queue/ns1/q/config"}, {bob, "/queue/ns2/q/config"}, {alice, "/queue/ns2/q/config"},
		{bob, "/queue/ns1/q/config"}, {alice, "/queue/ns1/q2/config"},
	} {
		req := httptest.NewRequest("PUT", r.target, strings.NewReader(`{"paused":true}`))
		req.Host = "localhost"
		req.Header.Set("Authorization", r.authz)
		w := httptest.NewRecorder()
		a.srv.AdminHandler().ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", r.target, w.Code, w.Body)
		}
	}
	list := func(query string, status int) auditResponse {
		t.Helper()
		w := a.admin(t, request{method: "GET", target: "/audit" + query, header: map[string]string{"Authorization": alice}})
		if w.Code != status {
			t.Fatalf("GET /audit%s: %d %s, want %d", query, w.Code, w.Body, status)
		}
		var out auditResponse
		if status == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if w.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q", w.Header().Get("Cache-Control"))
			}
		}
		return out
	}
	seqs := func(es []audit.Entry) string {
		var s []string
		for _, e := range es {
			s = append(s, fmt.Sprint(e.Seq))
		}
		return strings.Join(s, ",")
	}
	all := list("", http.StatusOK)
	if seqs(all.Entries) != "5,4,3,2,1" || all.Next != 0 {
		t.Fatalf("GET /audit: %s next %d", seqs(all.Entries), all.Next)
	}
	if e := all.Entries[0]; e.Target["namespace"] != "ns1" || e.Target["queue"] != "q2" || e.Account != auditUser || !e.OK {
		t.Errorf("newest entry %+v", e)
	}
	p1 := list("?limit=2", http.StatusOK)
	p2 := list("?limit=2&before="+fmt.Sprint(p1.Next), http.StatusOK)
	p3 := list("?limit=2&before="+fmt.Sprint(p2.Next), http.StatusOK)
	if got := seqs(p1.Entries) + "|" + seqs(p2.Entries) + "|" + seqs(p3.Entries); got != "5,4|3,2|1" || p3.Next != 0 {
		t.Errorf("pages %s, last next %d", got, p3.Next)
	}
	if got := seqs(list("?account=bob", http.StatusOK).Entries); got != "4,2" {
		t.Errorf("bob's entries: %s", got)
	}
	if got := seqs(list("?account=alice&namespace=ns1", http.StatusOK).Entries); got != "5,1" {
		t.Errorf("alice's in ns1: %s", got)
	}
	for _, bad := range []string{"?limit=0", "?limit=501", "?limit=x", "?before=-1", "?before=x"} {
		list(bad, http.StatusBadRequest)
	}
	if w := a.admin(t, request{method: "GET", target: "/audit"}); w.Code != http.StatusUnauthorized {
		t.Errorf("GET /audit without credentials: %d", w.Code)
	}
	none := newAuditEnv(t, nil)
	w := none.admin(t, request{method: "GET", target: "/audit", header: map[string]string{"Authorization": alice}})
	expect(t, w, http.StatusNotImplemented, `{"error":"the audit log is not stored on this server"}`)
}

// dashboardSession is a browser-like session: the CSRF cookie of a page.
func (a *auditEnv) dashboardPost(t testing.TB, target string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	authz := basicAuth(auditUser, auditPassword)
	w := a.send(t, "GET", "/ui/tokens", authz, "")
	var csrf string
	for _, c := range w.Result().Cookies() {
		if c.Name == csrfCookie {
			csrf = c.Value
		}
	}
	if csrf == "" {
		t.Fatalf("no CSRF cookie from /ui/tokens: %d", w.Code)
	}
	if form == nil {
		form = url.Values{}
	}
	form.Set(csrfField, csrf)
	req := httptest.NewRequest("POST", target, strings.NewReader(form.Encode()))
	req.Host = "localhost"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", authz)
	req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
	w = httptest.NewRecorder()
	a.srv.AdminHandler().ServeHTTP(w, req)
	return w
}

// TestAuditDashboard: dashboard actions are recorded with their outcome
// (a 303 either way: the entry says whether the action was done), the
// target (pool, namespace, queue, action; a revoked token by
// fingerprint), and show on the audit page with the account.
func TestAuditDashboard(t *testing.T) {
	_, client := newMiniredisClient(t)
	a := newAuditEnv(t, client)
	if w := a.dashboardPost(t, "/ui/queue/default/ns/orders/pause", nil); w.Code != http.StatusSeeOther {
		t.Fatalf("pause: %d %s", w.Code, w.Body)
	}
	a.eng.setQueueConfig = func(context.Context, string, string, engine.QueueConfig) error {
		return fmt.Errorf("set: %w", engine.ErrInvalid)
	}
	if w := a.dashboardPost(t, "/ui/queue/default/ns/orders/resume", nil); w.Code != http.StatusSeeOther {
		t.Fatalf("resume: %d %s", w.Code, w.Body)
	}
	fp := auth.Fingerprint(goodToken)
	if w := a.dashboardPost(t, "/ui/tokens/revoke?pool=default", url.Values{"namespace": {"ns"}, "fingerprint": {fp}}); w.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", w.Code, w.Body)
	}
	got := a.entries(t)
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(got), got)
	}
	revoke, resume, pause := got[0], got[1], got[2]
	want := map[string]string{"pool": "default", "namespace": "ns", "queue": "orders", "action": "pause"}
	if !pause.OK || pause.Source != "dashboard" || pause.Status != http.StatusSeeOther || fmt.Sprint(pause.Target) != fmt.Sprint(want) ||
		pause.Route != "/ui/queue/:pool/:namespace/:queue/:action" || pause.Account != auditUser {
		t.Errorf("pause entry %+v", pause)
	}
	if resume.OK || resume.Error == "" || resume.Status != http.StatusSeeOther {
		t.Errorf("failed resume entry %+v", resume)
	}
	if !revoke.OK || revoke.Target["token"] != fp || revoke.Target["namespace"] != "ns" {
		t.Errorf("revoke entry %+v", revoke)
	}

	w := a.send(t, "GET", "/ui/audit", basicAuth(auditUser, auditPassword), "")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /ui/audit: %d", w.Code)
	}
	page := w.Body.String()
	for _, s := range []string{`data-seq="1"`, `data-seq="3"`, "/ui/queue/:pool/:namespace/:queue/:action", ">alice<", fp, "refused"} {
		if !strings.Contains(page, s) {
			t.Errorf("the audit page lacks %q", s)
		}
	}
	w = a.send(t, "GET", "/ui/audit?limit=2", basicAuth(auditUser, auditPassword), "")
	if page := w.Body.String(); !strings.Contains(page, `href="/ui/audit?before=2"`) || strings.Contains(page, `data-seq="1"`) {
		t.Errorf("page of 2: no older link or too many rows")
	}
	w = a.send(t, "GET", "/ui/audit?before=2", basicAuth(auditUser, auditPassword), "")
	if page := w.Body.String(); !strings.Contains(page, `data-seq="1"`) || strings.Contains(page, `data-seq="2"`) ||
		!strings.Contains(page, `id="audit-newest"`) {
		t.Errorf("older page: wrong rows or no newest link")
	}
	w = a.send(t, "GET", "/ui/audit?before=x", basicAuth(auditUser, auditPassword), "")
	if w.Code != http.StatusBadRequest {
		t.Errorf("GET /ui/audit?before=x: %d", w.Code)
	}
}
