package app_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/server/openapitest"
)

// TestAdminCrossSiteBrowser is issue #29's attack, in headless Chromium
// (server/ui/e2e/crosssite.test.mjs): a page on another loopback port (the
// same site, 127.0.0.1) and one under another name (localhost, another
// site) try every state-changing route of the admin listener, as
// doc/openapi.yaml lists them (the JSON API and the dashboard's forms),
// by HTML form and by fetch (no-cors and cors, credentials included),
// with a browser logged in to the dashboard (cached basic-auth
// credentials) and with one that is not; then a name that resolves to
// the admin listener tries them as same-origin (DNS rebinding). With and
// without [Accounts] (the dev default, where nothing else stands in the
// way). Nothing may change: no token (not the attacker's chosen one), no
// limit, queue setting, webhook, schedule, job or access-log switch.
func TestAdminCrossSiteBrowser(t *testing.T) {
	browserTools(t) // skip (or fail in CI) before starting anything
	for _, accounts := range []bool{true, false} {
		name := "without Accounts"
		if accounts {
			name = "with Accounts"
		}
		t.Run(name, func(t *testing.T) { testAdminCrossSiteBrowser(t, accounts) })
	}
}

func testAdminCrossSiteBrowser(t *testing.T, accounts bool) {
	cfg := e2eRedisConfig(t)()
	if accounts {
		cfg.Accounts = map[string]string{"ops": "s3cret-pass"}
	}
	k := startKairos(t, cfg)
	e := &browserE2E{kairos: k, NS: "shop", User: "ops", Password: "s3cret-pass"}
	r := doHTTP(t, http.MethodPost, k.Admin+"/token/shop?description=e2e", "", nil, e.basic())
	r.wantStatus(t, http.StatusCreated)
	var out struct{ Token string }
	r.decode(t, &out)
	e.Token = out.Token
	jobID := e.publish(t, "orders", "", `{"order":1}`, nil)
	e.publish(t, "orders", "", `{"order":2}`, nil)
	r = doHTTP(t, http.MethodPut, k.API+"/api/shop/orders/schedule/nightly?cron="+url.QueryEscape("30 2 * * *"), e.Token, []byte("report"), nil)
	r.wantStatus(t, http.StatusOK)

	// state is everything an attack could change, read through the API.
	state := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		get := func(name, u, token string, hdr map[string]string) {
			r := doHTTP(t, http.MethodGet, u, token, nil, hdr)
			// Without the clock's fields (elapsed_ms, ttl): only what an
			// attack could change.
			body := regexp.MustCompile(`"(elapsed_ms|ttl)":[0-9]+`).ReplaceAllString(string(r.Body), "")
			m[name] = strconv.Itoa(r.Status) + " " + body
		}
		// The tokens, without the controls the script makes from the
		// dashboard's own origin.
		r := doHTTP(t, http.MethodGet, k.Admin+"/token/shop", "", nil, e.basic())
		var list struct{ Tokens map[string]string }
		r.decode(t, &list)
		var toks []string
		for tok, desc := range list.Tokens {
			if desc != "control" {
				toks = append(toks, tok+"="+desc)
			}
		}
		slices.Sort(toks)
		m["tokens"] = strings.Join(toks, ",")
		get("limits", k.Admin+"/limits", "", e.basic())
		get("config", k.Admin+"/queue/shop/orders/config", "", e.basic())
		get("webhooks", k.Admin+"/webhooks", "", e.basic())
		get("accesslog", k.Admin+"/accesslog", "", nil)
		get("size", k.API+"/api/shop/orders/size", "", nil)
		get("dead", k.API+"/api/shop/orders/deadletter/size", "", nil)
		get("job", k.API+"/api/shop/orders/job/"+jobID, e.Token, nil)
		get("schedules", k.API+"/api/shop/orders/schedule", e.Token, nil)
		get("attacker token", k.API+"/api/shop/orders/peek", "attacker-chosen-token-000003", nil)
		return m
	}
	before := state()

	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!doctype html><title>a page of another site</title><body></body>"))
	}))
	t.Cleanup(attacker.Close)
	attackers := []string{attacker.URL, strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1)}

	attacks := stateChangingAdminRoutes(t, e, jobID)
	res := runBrowserScript(t, "crosssite.test.mjs", e.fixtures(map[string]any{
		"accounts": accounts, "attackers": attackers, "attacks": attacks,
	}))
	if n, _ := res["attempts"].(float64); int(n) < len(attacks)*4*len(attackers) {
		t.Errorf("the script made %v attempts, want at least %d", res["attempts"], len(attacks)*4*len(attackers))
	}
	if n, _ := res["controls"].(float64); n < 1 {
		t.Errorf("no control request from the dashboard's origin went through: %v", res)
	}
	answered, _ := res["answered"].(map[string]any)
	for label, v := range answered {
		if list, _ := v.([]any); len(list) > 0 {
			t.Errorf("%s: answered with success: %v", label, list)
		}
	}
	after := state()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("the attacks changed %s:\nbefore: %s\nafter:  %s", k, v, after[k])
		}
	}
}

