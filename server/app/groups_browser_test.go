package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestDashboardGroupsBrowser drives the queue page's groups panel (issue
// #32) in headless Chromium: a queue with group_max_in_flight 2 and two
// groups shows ready and in flight per group, biggest first, and the
// limit; when consumers take more, the live refresh shows both groups at
// their limit; a grouped job's page names its group.
func TestDashboardGroupsBrowser(t *testing.T) {
	browserTools(t) // skip (or fail in CI) before starting anything
	e := startBrowserE2E(t)
	const queue = "exports"
	doHTTP(t, http.MethodPut, e.Admin+"/queue/"+e.NS+"/"+queue+"/config", "", []byte(`{"group_max_in_flight":2}`), e.basic()).wantStatus(t, http.StatusOK)
	for range 5 {
		e.publish(t, queue, "group=acct-1", `{"report":1}`, nil)
	}
	for range 2 {
		e.publish(t, queue, "group=acct-2", `{"report":2}`, nil)
	}
	// Two consumes: one job of each group, in turn.
	var held string
	for i := range 2 {
		r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+queue+"?ttr=600&timeout=0", e.Token, nil, nil)
		r.wantStatus(t, http.StatusOK)
		var j struct {
			JobID string `json:"job_id"`
			Group string `json:"group"`
		}
		if err := json.Unmarshal(r.Body, &j); err != nil || j.Group == "" {
			t.Fatalf("consume %d: %s", i, r.Body)
		}
		held = j.JobID
	}
	res := runBrowserScript(t, "groups.test.mjs", e.fixtures(map[string]any{"queue": queue, "held": held}))
	if res["ok"] != true {
		t.Fatalf("the script reported %v", res)
	}
}
