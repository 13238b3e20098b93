package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// adminRouteList is every route of the admin router (dashboard included),
// as gin lists them: "METHOD /path".
func adminRouteList(t testing.TB, s *Server) []gin.RouteInfo {
	t.Helper()
	if !s.cfg.DashboardEnabled() {
		t.Fatal("the route list needs the dashboard on")
	}
	routes := s.adminRoutes().Routes()
	sort.Slice(routes, func(i, j int) bool {
		return routes[i].Path+routes[i].Method < routes[j].Path+routes[j].Method
	})
	return routes
}

// TestAdminRulesCoverEveryRoute: every admin route has a rule in
// adminRules, and every rule is a route's: a new route cannot forget its
// access rule (the door also refuses one that does).
func TestAdminRulesCoverEveryRoute(t *testing.T) {
	env := newEnv(t)
	used := map[string]bool{}
	for _, rt := range adminRouteList(t, env.srv) {
		if _, ok := adminRuleOf(rt.Method, rt.Path); !ok {
			t.Errorf("%s %s has no rule in adminRules", rt.Method, rt.Path)
		}
		used[rt.Method+" "+rt.Path], used["* "+rt.Path] = true, true
	}
	for key := range adminRules {
		if !used[key] {
			t.Errorf("adminRules has %q, which is no route", key)
		}
	}
}

// expectedAccess is what each admin route asks, written out here apart
// from adminRules (doc/config.md#roles says the same): "open" (no
// account), "ops" (an account unless ProtectAdminEndpoints = false, then
// the role), then the least role, then the namespace: "ns" (the route's
// namespace), "all" (every namespace), "-" (none), "home" (every
// namespace, and a limited account is sent to its first one's page).
var expectedAccess = map[string]string{
	"GET /healthz":      "open",
	"GET /readyz":       "open",
	"GET /pools":        "open",
	"GET /version":      "open",
	"GET /openapi.yaml": "open",
	"GET /accesslog":    "open",

	"GET /info":               "ops viewer all",
	"GET /metrics":            "ops viewer all",
	"* /debug/pprof/*profile": "ops admin all",

	"POST /accesslog":                       "admin all",
	"GET /limits":                           "admin all",
	"GET /token/:namespace":                 "admin ns",
	"POST /token/:namespace":                "admin ns",
	"DELETE /token/:namespace/:token":       "admin ns",
	"GET /token/:namespace/:token/limit":    "viewer ns",
	"POST /token/:namespace/:token/limit":   "admin ns",
	"PUT /token/:namespace/:token/limit":    "admin ns",
	"DELETE /token/:namespace/:token/limit": "admin ns",

	"GET /queue/:namespace/:queue/config": "viewer ns",
	"PUT /queue/:namespace/:queue/config": "operator ns",
	"GET /webhooks":                       "viewer all",
	"GET /webhook/:namespace/:queue":      "viewer ns",
	"PUT /webhook/:namespace/:queue":      "operator ns",
	"DELETE /webhook/:namespace/:queue":   "operator ns",
	"GET /quota":                          "viewer all",
	"GET /quota/:namespace":               "viewer ns",
	"PUT /quota/:namespace":               "admin all",
	"DELETE /quota/:namespace":            "admin all",

	"GET /overview":                                "viewer all",
	"GET /history":                                 "viewer all",
	"GET /history/:namespace":                      "viewer ns",
	"GET /history/:namespace/:queue":               "viewer ns",
	"GET /queues/:namespace":                       "viewer ns",
	"GET /queue/:namespace/:queue/jobs":            "viewer ns",
	"GET /queue/:namespace/:queue/job/:job_id":     "viewer ns",
	"GET /queue/:namespace/:queue/deadletter/jobs": "viewer ns",
	"GET /queue/:namespace/:queue/groups":          "viewer ns",
	"GET /job/:job_id":                             "viewer all",
	"GET /audit":                                   "viewer all",

	"GET /ui/static/*file":                                    "viewer -",
	"GET /ui/":                                                "viewer home",
	"GET /ui/ns/:pool/:namespace":                             "viewer ns",
	"GET /ui/queue/:pool/:namespace/:queue":                   "viewer ns",
	"GET /ui/job/:pool/:namespace/:queue/:job_id":             "viewer ns",
	"GET /ui/lookup":                                          "viewer ns",
	"GET /ui/audit":                                           "viewer all",
	"GET /ui/tokens":                                          "viewer ns",
	"GET /ui/tokens/created":                                  "admin -",
	"POST /ui/queue/:pool/:namespace/:queue/:action":          "operator ns",
	"POST /ui/job/:pool/:namespace/:queue/:job_id/:action":    "operator ns",
	"POST /ui/schedule/:pool/:namespace/:queue/:name/:action": "operator ns",
	"POST /ui/tokens/create":                                  "admin ns",
	"POST /ui/tokens/revoke":                                  "admin ns",
}

