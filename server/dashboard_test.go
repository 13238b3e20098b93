package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// getJSON GETs an admin URL, wants status, and decodes the body into v.
func getJSON(t *testing.T, url string, status int, v any) string {
	t.Helper()
	r := liveDo(t, http.MethodGet, url, nil, nil)
	if r.status != status {
		t.Fatalf("GET %s: %d %s, want %d", url, r.status, r.body, status)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.body), v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, r.body)
		}
	}
	return r.body
}

type seriesJSON struct {
	Pool, Namespace, Queue string
	FromMS                 int64               `json:"from_ms"`
	ToMS                   int64               `json:"to_ms"`
	Step                   int                 `json:"step"`
	FlushIntervalMS        int64               `json:"flush_interval_ms"`
	T                      []int64             `json:"t"`
	Published              []int64             `json:"published"`
	Consumed               []int64             `json:"consumed"`
	Acked                  []int64             `json:"acked"`
	Retried                []int64             `json:"retried"`
	Dead                   []int64             `json:"dead"`
	LatencyMS              map[string][]*int64 `json:"latency_ms"`
}

func total(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// TestDashboardEndpoints drives jobs through the public API of a live
// server (miniredis and a real Redis) and reads them back from every
// dashboard endpoint of the admin listener.
func TestDashboardEndpoints(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t), historyFlush: time.Hour})
			tok := map[string]string{"X-Token": l.token(t, "ns", auth.Scope{})}
			for i := 0; i < 4; i++ {
				if r := liveDo(t, "PUT", l.api+"/api/ns/q?tries=2", strings.NewReader("<script>alert(1)</script>"), tok); r.status != 201 {
					t.Fatalf("publish: %d %s", r.status, r.body)
				}
			}
			if r := liveDo(t, "PUT", l.api+"/api/ns/q?delay=3600", strings.NewReader("later"), tok); r.status != 201 {
				t.Fatalf("publish: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "PUT", l.api+"/api/ns/other", strings.NewReader("o"), tok); r.status != 201 {
				t.Fatalf("publish: %d %s", r.status, r.body)
			}
			var consumed struct {
				JobID string `json:"job_id"`
			}
			r := liveDo(t, "GET", l.api+"/api/ns/q?ttr=60", nil, tok)
			if r.status != 200 || json.Unmarshal([]byte(r.body), &consumed) != nil {
				t.Fatalf("consume: %d %s", r.status, r.body)
			}
			r = liveDo(t, "GET", l.api+"/api/ns/q?ttr=60", nil, tok)
			var acked struct {
				JobID string `json:"job_id"`
			}
			if r.status != 200 || json.Unmarshal([]byte(r.body), &acked) != nil {
				t.Fatalf("consume: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "DELETE", l.api+"/api/ns/q/job/"+acked.JobID, nil, tok); r.status != 204 {
				t.Fatalf("ack: %d %s", r.status, r.body)
			}
			if err := l.eng.FlushHistory(context.Background()); err != nil {
				t.Fatal(err)
			}

			t.Run("history", func(t *testing.T) {
				var s seriesJSON
				getJSON(t, l.admin+"/history/ns/q?range=15m", 200, &s)
				if len(s.T) != 16 || s.Step != 60 || s.ToMS-s.FromMS != 16*60_000 || s.T[0] != s.FromMS || s.FlushIntervalMS != HistoryFlushInterval.Milliseconds() {
					t.Fatalf("15 minutes and the current one, a point a minute: %+v", s)
				}
				for _, a := range [][]int64{s.Published, s.Consumed, s.Acked, s.Retried, s.Dead} {
					if len(a) != 16 {
						t.Fatalf("arrays of %d points, want 16", len(a))
					}
				}
				if s.Published[15] != 5 || s.Consumed[15] != 2 || s.Acked[15] != 1 || total(s.Published) != 5 {
					t.Errorf("queue series: published %v consumed %v acked %v", s.Published, s.Consumed, s.Acked)
				}
				if p := s.LatencyMS["p99"]; len(p) != 16 || p[15] == nil || *p[15] > 5000 || p[0] != nil {
					t.Errorf("latency p99 %v", p)
				}
				getJSON(t, l.admin+"/history/ns?range=1h&step=300", 200, &s)
				if s.Step != 300 || len(s.T) != int(s.ToMS-s.FromMS)/300_000 || s.FromMS%300_000 != 0 || total(s.Published) != 6 {
					t.Errorf("namespace series by 5 minutes: %+v", s)
				}
				getJSON(t, l.admin+"/history?range=24h", 200, &s)
				if s.Pool != "" || len(s.T) != 24*60+1 || total(s.Published) != 6 || total(s.Acked) != 1 {
					t.Errorf("deployment series over a day: %d points, published %d", len(s.T), total(s.Published))
				}
				now := time.Now()
				getJSON(t, fmt.Sprintf("%s/history/ns/q?from=%d&to=%s", l.admin, now.Add(-10*time.Minute).UnixMilli(),
					now.Add(time.Minute).UTC().Format(time.RFC3339)), 200, &s)
				if total(s.Published) != 5 || len(s.T) < 11 || len(s.T) > 13 {
					t.Errorf("from/to series: %d points, published %d", len(s.T), total(s.Published))
				}
			})

			t.Run("queues", func(t *testing.T) {
				var out struct {
					Total  int
					Queues []struct {
						Queue                           string
						Ready, Delayed, Scheduled, Dead int64
						InFlight                        int64 `json:"in_flight"`
						InFlightExact                   bool  `json:"in_flight_exact"`
						Paused                          bool
						OldestReadyAgeMS                int64 `json:"oldest_ready_age_ms"`
						Rates                           map[string]float64
					}
				}
				getJSON(t, l.admin+"/queues/ns", 200, &out)
				if out.Total != 2 || len(out.Queues) != 2 || out.Queues[0].Queue != "other" || out.Queues[1].Queue != "q" {
					t.Fatalf("queues by name: %+v", out)
				}
				q := out.Queues[1]
				if q.Ready != 2 || q.Delayed != 1 || q.InFlight != 1 || !q.InFlightExact || q.Scheduled != 2 || q.Dead != 0 || q.Paused || q.OldestReadyAgeMS <= 0 {
					t.Errorf("q: %+v", q)
				}
				if _, ok := q.Rates["published"]; !ok {
					t.Errorf("q has no rates: %+v", q)
				}
				getJSON(t, l.admin+"/queues/ns?sort=ready&order=desc&limit=1", 200, &out)
				if out.Total != 2 || len(out.Queues) != 1 || out.Queues[0].Queue != "q" {
					t.Errorf("first by ready, descending: %+v", out)
				}
				getJSON(t, l.admin+"/queues/ns?filter=oth", 200, &out)
				if out.Total != 1 || out.Queues[0].Queue != "other" {
					t.Errorf("filtered: %+v", out)
				}
				getJSON(t, l.admin+"/queues/ns?offset=5", 200, &out)
				if out.Total != 2 || len(out.Queues) != 0 {
					t.Errorf("past the end: %+v", out)
				}
			})

			t.Run("jobs", func(t *testing.T) {
				var out struct {
					Jobs []struct {
						JobID       string `json:"job_id"`
						State       string
						Data        []byte
						DueAtMS     int64  `json:"due_at_ms"`
						RemainTries int    `json:"remain_tries"`
						Namespace   string `json:"namespace"`
						Queue       string `json:"queue"`
					}
					NextCursor string `json:"next_cursor"`
				}
				getJSON(t, l.admin+"/queue/ns/q/jobs?state=in_flight", 200, &out)
				if len(out.Jobs) != 1 || out.Jobs[0].JobID != consumed.JobID || out.Jobs[0].State != "in_flight" ||
					out.Jobs[0].RemainTries != 1 || out.Jobs[0].DueAtMS <= time.Now().UnixMilli() || out.NextCursor != "" {
					t.Errorf("in flight: %+v", out)
				}
				body := getJSON(t, l.admin+"/queue/ns/q/jobs?state=ready&limit=1", 200, &out)
				if len(out.Jobs) != 1 || string(out.Jobs[0].Data) != "<script>alert(1)</script>" || out.NextCursor != "1" {
					t.Errorf("first ready job: %+v", out)
				}
				if strings.Contains(body, "<script>") || !strings.Contains(body, base64.StdEncoding.EncodeToString([]byte("<script>"))[:8]) {
					t.Errorf("the body is not base64 in the JSON: %s", body)
				}
				getJSON(t, l.admin+"/queue/ns/q/jobs?state=ready&limit=1&cursor=1", 200, &out)
				if len(out.Jobs) != 1 || out.NextCursor != "" {
					t.Errorf("second page: %+v", out)
				}
				getJSON(t, l.admin+"/queue/ns/q/jobs?state=delayed", 200, &out)
				if len(out.Jobs) != 1 || string(out.Jobs[0].Data) != "later" || out.Jobs[0].State != "delayed" {
					t.Errorf("delayed: %+v", out)
				}
				var one struct {
					JobID                   string `json:"job_id"`
					Namespace, Queue, State string
				}
				getJSON(t, l.admin+"/job/"+consumed.JobID, 200, &one)
				if one.JobID != consumed.JobID || one.Namespace != "ns" || one.Queue != "q" || one.State != "in_flight" {
					t.Errorf("find by ID: %+v", one)
				}
				getJSON(t, l.admin+"/queue/ns/q/job/"+consumed.JobID, 200, &one)
				if one.State != "in_flight" {
					t.Errorf("peek by queue and ID: %+v", one)
				}
				var deadPage struct {
					Jobs       []json.RawMessage
					NextOffset int64 `json:"next_offset"`
				}
				getJSON(t, l.admin+"/queue/ns/q/deadletter/jobs", 200, &deadPage)
				if len(deadPage.Jobs) != 0 || deadPage.NextOffset != -1 {
					t.Errorf("dead letter: %+v", deadPage)
				}
				getJSON(t, l.admin+"/job/"+acked.JobID, 404, nil)
				getJSON(t, l.admin+"/queue/ns/q/job/"+acked.JobID, 404, nil)
			})

			t.Run("overview", func(t *testing.T) {
				var out struct {
					Pools []struct {
						Name, Kind, Error string
						Reachable         bool
						Namespaces        []struct {
							Name   string
							Queues int
						}
						Totals map[string]int64
					}
					Totals map[string]int64
				}
				getJSON(t, l.admin+"/overview", 200, &out)
				if len(out.Pools) != 1 || out.Pools[0].Name != "default" || out.Pools[0].Kind != "standalone" || !out.Pools[0].Reachable ||
					len(out.Pools[0].Namespaces) != 1 || out.Pools[0].Namespaces[0].Queues != 2 || out.Totals["ready"] != 3 || out.Totals["scheduled"] != 2 {
					t.Errorf("overview: %+v", out)
				}
			})

			t.Run("bad parameters", func(t *testing.T) {
				for _, target := range []string{
					"/history?range=2h", "/history?step=30", "/history?step=90", "/history?step=7200", "/history?step=x",
					"/history?from=abc", "/history?from=2000&to=1000", "/history?to=1000", "/history?from=0&to=86400001",
					"/history?from=1&range=1h", "/history?from=-5", "/history/bad!ns", "/history/ns/bad%20q", "/history/ns?pool=nope",
					"/queues/ns?offset=-1", "/queues/ns?limit=0", "/queues/ns?limit=501", "/queues/ns?limit=x", "/queues/ns?sort=bogus",
					"/queues/ns?order=up", "/queues/bad!ns", "/queues/" + strings.Repeat("n", 256), "/history/" + strings.Repeat("n", 256), "/queues/ns?pool=nope",
					"/queue/ns/q/jobs?state=dead", "/queue/ns/q/jobs?cursor=-1", "/queue/ns/q/jobs?cursor=x", "/queue/ns/q/jobs?limit=201",
					"/queue/ns/_q/jobs", "/queue/ns/q/deadletter/jobs?limit=0", "/queue/ns/q/deadletter/jobs?pool=nope", "/job/not-an-id", "/job/" + strings.Repeat("*", 26),
				} {
					r := liveDo(t, "GET", l.admin+target, nil, nil)
					var e struct{ Error string }
					if r.status != 400 || json.Unmarshal([]byte(r.body), &e) != nil || e.Error == "" {
						t.Errorf("GET %s: %d %s, want 400 with a JSON error", target, r.status, r.body)
					}
				}
			})
		})
	}
}

