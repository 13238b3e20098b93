package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestDashboardOverviewBrowser drives issue #33's overview and small
// defects in headless Chromium against a real server on a real
// redis-server: a queue with a backlog nobody consumes, one whose jobs
// die, one held at its max_in_flight and a paused one are listed as
// needing attention (the dying one appearing by live refresh); the queues table sorts by the oldest ready
// job and the rates; the charts end at the last complete point; the page
// says "stale" while Redis does not answer (CLIENT PAUSE) and "live"
// again after; every page fits 390 px; dark mode follows the system; the
// token list shows each token's scope; an unknown namespace is a 404 and
// a lookup says where it searched.
func TestDashboardOverviewBrowser(t *testing.T) {
	browserTools(t) // skip (or fail in CI) before starting anything
	e := startBrowserE2E(t)
	if e.Store.Addr == "" {
		t.Skip("needs the pool's Redis address (CLIENT PAUSE)")
	}
	// sms-send: 3 jobs published 10 minutes ago (their IDs say so), never
	// consumed.
	eng := e.App.Engines["default"]
	reqs := make([]*engine.PublishRequest, 3)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: e.NS, Queue: "sms-send", ID: engine.NewJobID(time.Now().Add(-10*time.Minute), 0, false),
			Body: []byte("sms"), Tries: 1, TTL: time.Hour}
	}
	ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
	eng.PublishEach(context.Background(), reqs, ids, errs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	e.publish(t, "orders", "", `{"order":1}`, nil)
	// throttled: max_in_flight 1, one of its 2 jobs in flight (TTR 10 min).
	r := doHTTP(t, http.MethodPut, e.Admin+"/queue/"+e.NS+"/throttled/config", "", []byte(`{"max_in_flight":1}`), e.basic())
	r.wantStatus(t, http.StatusOK)
	e.publish(t, "throttled", "", `{"x":1}`, nil)
	e.publish(t, "throttled", "", `{"x":2}`, nil)
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/throttled?ttr=600&timeout=0", e.Token, nil, nil)
	r.wantStatus(t, http.StatusOK)
	e.publish(t, "held", "", `{"x":1}`, nil)
	r = doHTTP(t, http.MethodPut, e.Admin+"/queue/"+e.NS+"/held/config", "", []byte(`{"paused":true}`), e.basic())
	r.wantStatus(t, http.StatusOK)
	// A token scoped to publishing to orders.
	r = doHTTP(t, http.MethodPost, e.Admin+"/token/"+e.NS+"?description=scoped&queues=orders&roles=publish", "", nil, e.basic())
	r.wantStatus(t, http.StatusCreated)

	res := runBrowserScript(t, "overview.test.mjs", e.fixtures(map[string]any{"redis": e.Store.Addr}))
	if res["ok"] != true {
		t.Fatalf("the script reported %v", res)
	}
	// The job the script made die is in the dead letter.
	r = doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/failing/deadletter", e.Token, nil, nil)
	r.wantStatus(t, http.StatusOK)
	var dl struct {
		Size int `json:"deadletter_size"`
	}
	if err := json.Unmarshal(r.Body, &dl); err != nil || dl.Size != 1 {
		t.Errorf("dead letter of failing: %s", r.Body)
	}
}