func expectationOf(t testing.TB, rt gin.RouteInfo) string {
	t.Helper()
	if e, ok := expectedAccess[rt.Method+" "+rt.Path]; ok {
		return e
	}
	if e, ok := expectedAccess["* "+rt.Path]; ok {
		return e
	}
	t.Fatalf("%s %s: not in expectedAccess (add the route there and to adminRules)", rt.Method, rt.Path)
	return ""
}

// matrixToken is the token the matrix routes name (never a real one, so
// that a request let through changes nothing that matters).
const matrixToken = "matrix-token-0123456789"

// adminRequest builds a request to one route for namespace ns: the path's
// parameters filled in, and the query or form of the routes that take
// their namespace there.
func adminRequest(t testing.TB, base string, rt gin.RouteInfo, ns string) *http.Request {
	t.Helper()
	fill := map[string]string{
		":namespace": ns, ":queue": "q", ":token": matrixToken, ":job_id": "01J0000000000000000000000A",
		":pool": "default", ":action": "pause", ":name": "s", "*file": "app.css", "*profile": "cmdline",
	}
	var parts []string
	for _, p := range strings.Split(rt.Path, "/") {
		if v, ok := fill[p]; ok {
			p = v
		}
		parts = append(parts, p)
	}
	target := base + strings.Join(parts, "/")
	var body string
	switch {
	case rt.Path == "/ui/lookup", rt.Path == "/ui/tokens":
		target += "?namespace=" + url.QueryEscape(ns) + "&id=01J0000000000000000000000A"
	case strings.HasPrefix(rt.Path, "/ui/tokens/") && rt.Method == "POST":
		body = url.Values{"namespace": {ns}, "description": {"matrix"}, "fingerprint": {auth.Fingerprint(matrixToken)}}.Encode()
	case rt.Path == "/accesslog":
		target += "?status=enable"
	case rt.Path == "/token/:namespace" && rt.Method == "POST":
		target += "?description=matrix"
	}
	req := newRequest(t, rt.Method, target, body)
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req
}

// doorAnswer is an answer of the admin listener, and whether the door
// (not a handler) refused the request, for which reason.
type doorAnswer struct {
	status int
	body   string
	door   string // "host", "cross-site", "role", "namespace", "login" or ""
}

