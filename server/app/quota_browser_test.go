package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestDashboardQuotaBrowser drives the dashboard's quota views in headless
// Chromium against a real server on a real redis-server (issue #31): a
// namespace given a quota of 2 jobs is published to until the quota
// refuses; the overview and the namespace's page show it at its quota,
// marked full, and both follow when its consumers make room. A namespace
// without a quota shows its usage and no limit.
func TestDashboardQuotaBrowser(t *testing.T) {
	browserTools(t) // skip (or fail in CI) before starting anything
	e := startBrowserE2E(t)
	const queue, maxJobs = "orders", 2
	r := doHTTP(t, http.MethodPut, e.Admin+"/quota/"+e.NS, "", []byte(`{"max_jobs":2}`), e.basic())
	r.wantStatus(t, http.StatusOK)
	// Publish until the quota refuses: the first publishes may pass
	// before the quota reaches the engine's view (its refresh interval),
	// so the held count is read back, not assumed.
	for i := 0; ; i++ {
		r = doHTTP(t, http.MethodPut, e.API+"/api/"+e.NS+"/"+queue, e.Token, []byte(`{"order":1}`), nil)
		if r.Status == http.StatusTooManyRequests {
			break
		}
		r.wantStatus(t, http.StatusCreated)
		if i > 100 {
			t.Fatal("100 publishes, none refused by a quota of 2 jobs")
		}
	}
	r = doHTTP(t, http.MethodGet, e.Admin+"/quota/"+e.NS, "", nil, e.basic())
	r.wantStatus(t, http.StatusOK)
	var q struct{ Jobs int64 }
	if err := json.Unmarshal(r.Body, &q); err != nil || q.Jobs < maxJobs {
		t.Fatalf("GET /quota/%s: %s", e.NS, r.Body)
	}
	other := k2Token(t, e, "quiet")
	doHTTP(t, http.MethodPut, e.API+"/api/quiet/q", other, []byte("hello"), nil).wantStatus(t, http.StatusCreated)

	res := runBrowserScript(t, "quota.test.mjs", e.fixtures(map[string]any{
		"queue": queue, "max_jobs": maxJobs, "jobs": q.Jobs, "other_ns": "quiet",
	}))
	if res["ok"] != true {
		t.Fatalf("the script reported %v", res)
	}
}

// k2Token creates a token of namespace ns with the e2e account.
func k2Token(t *testing.T, e *browserE2E, ns string) string {
	t.Helper()
	r := doHTTP(t, http.MethodPost, e.Admin+"/token/"+ns+"?description=e2e", "", nil, e.basic())
	r.wantStatus(t, http.StatusCreated)
	var out struct{ Token string }
	r.decode(t, &out)
	return out.Token
}
