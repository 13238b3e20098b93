package app_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// browserRequired reports whether a missing browser (or Node.js, or the
// npm packages) must fail the browser tests instead of skipping them: in
// CI (CI=true) and wherever the real-Redis tier is required.
func browserRequired() bool {
	return os.Getenv("CI") == "true" || redistest.Required()
}

// browserTools finds node, the e2e directory with playwright-core
// installed, and the Chromium binary; it skips (or fails when required)
// naming what is missing and how to install it.
func browserTools(tb testing.TB) (node, dir, chromium string) {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir = filepath.Join(filepath.Dir(file), "..", "ui", "e2e")
	missing := func(what string) {
		msg := what + " (run scripts/install-chromium.sh, as make test does)"
		if browserRequired() {
			tb.Fatal("browser tests: " + msg)
		}
		tb.Skip("browser tests: " + msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing("server/ui/e2e/node_modules/playwright-core is not installed")
	}
	chromium = os.Getenv("CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser"} {
		if chromium != "" {
			break
		}
		chromium, _ = exec.LookPath(name)
	}
	if chromium == "" {
		missing("chromium is not on PATH")
	}
	if fi, err := os.Stat(chromium); err != nil || fi.IsDir() {
		missing("the browser " + chromium + " does not exist")
	}
	return node, dir, chromium
}

// screenshotDir is where the browser tests write their screenshots:
// $KAIROS_SCREENSHOTS, else a fresh temporary folder (kept). The tests
// print it.
func screenshotDir(tb testing.TB) string {
	if d := os.Getenv("KAIROS_SCREENSHOTS"); d != "" {
		return d
	}
	d, err := os.MkdirTemp("", "kairos-dashboard-screenshots-")
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// runBrowser runs the dashboard's e2e script with fixtures and returns the
// RESULTS object it prints last.
func runBrowser(tb testing.TB, fixtures map[string]any, extraEnv ...string) map[string]any {
	tb.Helper()
	return runBrowserScript(tb, "dashboard.test.mjs", fixtures, extraEnv...)
}

// runBrowserScript runs one script of server/ui/e2e with fixtures and
// returns the RESULTS object it prints last.
func runBrowserScript(tb testing.TB, script string, fixtures map[string]any, extraEnv ...string) map[string]any {
	tb.Helper()
	node, dir, chromium := browserTools(tb)
	shots := screenshotDir(tb)
	fx, _ := json.Marshal(fixtures)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KAIROS_E2E="+string(fx), "KAIROS_SCREENSHOTS="+shots, "CHROMIUM="+chromium)
	cmd.Env = append(cmd.Env, extraEnv...)
	out, err := cmd.CombinedOutput()
	var results map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "RESULTS "); ok {
			if jerr := json.Unmarshal([]byte(rest), &results); jerr != nil {
				tb.Errorf("bad RESULTS line %q: %v", rest, jerr)
			}
			continue
		}
		tb.Log(line)
	}
	tb.Logf("dashboard screenshots: %s", shots)
	if err != nil {
		tb.Fatalf("browser tests failed: %v (output above; screenshots in %s)", err, shots)
	}
	return results
}

// browserE2E is a running app with [Accounts] (basic auth on the admin
// listener, the dashboard included) on a real Redis, and a token.
type browserE2E struct {
	*kairos
	NS, Token, User, Password string
}

func startBrowserE2E(tb testing.TB) *browserE2E {
	tb.Helper()
	cfg := e2eRedisConfig(tb)()
	cfg.Accounts = map[string]string{"ops": "s3cret-pass"}
	cfg.Dashboard.RefreshSecond = 1
	k := startKairos(tb, cfg)
	e := &browserE2E{kairos: k, NS: "shop", User: "ops", Password: "s3cret-pass"}
	r := doHTTP(tb, http.MethodPost, k.Admin+"/token/"+e.NS+"?description=e2e", "", nil, e.basic())
	r.wantStatus(tb, http.StatusCreated)
	var out struct{ Token string }
	r.decode(tb, &out)
	e.Token = out.Token
	return e
}

func (e *browserE2E) basic() map[string]string {
	return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(e.User+":"+e.Password))}
}

func (e *browserE2E) publish(tb testing.TB, queue, query, body string, hdr map[string]string) string {
	tb.Helper()
	u := e.API + "/api/" + e.NS + "/" + queue
	if query != "" {
		u += "?" + query
	}
	r := doHTTP(tb, http.MethodPut, u, e.Token, []byte(body), hdr)
	r.wantStatus(tb, http.StatusCreated)
	var out struct {
		JobID string `json:"job_id"`
	}
	r.decode(tb, &out)
	return out.JobID
}