func sendAdmin(t testing.TB, req *http.Request) doorAnswer {
	t.Helper()
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for b.Len() < 1<<16 {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	a := doorAnswer{status: resp.StatusCode, body: b.String()}
	var e struct{ Error string }
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && json.Unmarshal([]byte(a.body), &e) == nil
	switch {
	case resp.StatusCode == http.StatusSeeOther && req.URL.Path == "/ui/" && strings.HasPrefix(resp.Header.Get("Location"), "/ui/ns/"):
		a.door = "home"
	case resp.StatusCode == 401:
		a.door = "login"
		if got := resp.Header.Get("WWW-Authenticate"); got != basicRealm {
			t.Errorf("%s %s: 401 with WWW-Authenticate %q", req.Method, req.URL, got)
		}
	case resp.StatusCode != 403 || !isJSON:
	case strings.Contains(e.Error, "does not answer the host"):
		a.door = "host"
	case strings.HasPrefix(e.Error, "cross-site request refused"):
		a.door = "cross-site"
	case strings.Contains(e.Error, "has the role"):
		a.door = "role"
	case strings.Contains(e.Error, "may not touch the namespace"), strings.Contains(e.Error, "may touch only"):
		a.door = "namespace"
	}
	return a
}

// TestAdminDoorCrossSite: every admin route (the dashboard's too), without
// accounts (the dev default, where nothing else stands in the way), is
// refused with a JSON 403 when a browser marks the request cross-site or
// same-site (Sec-Fetch-Site), when it comes from another origin (Origin),
// and when its Host is not one the listener answers (DNS rebinding); the
// same request without those headers goes through, as does a same-origin
// one, a cross-site GET navigation (a link) and a name of AdminHosts.
// Nothing changed afterwards.
func TestAdminDoorCrossSite(t *testing.T) {
	l := startLive(t, liveOptions{config: func(c *config.Config) {
		c.EnableAccessLog = false
		c.Kairos.AdminHosts = []string{"kairos.example.com", "other.example.com:8443"}
	}})
	u, _ := url.Parse(l.admin)
	port := u.Port()
	ctx := context.Background()
	before, err := l.tokens.List(ctx, auth.DefaultPool, "ns", false)
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name   string
		header map[string]string
		host   string
		door   string
	}{
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, "", "cross-site"},
		{"cross-site form", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Origin": "http://evil.example"}, "", "cross-site"},
		{"same-site (another port)", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, "", "cross-site"},
		{"foreign Origin", map[string]string{"Origin": "http://127.0.0.1:1"}, "", "cross-site"},
		{"Origin null", map[string]string{"Origin": "null"}, "", "cross-site"},
		{"bad Host", nil, "evil.example:" + port, "host"},
		{"rebound name without port", nil, "evil.example", "host"},
		{"loopback on another port", nil, "127.0.0.1:1", "host"},
		{"AdminHosts name on another port than its entry", nil, "other.example.com:9999", "host"},
	}
	passed := []struct {
		name   string
		header map[string]string
		host   string
		post   bool // also for the state-changing methods
	}{
		{"no headers", nil, "", true},
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": l.admin}, "", true},
		{"typed in the address bar", map[string]string{"Sec-Fetch-Site": "none"}, "", true},
		{"localhost", nil, "localhost:" + port, true},
		{"[::1]", nil, "[::1]:" + port, true},
		{"AdminHosts name", map[string]string{"Origin": "https://kairos.example.com"}, "kairos.example.com", true},
		{"AdminHosts name:port", nil, "other.example.com:8443", true},
		{"cross-site link", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, "", false},
	}
	for _, rt := range adminRouteList(t, l.srv) {
		if rt.Method == "CONNECT" || strings.HasSuffix(rt.Path, "/debug/pprof/*profile") && rt.Method != "GET" && rt.Method != "POST" {
			continue // pprof takes every method; two are enough
		}
		name := rt.Method + " " + rt.Path
		for _, tc := range refused {
			req := adminRequest(t, l.admin, rt, "ns")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			if a := sendAdmin(t, req); a.status != http.StatusForbidden || a.door != tc.door {
				t.Errorf("%s with %s: %d %q, want the door's 403 (%s)", name, tc.name, a.status, a.body, tc.door)
			}
		}
		safe := rt.Method == "GET" || rt.Method == "HEAD"
		for _, tc := range passed {
			if !tc.post && !safe {
				continue
			}
			req := adminRequest(t, l.admin, rt, "ns")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			if a := sendAdmin(t, req); a.door != "" {
				t.Errorf("%s with %s: refused by the door: %d %q", name, tc.name, a.status, a.body)
			}
		}
		// A cross-site link may open a page, never change anything.
		if !safe {
			req := adminRequest(t, l.admin, rt, "ns")
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			req.Header.Set("Sec-Fetch-Mode", "navigate")
			if a := sendAdmin(t, req); a.door != "cross-site" {
				t.Errorf("%s as a cross-site navigation: %d %q, want refused", name, a.status, a.body)
			}
		}
	}
	// The refused requests changed nothing; the ones let through (no
	// headers, same origin...) created tokens called "matrix" only.
	after, err := l.tokens.List(ctx, auth.DefaultPool, "ns", false)
	if err != nil {
		t.Fatal(err)
	}
	for tok, desc := range after {
		if _, ok := before[tok]; !ok && desc != "matrix" {
			t.Errorf("a token %q appeared", desc)
		}
	}
}

