package app_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestE2EHistoryTwoServers: two kairos servers on one real Redis (a
// cluster under TestE2ECluster), traffic
// through both public APIs; each flushes its own counts every 5 s and the
// admin /history of either shows the sum, for the queue, the namespace and
// the deployment.
func TestE2EHistoryTwoServers(t *testing.T) {
	cfg := e2eRedisConfig(t)
	a := startKairos(t, cfg())
	b := startKairos(t, cfg())
	token := a.newToken(t, "hist")
	for i, k := range []*kairos{a, b, a, b, b} {
		r := doHTTP(t, http.MethodPut, k.API+"/api/hist/q?tries=1", token, []byte("job"), nil)
		r.wantStatus(t, http.StatusCreated)
		if i%2 == 1 {
			r := doHTTP(t, http.MethodGet, k.API+"/api/hist/q?ttr=30", token, nil, nil)
			r.wantStatus(t, http.StatusOK)
			j := r.job(t)
			doHTTP(t, http.MethodDelete, k.API+"/api/hist/q/job/"+j.JobID, token, nil, nil).wantStatus(t, http.StatusNoContent)
		}
	}
	type series struct {
		Published, Consumed, Acked []int64
	}
	sum := func(xs []int64) (n int64) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, path := range []string{"/history/hist/q", "/history/hist", "/history"} {
		for {
			var s series
			r := doHTTP(t, http.MethodGet, b.Admin+path+"?range=15m", "", nil, nil)
			r.wantStatus(t, http.StatusOK)
			r.decode(t, &s)
			if sum(s.Published) == 5 && sum(s.Consumed) == 2 && sum(s.Acked) == 2 {
				break
			}
			if time.Now().After(deadline) || sum(s.Published) > 5 {
				t.Fatalf("%s: published %d consumed %d acked %d, want 5, 2, 2 from both servers", path, sum(s.Published), sum(s.Consumed), sum(s.Acked))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	r := doHTTP(t, http.MethodGet, a.Admin+"/queues/hist", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	if !strings.Contains(string(r.Body), `"queue":"q","ready":3,`) {
		t.Errorf("queues of hist: %s", r.Body)
	}
}