// stateChangingAdminRoutes lists one attack per state-changing operation
// of the admin listener in doc/openapi.yaml (every action of the
// dashboard's action routes), with the form fields a real request would
// send: the attacker's chosen token, a matching CSRF cookie and field
// (the script plants the cookie where it can), a destroy confirmation...
func stateChangingAdminRoutes(t *testing.T, e *browserE2E, jobID string) []map[string]any {
	t.Helper()
	spec, err := openapitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	csrf := strings.Repeat("A", 43) // a well-formed value the attacker plants
	form := map[string]string{
		"_csrf": csrf, "description": "pwned", "token": "attacker-chosen-token-000003", "namespace": e.NS,
		"fingerprint": auth.Fingerprint(e.Token), "confirm": "orders", "backoff": "fixed:5s",
		"url": "http://127.0.0.1:9/hook", "name": "evil", "cron": "* * * * *", "body": "x",
	}
	actions := map[string][]string{
		"/ui/queue/{pool}/{namespace}/{queue}/{action}":           {"pause", "resume", "backoff", "destroy", "respawn-all", "delete-all", "webhook", "schedule", "unsubscribe"},
		"/ui/job/{pool}/{namespace}/{queue}/{job_id}/{action}":    {"delete", "respawn", "delete-dead"},
		"/ui/schedule/{pool}/{namespace}/{queue}/{name}/{action}": {"pause", "resume", "delete"},
	}
	var attacks []map[string]any
	var templates []string
	for template := range spec.Paths.Map() {
		templates = append(templates, template)
	}
	slices.Sort(templates)
	for _, template := range templates {
		for method, op := range spec.Paths.Find(template).Operations() {
			if !slices.Contains(op.Tags, openapitest.Admin) || method == http.MethodGet || method == http.MethodHead ||
				method == http.MethodOptions || method == http.MethodTrace || strings.HasPrefix(template, "/debug/pprof/") {
				continue
			}
			acts := actions[template]
			if acts == nil {
				acts = []string{""}
			}
			for _, act := range acts {
				path := strings.NewReplacer("{namespace}", e.NS, "{queue}", "orders", "{token}", e.Token, "{job_id}", jobID,
					"{pool}", "default", "{action}", act, "{name}", "nightly").Replace(template)
				switch template {
				case "/accesslog":
					path += "?status=disable"
				case "/token/{namespace}":
					path += "?description=pwned&token=attacker-chosen-token-000003"
				}
				attacks = append(attacks, map[string]any{
					"method": method, "path": path, "form": form,
					"json": `{"read":1,"write":1,"interval":1,"paused":true,"url":"http://127.0.0.1:9/hook"}`,
				})
			}
		}
	}
	if len(attacks) < 20 {
		t.Fatalf("only %d state-changing admin routes in doc/openapi.yaml", len(attacks))
	}
	return attacks
}