// TestAdminRoleMatrix: every admin route × every kind of account: an lmstfy
// `user = "password"` account (full admin), admin, operator and viewer
// accounts (the viewer's password a bcrypt hash), an operator limited to
// the namespace "ns" on "ns" and on "other", and wrong credentials. Each
// gets through exactly when expectedAccess says its role and namespaces
// allow it; otherwise 401 (no or wrong credentials) or a JSON 403.
func TestAdminRoleMatrix(t *testing.T) {
	for _, protect := range []bool{true, false} {
		t.Run(fmt.Sprintf("ProtectAdminEndpoints=%v", protect), func(t *testing.T) {
			t.Parallel()
			testAdminRoleMatrix(t, protect)
		})
	}
}

func testAdminRoleMatrix(t *testing.T, protect bool) {
	hash, err := bcrypt.GenerateFromPassword([]byte("viewer-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	l := startLive(t, liveOptions{config: func(c *config.Config) {
		c.EnableAccessLog = false
		c.Kairos.ProtectAdminEndpoints = &protect
		c.Accounts = map[string]string{"lmstfy": "pw0", "root": "pw1", "op": "pw2", "viewer": string(hash), "nsop": "pw3"}
		c.AccountAccess = map[string]config.AccountAccess{
			"root":   {Role: config.RoleAdmin},
			"op":     {Role: config.RoleOperator},
			"viewer": {Role: config.RoleViewer},
			"nsop":   {Role: config.RoleOperator, Namespaces: []string{"ns"}},
		}
	}})
	// The matrix sends thousands of wrong passwords from one address:
	// the failed-login throttle (TestAdminLoginThrottle) is not its subject.
	l.srv.logins.limit = 1 << 30
	type account struct {
		name, user, pass, role, ns string
		limited, valid             bool
	}
	accounts := []account{
		{"no credentials", "", "", "", "ns", false, false},
		{"wrong password", "root", "pw0", "", "ns", false, false},
		{"bcrypt account with a wrong password", "viewer", "viewer-p", "", "ns", false, false},
		{"lmstfy account", "lmstfy", "pw0", config.RoleAdmin, "ns", false, true},
		{"admin", "root", "pw1", config.RoleAdmin, "ns", false, true},
		{"operator", "op", "pw2", config.RoleOperator, "ns", false, true},
		{"viewer (bcrypt)", "viewer", "viewer-pw", config.RoleViewer, "ns", false, true},
		{"operator of ns, on ns", "nsop", "pw3", config.RoleOperator, "ns", true, true},
		{"operator of ns, on other", "nsop", "pw3", config.RoleOperator, "other", true, true},
	}
	for _, rt := range adminRouteList(t, l.srv) {
		if rt.Method == "CONNECT" || strings.HasSuffix(rt.Path, "/debug/pprof/*profile") && rt.Method != "GET" && rt.Method != "POST" {
			continue
		}
		fields := strings.Fields(expectationOf(t, rt))
		open := fields[0] == "open" || fields[0] == "ops" && !protect
		if fields[0] == "ops" {
			fields = fields[1:]
		}
		for _, acc := range accounts {
			req := adminRequest(t, l.admin, rt, acc.ns)
			if acc.user != "" {
				req.SetBasicAuth(acc.user, acc.pass)
			}
			a := sendAdmin(t, req)
			name := fmt.Sprintf("%s %s as %s", rt.Method, rt.Path, acc.name)
			var want string // the door's refusal, "" for through
			switch {
			case open:
			case !acc.valid:
				want = "login"
			case roleRank(acc.role) < roleRank(fields[0]):
				want = "role"
			case acc.limited && fields[1] == "home":
				want = "home"
			case acc.limited && (fields[1] == "all" || fields[1] == "ns" && acc.ns != "ns"):
				want = "namespace"
			}
			if a.door != want {
				t.Errorf("%s: %d %q (door: %q), want door %q", name, a.status, a.body, a.door, want)
			}
			if a.status >= 500 {
				t.Errorf("%s: %d %q", name, a.status, a.body)
			}
		}
	}
}