func (e *browserE2E) fixtures(extra map[string]any) map[string]any {
	m := map[string]any{"admin": e.Admin, "api": e.API, "ns": e.NS, "token": e.Token, "user": e.User, "password": e.Password}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// TestDashboardBrowser drives the dashboard in headless Chromium against a
// real server on a real redis-server, with basic auth on: jobs published
// through the API show in the queues table (which refreshes by itself),
// a job page, lookup by ID, the XSS case, dead-letter respawn and delete,
// job delete, pause and resume, a schedule's pause and delete, token
// create and revoke, the CSRF checks, destroy, and the audit page (the
// pause above is there with the account). The script checks the UI and, through the API, the effect
// of each action; this test checks what it reports back.
func TestDashboardBrowser(t *testing.T) {
	browserTools(t) // skip (or fail in CI) before starting anything
	e := startBrowserE2E(t)
	const queue = "orders"
	first := e.publish(t, queue, "", `{"order":1}`, nil)
	del := e.publish(t, queue, "", `{"order":2}`, nil)
	e.publish(t, queue, "", `{"order":3}`, nil)

	const xssBody = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`
	xss := e.publish(t, "xss", "", xssBody, map[string]string{"Enable-Job-Version": "YES", "Job-Attr-Note": "<b>bold</b>"})

	// Dead jobs (one try each, consumed with a 1 s TTR and not ACKed): two
	// in "failing" (respawn one, delete one), three in "failing-all"
	// (respawn all) and two in "failing-del" (delete all).
	const deadQueue = "failing"
	deadQueues := map[string]int{deadQueue: 2, "failing-all": 3, "failing-del": 2}
	for q, n := range deadQueues {
		for i := range n {
			e.publish(t, q, "tries=1", "will fail "+string(rune('a'+i)), nil)
		}
		r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+q+"?count=10&ttr=1", e.Token, nil, nil)
		r.wantStatus(t, http.StatusOK)
	}
	deadline := time.Now().Add(20 * time.Second)
	for q, n := range deadQueues {
		for {
			r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+q+"/deadletter/size", "", nil, nil)
			var out struct{ Size int }
			r.decode(t, &out)
			if out.Size == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: dead letter size %d after 20 s, want %d", q, out.Size, n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// 25 dead jobs in "dead-pages", nacked one after the other: the
	// dead letter shows the newest first, 20 a page, with a last page.
	var pagesDead []string
	for i := range 25 {
		e.publish(t, "dead-pages", "tries=1", "nacked "+strconv.Itoa(i), nil)
	}
	r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/dead-pages?count=25&ttr=600", e.Token, nil, map[string]string{"X-Kairos-Extensions": "1"})
	r.wantStatus(t, http.StatusOK)
	var consumed []struct {
		JobID   string `json:"job_id"`
		Receipt string `json:"receipt"`
	}
	r.decode(t, &consumed)
	for _, j := range consumed {
		doHTTP(t, http.MethodPut, e.API+"/api/"+e.NS+"/dead-pages/job/"+j.JobID+"/release?receipt="+j.Receipt, e.Token, nil, nil).wantStatus(t, http.StatusNoContent)
		pagesDead = append(pagesDead, j.JobID)
	}
	if len(pagesDead) != 25 {
		t.Fatalf("dead-pages: %d jobs consumed, want 25", len(pagesDead))
	}

	// Three jobs of "why" nacked with an error each by worker billing-1,
	// one after the other (issue #33): their job pages and the dead
	// letter show the errors, newest first; the page filters by error
	// and acts on a selection and on all that match.
	whyErrors := []string{"db timeout: orders-db:5432 refused", "card declined: insufficient funds", "db timeout: replica lag 30s"}
	var whyIDs []string
	for i, text := range whyErrors {
		e.publish(t, "why", "tries=1", "why "+strconv.Itoa(i), nil)
		r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/why?ttr=600", e.Token, nil, map[string]string{"X-Kairos-Extensions": "1", "X-Kairos-Worker": "billing-1"})
		r.wantStatus(t, http.StatusOK)
		var j struct {
			JobID   string `json:"job_id"`
			Receipt string `json:"receipt"`
		}
		r.decode(t, &j)
		body, _ := json.Marshal(map[string]string{"error": text + "\n\tat charge (billing.go:42)"})
		doHTTP(t, http.MethodPut, e.API+"/api/"+e.NS+"/why/job/"+j.JobID+"/release?receipt="+j.Receipt, e.Token, body,
			map[string]string{"Content-Type": "application/json"}).wantStatus(t, http.StatusNoContent)
		whyIDs = append(whyIDs, j.JobID)
	}

	// A delayed job, and an in-flight one (consumed, not ACKed).
	later := e.publish(t, "later", "delay=3600", "remind me", nil)
	busy := e.publish(t, "busy", "", "working on it", nil)
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/busy?ttr=600", e.Token, nil, nil)
	r.wantStatus(t, http.StatusOK)

	res := runBrowser(t, e.fixtures(map[string]any{
		"later_job": later, "busy_job": busy,
		"queue": queue, "ready": 3, "first_job": first, "delete_job": del,
		"xss_job": xss, "xss_body": xssBody, "dead_queue": deadQueue,
		"dead_pages_oldest": pagesDead[0], "dead_pages_newest": pagesDead[24], "dead_pages_21st": pagesDead[4],
		"why_ids": whyIDs, "why_errors": whyErrors,
	}))

	// The selection's effects: the newest "db timeout" job deleted, the
	// "card declined" one respawned (ready), the oldest still dead.
	doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/why/job/"+whyIDs[2], e.Token, nil, nil).wantStatus(t, http.StatusNotFound)
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/why/job/"+whyIDs[1], e.Token, nil, map[string]string{"X-Kairos-Extensions": "1"})
	r.wantStatus(t, http.StatusOK)
	if !strings.Contains(string(r.Body), `"state":"ready"`) {
		t.Errorf("the respawned job: %s", r.Body)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/why/deadletter/size", "", nil, nil)
	r.wantBody(t, `{"namespace":"`+e.NS+`","queue":"why","size":1}`)

	// The server-side effects of the UI's dead-letter actions.
	respawned, _ := res["respawned"].(string)
	deleted, _ := res["deleted"].(string)
	if respawned == "" || deleted == "" {
		t.Fatalf("the script reported no respawned or deleted job: %v", res)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+deadQueue+"/job/"+respawned, e.Token, nil, nil)
	r.wantStatus(t, http.StatusOK)
	if j := r.job(t); j.RemainTries != 1 {
		t.Errorf("respawned job: remain_tries %d, want 1", j.RemainTries)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+deadQueue+"/job/"+deleted, e.Token, nil, nil)
	r.wantStatus(t, http.StatusNotFound)
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+deadQueue+"/deadletter/size", "", nil, nil)
	r.wantBody(t, `{"namespace":"`+e.NS+`","queue":"`+deadQueue+`","size":0}`)
	for q, want := range map[string]string{"failing-all": "3", "failing-del": "0"} {
		r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+q+"/size", "", nil, nil)
		r.wantBody(t, `{"namespace":"`+e.NS+`","queue":"`+q+`","size":`+want+`}`)
		r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+q+"/deadletter/size", "", nil, nil)
		r.wantBody(t, `{"namespace":"`+e.NS+`","queue":"`+q+`","size":0}`)
	}
	// The schedule the UI paused and deleted is gone.
	if sched, _ := res["ui_schedule"].(string); sched != "cron-ui/nightly" {
		t.Errorf("the script reported no schedule step: %v", res)
	}
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/cron-ui/schedule/nightly", e.Token, nil, nil)
	r.wantStatus(t, http.StatusNotFound)
	// The token the UI created and revoked is refused.
	tok, _ := res["ui_token"].(string)
	r = doHTTP(t, http.MethodPut, e.API+"/api/"+e.NS+"/"+queue, tok, []byte("x"), nil)
	r.wantStatus(t, http.StatusUnauthorized)

	// The audit log, through the API: the page's pause by its account, and
	// no token value anywhere in it.
	r = doHTTP(t, http.MethodGet, e.Admin+"/audit?limit=500", "", nil, e.basic())
	r.wantStatus(t, http.StatusOK)
	if body := string(r.Body); strings.Contains(body, e.Token) || tok == "" || strings.Contains(body, tok) {
		t.Errorf("the audit log holds a token value: %s", body)
	}
	var audit struct {
		Entries []struct {
			Account, Route, Source string
			OK                     bool
			Target                 map[string]string
		}
	}
	r.decode(t, &audit)
	paused := false
	for _, en := range audit.Entries {
		if en.Route == "/ui/queue/:pool/:namespace/:queue/:action" && en.Target["action"] == "pause" &&
			en.Target["queue"] == queue && en.OK && en.Account == e.User && en.Source == "dashboard" {
			paused = true
		}
	}
	if !paused {
		t.Errorf("GET /audit has no dashboard pause of %s by %s: %+v", queue, e.User, audit.Entries)
	}
}