// TestDashboardBasicAuth: with [Accounts], every dashboard route wants the
// admin credentials.
func TestDashboardBasicAuth(t *testing.T) {
	l := startLive(t, liveOptions{config: func(c *config.Config) { c.Accounts = map[string]string{"admin": "pw"} }})
	id := engine.NewJobID(time.Now(), 0, false)
	for _, target := range []string{"/overview", "/history", "/history/ns", "/history/ns/q", "/queues/ns",
		"/queue/ns/q/jobs", "/queue/ns/q/job/" + id, "/queue/ns/q/deadletter/jobs", "/job/" + id} {
		if r := liveDo(t, "GET", l.admin+target, nil, nil); r.status != 401 {
			t.Errorf("GET %s without credentials: %d", target, r.status)
		}
		r := liveDo(t, "GET", l.admin+target, nil, map[string]string{"Authorization": "Basic YWRtaW46cHc="})
		if r.status != 200 && r.status != 404 {
			t.Errorf("GET %s with credentials: %d %s", target, r.status, r.body)
		}
	}
}

// roundTrips counts what a go-redis client sends: one per command outside
// a pipeline, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// TestDashboardBulkRoundTrips: the queue table of a namespace of 1,200
// queues, over HTTP on a real Redis, costs a handful of round trips per
// refresh (not one per queue), fewer while the sizes are cached, and sorts
// and pages them right.
func TestDashboardBulkRoundTrips(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { client.Close() })
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	eng, err := rdb.New(context.Background(), client, rdb.Options{Logger: log, HistoryFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const queues = 1200
	reqs := make([]*engine.PublishRequest, 0, 3*queues)
	for i := 0; i < queues; i++ {
		for k := 0; k <= i%3; k++ {
			reqs = append(reqs, &engine.PublishRequest{Namespace: "big", Queue: fmt.Sprintf("q%04d", i), Body: []byte("x"), Tries: 1})
		}
	}
	ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
	eng.PublishEach(context.Background(), reqs, ids, errs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.FlushHistory(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Only the server's requests use this client from here on: the engine
	// does not Run (no pump, reclaimer or flush in the background).
	hook := &roundTrips{}
	client.AddHook(hook)
	srv, err := New(testConfig(), Deps{
		Engines: map[string]engine.Engine{auth.DefaultPool: eng},
		Tokens:  auth.NewStore(redistest.Start(t).Client(), []string{auth.DefaultPool}, log, auth.StoreOptions{}),
		Logger:  log,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sizes cache's clock stands still unless moved.
	base := time.Now()
	var skew atomic.Int64
	srv.sizes.now = func() time.Time { return base.Add(time.Duration(skew.Load())) }
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { httpClient.CloseIdleConnections(); cancel(); <-done })
	admin := "http://" + srv.AdminAddr()

	type page struct {
		Total  int
		Queues []struct {
			Queue string
			Ready int64
			Rates map[string]float64
		}
	}
	var p page
	before := hook.n.Load()
	getJSON(t, admin+"/queues/big?sort=ready&order=desc&limit=500", 200, &p)
	cold := hook.n.Load() - before
	t.Logf("GET /queues/big (%d queues, a page of 500, sizes not cached): %d round trips", queues, cold)
	// HKEYS, the sizes in 3 pipelines of 500 queues, the page's details.
	if cold > 5 {
		t.Errorf("a page of %d queues cost %d round trips, want at most 5", queues, cold)
	}
	if p.Total != queues || len(p.Queues) != 500 || p.Queues[0].Ready != 3 || p.Queues[399].Ready != 3 || p.Queues[400].Ready != 2 ||
		p.Queues[0].Queue != "q0002" || p.Queues[1].Queue != "q0005" || p.Queues[0].Rates == nil {
		t.Errorf("sorted by ready, descending, names ascending among equals: total %d, first %+v", p.Total, p.Queues[:2])
	}
	before = hook.n.Load()
	getJSON(t, admin+"/queues/big?sort=ready&order=desc&limit=50&offset=1150", 200, &p)
	if warm := hook.n.Load() - before; warm != 1 {
		t.Errorf("a refresh while the sizes are cached cost %d round trips, want 1 (the page's details)", warm)
	}
	if len(p.Queues) != 50 || p.Queues[49].Ready != 1 {
		t.Errorf("last page: %+v", p.Queues[len(p.Queues)-1])
	}
	// The sizes of 1,200 queues are kept 4.8 s (4 ms a queue): still
	// cached just before, read again just after.
	if ttl := srv.sizes.ttl(queues); ttl != 4800*time.Millisecond {
		t.Errorf("sizes of %d queues kept %v, want 4.8s", queues, ttl)
	}
	skew.Store(int64(4700 * time.Millisecond))
	before = hook.n.Load()
	getJSON(t, admin+"/queues/big?filter=q11&limit=1", 200, &p)
	if n := hook.n.Load() - before; n != 1 {
		t.Errorf("4.7 s after the read: %d round trips, want 1 (still cached)", n)
	}
	skew.Store(int64(5 * time.Second))
	before = hook.n.Load()
	getJSON(t, admin+"/queues/big?filter=q11", 200, &p)
	if n := hook.n.Load() - before; n < 3 || n > 5 || p.Total != 100 {
		t.Errorf("after the cache expired: %d round trips (want 3 to 5: read again), %d queues matching q11", n, p.Total)
	}
	// The overview reads the same cached sizes (a ping, the registry and
	// nothing per queue), and for its attention list the queues' activity:
	// 3 pipelines of 500 the first time, nothing more while cached.
	for i, most := range []int64{7, 4} {
		before = hook.n.Load()
		var ov struct{ Totals map[string]int64 }
		getJSON(t, admin+"/overview", 200, &ov)
		if n := hook.n.Load() - before; n > most || ov.Totals["ready"] != int64(len(reqs)) || ov.Totals["queues"] != queues {
			t.Errorf("overview %d: %d round trips (want at most %d), totals %v", i+1, n, most, ov.Totals)
		}
	}
}

// TestDashboardUnknownNames: a mistyped namespace or queue URL answers 404
// with a page saying what is missing, not an empty page with 200; a real
// namespace (queues, or only tokens) and a real queue (published to and
// now empty, or only configured) keep their pages.
func TestDashboardUnknownNames(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t)})
			tok := map[string]string{"X-Token": l.token(t, "shop", auth.Scope{})}
			l.token(t, "tokens-only", auth.Scope{})
			// shop/orders: published, consumed and ACKed, now empty.
			if r := liveDo(t, "PUT", l.api+"/api/shop/orders", strings.NewReader("x"), tok); r.status != http.StatusCreated {
				t.Fatalf("publish: %d %s", r.status, r.body)
			}
			var job struct {
				JobID string `json:"job_id"`
			}
			r := liveDo(t, "GET", l.api+"/api/shop/orders?ttr=30", nil, tok)
			if err := json.Unmarshal([]byte(r.body), &job); err != nil || job.JobID == "" {
				t.Fatalf("consume: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "DELETE", l.api+"/api/shop/orders/job/"+job.JobID, nil, tok); r.status != http.StatusNoContent {
				t.Fatalf("ack: %d %s", r.status, r.body)
			}
			// shop/later: never published to, but paused through the admin API.
			if r := liveDo(t, "PUT", l.admin+"/queue/shop/later/config", strings.NewReader(`{"paused":true}`),
				map[string]string{"Content-Type": "application/json"}); r.status != http.StatusOK {
				t.Fatalf("pause: %d %s", r.status, r.body)
			}
			for _, tc := range []struct {
				path   string
				status int
				text   string
			}{
				{"/ui/ns/default/shop", http.StatusOK, "orders"},
				{"/ui/ns/default/tokens-only", http.StatusOK, "tokens-only"},
				{"/ui/ns/default/shpo", http.StatusNotFound, `no namespace &#34;shpo&#34; in pool &#34;default&#34;`},
				{"/ui/queue/default/shop/orders", http.StatusOK, "orders"},
				{"/ui/queue/default/shop/later", http.StatusOK, "later"},
				{"/ui/queue/default/shop/ordres", http.StatusNotFound, `no queue &#34;ordres&#34; in namespace &#34;shop&#34;`},
				{"/ui/queue/default/shop/ordres", http.StatusNotFound, `href="/ui/queue/default/shop/ordres?new=1"`},
				{"/ui/queue/default/shop/ordres?new=1", http.StatusOK, `id="no-schedules"`},
				{"/ui/queue/default/shpo/orders", http.StatusNotFound, `no queue &#34;orders&#34; in namespace &#34;shpo&#34;`},
			} {
				r := liveDo(t, "GET", l.admin+tc.path, nil, nil)
				if r.status != tc.status || !strings.Contains(r.body, tc.text) {
					t.Errorf("GET %s: %d, want %d with %q:\n%s", tc.path, r.status, tc.status, tc.text, r.body)
				}
			}
		})
	}
}