// TestAdminDoorContext: the door puts the account's name under
// gin.AuthUserKey and its role under AuthRoleKey, for the middlewares and
// handlers after it (the audit log reads them).
func TestAdminDoorContext(t *testing.T) {
	env := newEnv(t, withConfig(func(c *config.Config) {
		c.Accounts = map[string]string{"bob": "pw"}
		c.AccountAccess = map[string]config.AccountAccess{"bob": {Role: config.RoleOperator}}
	}))
	r := gin.New()
	var user, role string
	r.Use(env.srv.adminDoor)
	r.GET("/queue/:namespace/:queue/config", func(c *gin.Context) {
		user, role = c.GetString(gin.AuthUserKey), c.GetString(AuthRoleKey)
	})
	req := request{method: "GET", target: "/queue/ns/q/config"}.build(t)
	req.SetBasicAuth("bob", "pw")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != 200 || user != "bob" || role != config.RoleOperator {
		t.Errorf("%d: user %q role %q, want bob operator", w.Code, user, role)
	}
}

// TestAdminNoStore: the answers that carry a token are never cached.
func TestAdminNoStore(t *testing.T) {
	l := startLive(t, liveOptions{})
	for _, r := range []struct{ method, path string }{
		{"GET", "/token/ns"}, {"POST", "/token/ns?description=d"}, {"GET", "/limits"}, {"GET", "/ui/tokens?namespace=ns"},
	} {
		resp := liveDo(t, r.method, l.admin+r.path, nil, nil)
		if resp.status >= 300 || resp.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: %d Cache-Control %q, want no-store", r.method, r.path, resp.status, resp.header.Get("Cache-Control"))
		}
	}
}

// TestDashboardByRole: the pages show each account only the forms its
// role may use (the door refuses the others either way), and send an
// account limited to some namespaces from the overview to its first one.
func TestDashboardByRole(t *testing.T) {
	l := startLive(t, liveOptions{config: func(c *config.Config) {
		c.Accounts = map[string]string{"v": "pw", "o": "pw", "a": "pw", "n": "pw"}
		c.AccountAccess = map[string]config.AccountAccess{
			"v": {Role: config.RoleViewer}, "o": {Role: config.RoleOperator},
			"n": {Role: config.RoleOperator, Namespaces: []string{"shop", "billing"}},
		}
	}})
	tok := l.token(t, "shop", auth.Scope{})
	if r := liveDo(t, "PUT", l.api+"/api/shop/q", strings.NewReader("x"), map[string]string{"X-Token": tok}); r.status != 201 {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	page := func(user, path string) liveResponse {
		t.Helper()
		req := newRequest(t, "GET", l.admin+path, "")
		req.SetBasicAuth(user, "pw")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return liveResponse{status: resp.StatusCode, body: b.String(), header: resp.Header}
	}
	queueForms := []string{`id="pause"`, `action="/ui/queue/default/shop/q/backoff"`, `id="destroy"`, `id="schedule-form"`}
	tokenForms := []string{`id="token-create"`}
	for _, tc := range []struct {
		user            string
		operate, manage bool
		role            string
	}{
		{"v", false, false, "viewer"}, {"o", true, false, "operator"}, {"a", true, true, "admin"}, {"n", true, false, "operator"},
	} {
		q := page(tc.user, "/ui/queue/default/shop/q")
		tk := page(tc.user, "/ui/tokens?namespace=shop")
		if q.status != 200 || tk.status != 200 {
			t.Fatalf("%s: queue page %d, tokens page %d", tc.user, q.status, tk.status)
		}
		if !strings.Contains(q.body, `id="account"`) || !strings.Contains(q.body, tc.user+" · "+tc.role) {
			t.Errorf("%s: the page does not name the account and its role", tc.user)
		}
		for _, f := range queueForms {
			if strings.Contains(q.body, f) != tc.operate {
				t.Errorf("%s (%s): queue page has %s: %v, want %v", tc.user, tc.role, f, !tc.operate, tc.operate)
			}
		}
		for _, f := range tokenForms {
			if strings.Contains(tk.body, f) != tc.manage {
				t.Errorf("%s (%s): tokens page has %s: %v, want %v", tc.user, tc.role, f, !tc.manage, tc.manage)
			}
		}
	}
	if r := page("n", "/ui/"); r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/ns/default/shop" {
		t.Errorf("overview for an account limited to shop, billing: %d %v, want 303 to /ui/ns/default/shop", r.status, r.header)
	}
	if r := page("n", "/ui/ns/default/other"); r.status != http.StatusForbidden {
		t.Errorf("another namespace's page for a limited account: %d, want 403", r.status)
	}
}

