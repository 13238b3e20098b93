package app_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// dashDo sends a request to an admin URL with the browser E2E's basic
// auth (none when auth is false) and returns status, headers and body;
// redirects are not followed, and the exchange is validated against
// doc/openapi.yaml.
func dashDo(t *testing.T, e *browserE2E, method, u string, auth bool, form url.Values, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.Admin+u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth {
		req.SetBasicAuth(e.User, e.Password)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Transport: openapiTransport, // validated against doc/openapi.yaml
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestDashboardHTTP checks the dashboard's protections over real HTTP,
// without a browser: basic auth, the security headers, escaping in the
// server-rendered pages, the CSRF refusals, and the config switch.
func TestDashboardHTTP(t *testing.T) {
	e := startBrowserE2E(t)
	xss := e.publish(t, "q1", "", `<script>alert(1)</script>`, nil)
	// A queue of 4 shards (checked at the end).
	r := doHTTP(t, http.MethodPut, e.Admin+"/queue/"+e.NS+"/hot/config", "", []byte(`{"shards":4}`), e.basic())
	r.wantBody(t, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4}`)
	for i := 0; i < 12; i++ {
		e.publish(t, "hot", "", "x", nil)
	}

	if st, h, _ := dashDo(t, e, "GET", "/ui/", false, nil, nil); st != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("GET /ui/ without basic auth: %d %v, want 401 with WWW-Authenticate", st, h)
	}
	if st, _, _ := dashDo(t, e, "GET", "/ui/static/app.js", false, nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("GET /ui/static/app.js without basic auth: %d, want 401", st)
	}
	if st, h, _ := dashDo(t, e, "GET", "/ui", true, nil, nil); st != http.StatusMovedPermanently || h.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %v, want 301 to /ui/", st, h)
	}
	st, h, body := dashDo(t, e, "GET", "/ui/", true, nil, nil)
	if st != http.StatusOK {
		t.Fatalf("GET /ui/: %d %s", st, body)
	}
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q allows unsafe sources", csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
		t.Errorf("security headers missing: %v", h)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " on") && strings.Contains(body, "onclick") {
		t.Errorf("overview has inline script:\n%s", body)
	}
	var csrf string
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "kairos_csrf" {
			csrf = c.Value
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("CSRF cookie %+v: want HttpOnly, SameSite=Strict", c)
			}
		}
	}
	if len(csrf) != 43 {
		t.Fatalf("no CSRF cookie in %v", h)
	}

	// A job body is escaped in the page.
	st, _, body = dashDo(t, e, "GET", "/ui/job/default/"+e.NS+"/q1/"+xss, true, nil, nil)
	if st != http.StatusOK || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(body, "<script>alert") {
		t.Fatalf("job page: %d, body not escaped:\n%s", st, body)
	}
	st, _, body = dashDo(t, e, "GET", "/ui/job/default/"+e.NS+"/q1/nope", true, nil, nil)
	if st != http.StatusNotFound || !strings.Contains(body, "job nope not found") {
		t.Fatalf("unknown job: %d %s", st, body)
	}
	st, _, _ = dashDo(t, e, "GET", "/ui/queue/default/"+e.NS+"/bad%20name", true, nil, nil)
	if st != http.StatusBadRequest {
		t.Fatalf("bad queue name: %d, want 400", st)
	}
	st, _, _ = dashDo(t, e, "GET", "/ui/ns/nopool/"+e.NS, true, nil, nil)
	if st != http.StatusNotFound {
		t.Fatalf("unknown pool: %d, want 404", st)
	}

	// CSRF: a POST needs the cookie and the same token in the form.
	pause := "/ui/queue/default/" + e.NS + "/q1/pause"
	cookie := map[string]string{"Cookie": "kairos_csrf=" + csrf}
	for name, tc := range map[string]struct {
		form url.Values
		hdr  map[string]string
	}{
		"no token":      {url.Values{}, cookie},
		"wrong token":   {url.Values{"_csrf": {strings.Repeat("A", 43)}}, cookie},
		"no cookie":     {url.Values{"_csrf": {csrf}}, nil},
		"other origin":  {url.Values{"_csrf": {csrf}}, map[string]string{"Cookie": "kairos_csrf=" + csrf, "Origin": "http://evil.example"}},
		"cross-site":    {url.Values{"_csrf": {csrf}}, map[string]string{"Cookie": "kairos_csrf=" + csrf, "Sec-Fetch-Site": "cross-site"}},
		"no basic auth": {url.Values{"_csrf": {csrf}}, cookie},
	} {
		st, _, _ := dashDo(t, e, "POST", pause, name != "no basic auth", tc.form, tc.hdr)
		want := http.StatusForbidden
		if name == "no basic auth" {
			want = http.StatusUnauthorized
		}
		if st != want {
			t.Errorf("POST pause, %s: %d, want %d", name, st, want)
		}
	}
	r = doHTTP(t, http.MethodGet, e.Admin+"/queue/"+e.NS+"/q1/config", "", nil, e.basic())
	r.wantBody(t, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`)
	st, h, _ = dashDo(t, e, "POST", pause, true, url.Values{"_csrf": {csrf}}, cookie)
	if st != http.StatusSeeOther || h.Get("Location") != "/ui/queue/default/"+e.NS+"/q1" {
		t.Fatalf("POST pause with the token: %d %v, want 303 to the queue page", st, h)
	}
	r = doHTTP(t, http.MethodGet, e.Admin+"/queue/"+e.NS+"/q1/config", "", nil, e.basic())
	r.wantBody(t, `{"backoff":"none","dead_ttl_ms":0,"paused":true,"shards":1}`)

	// Backoff policy and webhook forms.
	post := func(action string, form url.Values) (int, string) {
		t.Helper()
		form.Set("_csrf", csrf)
		st, h, _ := dashDo(t, e, "POST", "/ui/queue/default/"+e.NS+"/q1/"+action, true, form, cookie)
		var flash string
		for _, c := range (&http.Response{Header: h}).Cookies() {
			if c.Name == "kairos_flash" {
				flash, _ = url.QueryUnescape(c.Value)
			}
		}
		return st, flash
	}
	if st, flash := post("backoff", url.Values{"backoff": {"fixed:5s"}}); st != http.StatusSeeOther || flash != "obackoff policy set" {
		t.Fatalf("set backoff: %d %q", st, flash)
	}
	// The message an action leaves is for the page, not for a live refresh.
	_, flashCookie := post("backoff", url.Values{"backoff": {"fixed:5s"}})
	flashHdr := map[string]string{"Cookie": "kairos_csrf=" + csrf + "; kairos_flash=" + url.QueryEscape(flashCookie), "X-Kairos-Live": "1"}
	_, h, body = dashDo(t, e, "GET", "/ui/queue/default/"+e.NS+"/q1", true, nil, flashHdr)
	if strings.Contains(body, `id="flash"`) || strings.Contains(h.Get("Set-Cookie"), "kairos_flash") {
		t.Errorf("a live refresh took the flash message: %v", h)
	}
	delete(flashHdr, "X-Kairos-Live")
	_, h, body = dashDo(t, e, "GET", "/ui/queue/default/"+e.NS+"/q1", true, nil, flashHdr)
	if !strings.Contains(body, `id="flash">backoff policy set<`) || !strings.Contains(h.Get("Set-Cookie"), "kairos_flash=;") {
		t.Errorf("the page did not show and clear the flash message: %v", h)
	}
	if st, flash := post("backoff", url.Values{"backoff": {"sometimes"}}); st != http.StatusSeeOther || !strings.HasPrefix(flash, "e") {
		t.Fatalf("set a bad backoff: %d %q, want an error flash", st, flash)
	}
	r = doHTTP(t, http.MethodGet, e.Admin+"/queue/"+e.NS+"/q1/config", "", nil, e.basic())
	r.wantBody(t, `{"backoff":"fixed:5s","dead_ttl_ms":0,"paused":true,"shards":1}`)
	if st, flash := post("webhook", url.Values{"url": {"http://127.0.0.1:9/hook"}, "secret": {"shh"}, "concurrency": {"2"}}); st != http.StatusSeeOther || flash != "owebhook subscribed" {
		t.Fatalf("subscribe: %d %q", st, flash)
	}
	r = doHTTP(t, http.MethodGet, e.Admin+"/webhook/"+e.NS+"/q1", "", nil, e.basic())
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"url":"http://127.0.0.1:9/hook"`) || !strings.Contains(string(r.Body), `"concurrency":2`) {
		t.Fatalf("webhook after subscribe: %v", r)
	}
	_, _, body = dashDo(t, e, "GET", "/ui/queue/default/"+e.NS+"/q1", true, nil, cookie)
	if !strings.Contains(body, "http://127.0.0.1:9/hook") || strings.Contains(body, "shh") {
		t.Fatalf("queue page: want the webhook URL and never its secret:\n%s", body)
	}
	if st, flash := post("unsubscribe", url.Values{}); st != http.StatusSeeOther || flash != "owebhook removed" {
		t.Fatalf("unsubscribe: %d %q", st, flash)
	}
	r = doHTTP(t, http.MethodGet, e.Admin+"/webhook/"+e.NS+"/q1", "", nil, e.basic())
	if r.Status != http.StatusNotFound {
		t.Fatalf("webhook after unsubscribe: %v", r)
	}

	// A sharded queue (issue #22 item 5) is one queue on the pages, its
	// shards shown on its page.
	if _, _, body = dashDo(t, e, "GET", "/ui/queue/default/"+e.NS+"/q1", true, nil, cookie); !strings.Contains(body, `id="q-shards">1<`) {
		t.Fatalf("queue page of an unsharded queue: no shards 1")
	}
	_, _, body = dashDo(t, e, "GET", "/ui/queue/default/"+e.NS+"/hot", true, nil, cookie)
	if !strings.Contains(body, `id="q-shards">4<`) || !strings.Contains(body, `id="q-ready">12<`) {
		t.Fatalf("queue page of a queue of 4 shards: want shards 4 and 12 ready:\n%s", body)
	}
	_, _, body = dashDo(t, e, "GET", "/ui/ns/default/"+e.NS, true, nil, cookie)
	if !strings.Contains(body, "hot") || strings.Contains(body, "hot~") {
		t.Fatalf("namespace page: want the queue hot and none of its shards:\n%s", body)
	}
}

// TestDashboardDisabled: [Dashboard] Enabled = false leaves /ui/ to the
// admin API's 404.
func TestDashboardDisabled(t *testing.T) {
	rs := redistest.Start(t)
	cfg := redisConfig(rs.Addr)
	off := false
	cfg.Dashboard.Enabled = &off
	k := startKairos(t, cfg)
	for _, p := range []string{"/ui/", "/ui/static/app.js", "/ui/tokens"} {
		r := doHTTP(t, http.MethodGet, k.Admin+p, "", nil, nil)
		r.wantStatus(t, http.StatusNotFound)
		r.wantBody(t, `{"error":"api not found"}`)
	}
}

// TestDashboardHashedTokens: with HashTokens the tokens page lists
// fingerprints (the server has nothing more), revokes by fingerprint, and
// a token created from the page is shown once.
func TestDashboardHashedTokens(t *testing.T) {
	rs := redistest.Start(t)
	cfg := redisConfig(rs.Addr)
	cfg.Kairos.HashTokens = true
	cfg.Accounts = map[string]string{"ops": "pw"}
	e := &browserE2E{kairos: startKairos(t, cfg), NS: "hx", User: "ops", Password: "pw"}
	r := doHTTP(t, http.MethodPost, e.Admin+"/token/hx?description=api-made", "", nil, e.basic())
	r.wantStatus(t, http.StatusCreated)
	var out struct{ Token string }
	r.decode(t, &out)
	fp := auth.Fingerprint(out.Token)

	st, h, body := dashDo(t, e, "GET", "/ui/tokens?pool=default&namespace=hx", true, nil, nil)
	if st != http.StatusOK || !strings.Contains(body, `data-fingerprint="`+fp+`"`) || strings.Contains(body, out.Token) {
		t.Fatalf("tokens page: %d; want the fingerprint %s and never the token:\n%s", st, fp, body)
	}
	if !strings.Contains(body, "this server stores them hashed") {
		t.Error("tokens page does not say tokens are stored hashed")
	}
	var csrf string
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "kairos_csrf" {
			csrf = c.Value
		}
	}
	cookie := map[string]string{"Cookie": "kairos_csrf=" + csrf}

	// Create: post/redirect/get. The answer is a 303 to the page that
	// shows the token, once; reloading that page shows nothing and creates
	// nothing; the list then shows its fingerprint only.
	st, h, body = dashDo(t, e, "POST", "/ui/tokens/create?pool=default", true,
		url.Values{"_csrf": {csrf}, "namespace": {"hx"}, "description": {"ui-made"}, "roles": {"consume"}, "queues": {"a,b"}}, cookie)
	if st != http.StatusSeeOther || h.Get("Location") != "/ui/tokens/created" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d %v %s, want 303 to /ui/tokens/created, no-store", st, h, body)
	}
	var oneShot string
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "kairos_new_token" {
			oneShot = c.Value
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/tokens/created" {
				t.Errorf("new-token cookie %+v: want HttpOnly, SameSite=Strict, Path /ui/tokens/created", c)
			}
		}
	}
	st, h, body = dashDo(t, e, "GET", "/ui/tokens/created", true, nil, map[string]string{"Cookie": "kairos_csrf=" + csrf + "; kairos_new_token=" + oneShot})
	if st != http.StatusOK || h.Get("Cache-Control") != "no-store" || !strings.Contains(h.Get("Set-Cookie"), "kairos_new_token=;") {
		t.Fatalf("created page: %d %v, want 200, no-store, the cookie cleared", st, h)
	}
	if st, _, again := dashDo(t, e, "GET", "/ui/tokens/created", true, nil, cookie); st != http.StatusNotFound || strings.Contains(again, `id="new-token"`) {
		t.Fatalf("reloaded created page: %d, want 404 without a token:\n%s", st, again)
	}
	if _, _, list := dashDo(t, e, "GET", "/ui/tokens?pool=default&namespace=hx", true, nil, cookie); strings.Count(list, `<td class="desc">ui-made</td>`) != 1 {
		t.Fatalf("want exactly one token ui-made after a create and a reload:\n%s", list)
	}
	i := strings.Index(body, `<pre class="token" id="new-token">`)
	if i < 0 {
		t.Fatalf("create: no token shown:\n%s", body)
	}
	newTok := body[i+len(`<pre class="token" id="new-token">`):]
	newTok = newTok[:strings.Index(newTok, "<")]
	if len(newTok) != 26 {
		t.Fatalf("new token %q", newTok)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/hx/a/peek", newTok, nil, nil)
	r.wantStatus(t, http.StatusNotFound) // the token works (queue empty)
	_, _, body = dashDo(t, e, "GET", "/ui/tokens?pool=default&namespace=hx", true, nil, cookie)
	if strings.Contains(body, newTok) || !strings.Contains(body, auth.Fingerprint(newTok)) {
		t.Fatalf("list after create shows the token or lacks its fingerprint:\n%s", body)
	}

	// Revoke the API-made token by fingerprint.
	st, h, _ = dashDo(t, e, "POST", "/ui/tokens/revoke?pool=default", true, url.Values{"_csrf": {csrf}, "namespace": {"hx"}, "fingerprint": {fp}}, cookie)
	if st != http.StatusSeeOther {
		t.Fatalf("revoke: %d", st)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/hx/a/peek", out.Token, nil, nil)
	r.wantStatus(t, http.StatusUnauthorized)
	// A revoke of something that is not a fingerprint does nothing.
	st, h, _ = dashDo(t, e, "POST", "/ui/tokens/revoke?pool=default", true, url.Values{"_csrf": {csrf}, "namespace": {"hx"}, "fingerprint": {newTok}}, cookie)
	if st != http.StatusSeeOther || h.Get("Location") != "/ui/tokens?namespace=hx&pool=default" {
		t.Fatalf("revoke by token: %d %v", st, h)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/hx/a/peek", newTok, nil, nil)
	r.wantStatus(t, http.StatusNotFound)
}
