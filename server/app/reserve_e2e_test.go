package app_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestE2EReserve is issue #31's scenario over HTTP, on a real redis-server
// (maxmemory 32mb, noeviction) and the default reserve (the last 10 %), with
// the event loops on and off: namespace noisy publishes 4 KB delayed jobs
// from 8 clients until refused, each refusal the 507 of a full pool,
// answered by the event loops or net/http as configured and counted in
// kairos_publish_refused_total{reason="pool_full"}; /readyz stays 200
// and reads "reserve", and the dashboard marks the pool; then namespace
// quiet publishes 200 jobs of 4 KB, consumes and ACKs them all, while
// noisy's publishes (single and bulk) are still refused, before its rate
// limit (no round trip to the admin Redis).
func TestE2EReserve(t *testing.T) {
	for _, tc := range []struct {
		name     string
		loops    int
		servedBy string
	}{
		{"loops on", 2, "loop"},
		{"loops off", -1, "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.StartWith(t, redistest.Options{Extra: []string{"maxmemory 32mb", "maxmemory-policy noeviction"}})
			cfg := redisConfig(rs.Addr)
			cfg.Kairos.EventLoops = tc.loops
			k := startKairos(t, cfg)
			noisy := &e2e{kairos: k, Redis: rs, NS: "noisy", Token: k.newToken(t, "noisy")}
			quiet := &e2e{kairos: k, Redis: rs, NS: "quiet", Token: k.newToken(t, "quiet")}
			body := []byte(strings.Repeat("x", 4096))
			const full = `{"error":"pool default is full"}`

			var wg sync.WaitGroup
			var mu sync.Mutex
			published := 0
			refused := make([]*response, 8)
			for i := range refused {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; n < 100000; n++ {
						r := noisy.do(t, http.MethodPut, "q", "delay=3600&ttl=7200", body, nil)
						if r.Status != http.StatusCreated {
							refused[i] = r
							return
						}
						mu.Lock()
						published++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if published < 1000 {
				t.Fatalf("noisy published only %d jobs of 4 KB into 32 MB", published)
			}
			for _, r := range refused {
				r.wantStatus(t, http.StatusInsufficientStorage)
				r.wantBody(t, full)
				if ra := r.Header.Get("Retry-After"); ra != "" {
					t.Errorf("%v: Retry-After %q on a pool in its reserve", r, ra)
				}
			}
			// Refused by the reserve, not by Redis: there is room left.
			used, max := memoryOf(t, rs)
			t.Logf("noisy: %d jobs published, refused at %d of %d bytes (%.1f%%)", published, used, max, 100*float64(used)/float64(max))
			if used >= max {
				t.Fatalf("noisy was refused by a full Redis (%d of %d bytes), not by the reserve", used, max)
			}
			if n := noisy.metricValue(t, "kairos_http_responses", `code="507"`, `method="PUT"`, `served_by="`+tc.servedBy+`"`); n < 8 {
				t.Errorf("kairos_http_responses{code=507,served_by=%s} = %v, want the 8 refusals", tc.servedBy, n)
			}
			if n := noisy.metricValue(t, "kairos_publish_refused_total", `namespace="noisy"`, `reason="pool_full"`); n < 8 {
				t.Errorf("kairos_publish_refused_total{namespace=noisy,reason=pool_full} = %v, want the 8 refusals", n)
			}
			waitReadyBody(t, noisy.API, `{"ready":true,"checks":{"admin redis":"ok","pool default":"reserve"}}`)
			if r := doHTTP(t, http.MethodGet, noisy.Admin+"/ui/", "", nil, nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "data-pool-reserve") {
				t.Fatalf("dashboard overview of a pool in its reserve: %v, want the pool marked", r)
			}

			// quiet publishes, consumes and ACKs 200 jobs of 4 KB.
			for i := 0; i < 200; i++ {
				if r := quiet.do(t, http.MethodPut, "q", "", body, nil); r.Status != http.StatusCreated {
					t.Fatalf("quiet's publish %d: %v", i+1, r)
				}
			}
			for _, r := range []*response{
				noisy.do(t, http.MethodPut, "q", "", body, nil),
				noisy.do(t, http.MethodPut, "q/bulk", "", []byte(`["a","b"]`), nil),
			} {
				r.wantStatus(t, http.StatusInsufficientStorage)
				r.wantBody(t, full)
			}
			// Refused before the rate limit: with a limit on noisy's token,
			// its refused publishes still answer the 507, and never reach
			// the admin Redis (the limit's bucket is never made), as they
			// did before the reserve's refusal moved into admission.
			noisy.admin(t, http.MethodPost, "/token/noisy/"+noisy.Token+"/limit", `{"read":0,"write":1,"interval":60}`).wantStatus(t, http.StatusCreated)
			// Adding the limit wrote its buckets; a request the limit
			// judged would write them again.
			if keys := rs.Client().Keys(t.Context(), "tb/*").Val(); len(keys) > 0 {
				rs.Client().Del(t.Context(), keys...)
			}
			for _, r := range []*response{
				noisy.do(t, http.MethodPut, "q", "", body, nil),
				noisy.do(t, http.MethodPut, "q", "", body, nil),
				noisy.do(t, http.MethodPut, "q/bulk", "", []byte(`["a","b"]`), nil),
			} {
				r.wantStatus(t, http.StatusInsufficientStorage)
				r.wantBody(t, full)
			}
			if keys := rs.Client().Keys(t.Context(), "tb/*").Val(); len(keys) != 0 {
				t.Errorf("rate-limit buckets %v after publishes the reserve refused: the rate limit ran", keys)
			}
			for i := 0; i < 200; i++ {
				j := quiet.consume(t, "q", "ttr=60")
				quiet.ack(t, "q", j.JobID)
			}
			quiet.wantNoJob(t, "q", "")
			if n := quiet.metricValue(t, "kairos_publish_refused_total", `namespace="quiet"`); n != 0 {
				t.Errorf("kairos_publish_refused_total{namespace=quiet} = %v, want 0", n)
			}
		})
	}
}

// memoryOf reads the memory rs counts against its maxmemory, and the
// maxmemory.
func memoryOf(t *testing.T, rs *redistest.Server) (used, max int64) {
	t.Helper()
	info, err := rs.Client().Info(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) int64 {
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, name+":"); ok {
				var n int64
				for _, c := range v {
					n = n*10 + int64(c-'0')
				}
				return n
			}
		}
		return 0
	}
	return field("used_memory") - field("mem_not_counted_for_evict"), field("maxmemory")
}