// TestAdminHostAllowed: the names the admin listener answers, by the
// address a connection came in on, AdminHost and AdminHosts.
func TestAdminHostAllowed(t *testing.T) {
	local := &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 7778}
	for _, tc := range []struct {
		adminHost string
		hosts     []string
		host      string
		ok        bool
	}{
		{"0.0.0.0", nil, "10.0.0.5:7778", true},  // the address the connection came in on
		{"0.0.0.0", nil, "10.0.0.6:7778", false}, // another address
		{"0.0.0.0", nil, "0.0.0.0:7778", false},  // a wildcard is no name
		{"kairos.internal", nil, "KAIROS.internal:7778", true},
		{"kairos.internal", nil, "kairos.internal:7779", false}, // another port
		{"127.0.0.1", nil, "localhost", true},                   // no port: the scheme's
		{"127.0.0.1", nil, "[::1]:7778", true},
		{"127.0.0.1", nil, "127.0.0.2:7778", true}, // loopback
		{"127.0.0.1", nil, "evil.example:7778", false},
		{"127.0.0.1", []string{"kairos.example.com"}, "kairos.example.com:443", true},
		{"127.0.0.1", []string{"kairos.example.com:8443"}, "kairos.example.com:443", false},
		{"127.0.0.1", []string{"[::2]:8443"}, "[::2]:8443", true},
		{"127.0.0.1", []string{"*"}, "anything.example:1", true},
		{"127.0.0.1", nil, "", true}, // HTTP/1.0 without Host: no browser
	} {
		env := newEnv(t, withConfig(func(c *config.Config) { c.AdminHost, c.Kairos.AdminHosts = tc.adminHost, tc.hosts }))
		req := httptest.NewRequest("GET", "/version", nil)
		req.Host = tc.host
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
		if got := env.srv.adminHostAllowed(req); got != tc.ok {
			t.Errorf("AdminHost %q, AdminHosts %q, Host %q: %v, want %v", tc.adminHost, tc.hosts, tc.host, got, tc.ok)
		}
	}
}

