package app_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestE2EFullPool: a tenant fills the pool's Redis (maxmemory 8mb,
// noeviction) with 4 KB jobs. The publish Redis refuses answers 507
// {"error":"pool default is full"} without Retry-After, never the 503 of an
// outage, on the event loops and on net/http (a bulk publish); /readyz stays
// 200 and says "full"; every stored job is consumed and ACKed, the first
// half of them in a Redis still full; then publishing works again and
// /readyz says "ok".
func TestE2EFullPool(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{Extra: []string{"maxmemory 8mb", "maxmemory-policy noeviction"}})
	k := startKairos(t, redisConfig(rs.Addr))
	e := &e2e{kairos: k, Redis: rs, NS: "noisy", Token: k.newToken(t, "noisy")}
	body := []byte(strings.Repeat("x", 4096))

	var ids []string
	var refused *response
	for len(ids) < 100000 {
		r := e.do(t, http.MethodPut, "q", "ttl=3600", body, nil)
		if r.Status != http.StatusCreated {
			refused = r
			break
		}
		var out struct {
			JobID string `json:"job_id"`
		}
		r.decode(t, &out)
		ids = append(ids, out.JobID)
	}
	if refused == nil || len(ids) < 100 {
		t.Fatalf("published %d jobs of 4 KB into 8 MB, last answer %v", len(ids), refused)
	}
	// Memory hovers at the limit (a request's own buffers come and go):
	// lower maxmemory to half of what Redis holds, so that it stays full
	// for the refusals below and for the first half of the drain.
	rc := rs.Client()
	info := rc.Info(context.Background(), "memory").Val()
	used := int64(0)
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 {
		t.Fatalf("no used_memory in %q", info)
	}
	if err := rc.ConfigSet(context.Background(), "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	const full = `{"error":"pool default is full"}`
	for _, r := range []*response{
		refused,
		e.do(t, http.MethodPut, "q", "delay=60", body, nil),
		e.do(t, http.MethodPut, "q", "", body, map[string]string{"Idempotency-Key": "k1"}),
		e.do(t, http.MethodPut, "q/bulk", "", []byte(`["`+strings.Repeat("y", 4096)+`","z"]`), nil),
	} {
		r.wantStatus(t, http.StatusInsufficientStorage)
		r.wantBody(t, full)
		if ra := r.Header.Get("Retry-After"); ra != "" {
			t.Errorf("%v: Retry-After %q on a full pool", r, ra)
		}
	}
	waitReadyBody(t, e.API, `{"ready":true,"checks":{"admin redis":"full","pool default":"full"}}`)
	// Each refusal is counted by reason (the single publishes on the
	// event loops, the bulk one on net/http).
	if n := e.metricValue(t, "kairos_publish_refused_total", `reason="pool_full"`); n < 4 {
		t.Errorf("kairos_publish_refused_total{reason=\"pool_full\"} = %v after 4 refusals", n)
	}
	if r := doHTTP(t, http.MethodGet, e.Admin+"/ui/", "", nil, nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "data-pool-full") {
		t.Fatalf("dashboard overview of a full pool: %v, want the pool marked full", r)
	}

	// Drain: every job stored is consumed and ACKed.
	stored := make(map[string]bool, len(ids))
	for _, id := range ids {
		stored[id] = true
	}
	for i := range ids {
		if i == len(ids)/4 {
			// Still full: the drain so far ran in a full Redis.
			e.do(t, http.MethodPut, "q", "", body, nil).wantStatus(t, http.StatusInsufficientStorage)
		}
		j := e.consume(t, "q", "ttr=60")
		if !stored[j.JobID] {
			t.Fatalf("consumed %s: not published, or twice", j.JobID)
		}
		delete(stored, j.JobID)
		e.ack(t, "q", j.JobID)
	}
	e.wantNoJob(t, "q", "")
	e.publish(t, "q", "", string(body))
	waitReadyBody(t, e.API, `{"ready":true,"checks":{"admin redis":"ok","pool default":"ok"}}`)
	if r := doHTTP(t, http.MethodGet, e.Admin+"/ui/", "", nil, nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), "data-pool-full") {
		t.Fatalf("dashboard overview after the drain: %v, want the pool no longer marked full", r)
	}
}

// waitReadyBody polls base+/readyz until it answers 200 with body want.
func waitReadyBody(tb testing.TB, base, want string) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := readyz(tb, base)
		if r.Status == http.StatusOK && string(r.Body) == want {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("/readyz did not answer 200 %s within 5s; last: %v", want, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