// TestAdminLoginThrottle: a client address that fails loginFailMax logins
// is refused with 429 and Retry-After, the right password included, until
// the window has passed; another address logs in meanwhile; requests
// without credentials (a browser asking for the login dialog) and logins
// that succeed do not count.
func TestAdminLoginThrottle(t *testing.T) {
	env := newEnv(t, withConfig(func(c *config.Config) {
		c.Accounts = map[string]string{"bob": "pw"}
		c.AccountAccess = map[string]config.AccountAccess{"bob": {Role: config.RoleOperator}}
	}))
	now := time.Unix(1_800_000_000, 0)
	env.srv.logins.now = func() time.Time { return now }
	r := gin.New()
	r.Use(env.srv.adminDoor)
	r.GET("/queue/:namespace/:queue/config", func(c *gin.Context) { c.Status(200) })
	try := func(addr, user, pass string) *httptest.ResponseRecorder {
		req := request{method: "GET", target: "/queue/ns/q/config"}.build(t)
		req.RemoteAddr = addr
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	const attacker, other = "192.0.2.7:40000", "192.0.2.8:40000"
	for i := 0; i < 3; i++ {
		if w := try(attacker, "", ""); w.Code != 401 {
			t.Fatalf("no credentials: %d, want 401", w.Code)
		}
	}
	for i := 0; i < loginFailMax; i++ {
		if w := try(attacker, "bob", "guess"+strconv.Itoa(i)); w.Code != 401 {
			t.Fatalf("failed login %d: %d, want 401", i+1, w.Code)
		}
		if i == 4 {
			if w := try(attacker, "bob", "pw"); w.Code != 200 {
				t.Fatalf("the right password after 5 failures: %d, want 200", w.Code)
			}
		}
	}
	w := try(attacker, "bob", "pw")
	if w.Code != 429 || w.Header().Get("Retry-After") != "60" || !strings.Contains(w.Body.String(), `"error":"too many failed logins from 192.0.2.7`) {
		t.Fatalf("after %d failures: %d Retry-After %q %s, want 429, 60 and the error", loginFailMax, w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := try(other, "bob", "pw"); w.Code != 200 {
		t.Fatalf("another address: %d, want 200", w.Code)
	}
	// Another port of the same address is the same client; an IPv6
	// address is counted by its /64.
	if w := try("192.0.2.7:40001", "bob", "pw"); w.Code != 429 {
		t.Fatalf("same address, another port: %d, want 429", w.Code)
	}
	now = now.Add(45 * time.Second)
	if w := try(attacker, "bob", "pw"); w.Code != 429 || w.Header().Get("Retry-After") != "15" {
		t.Fatalf("45 s later: %d Retry-After %q, want 429 and 15", w.Code, w.Header().Get("Retry-After"))
	}
	now = now.Add(15 * time.Second)
	if w := try(attacker, "bob", "pw"); w.Code != 200 {
		t.Fatalf("after the window: %d, want 200", w.Code)
	}
	for i := 0; i < loginFailMax; i++ {
		try("[2001:db8::1]:5000", "bob", "nope")
	}
	if w := try("[2001:db8::2]:5000", "bob", "pw"); w.Code != 429 {
		t.Fatalf("the same IPv6 /64: %d, want 429", w.Code)
	}
	if w := try("[2001:db8:0:1::1]:5000", "bob", "pw"); w.Code != 200 {
		t.Fatalf("another IPv6 /64: %d, want 200", w.Code)
	}
}

// TestLoginGuardBounded: the failures of at most loginGuardMax addresses
// are kept, and bcrypt comparisons wait for a slot, giving up with their
// request's context.
func TestLoginGuardBounded(t *testing.T) {
	g := newLoginGuard()
	for i := 0; i < loginGuardMax+5; i++ {
		g.failed("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	if n := len(g.fails); n > loginGuardMax {
		t.Fatalf("%d addresses kept, want at most %d", n, loginGuardMax)
	}
	var held []func()
	for i := 0; i < cap(g.slots); i++ {
		release, err := g.slot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.slot(ctx); err == nil {
		t.Fatal("a slot beyond the limit was given")
	}
	var p passwordChecker
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if p.check(ctx, g, "bob", string(hash), "pw") {
		t.Fatal("a bcrypt comparison ran with every slot taken and its context over")
	}
	held[0]()
	if !p.check(context.Background(), g, "bob", string(hash), "pw") {
		t.Fatal("the right password refused with a slot free")
	}
}
