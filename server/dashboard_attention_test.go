package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
)

// TestDashboardAttention: the overview lists what needs an operator (a
// namespace at its quota, a backlog nobody consumes, a dead letter
// growing, an old ready job on a consumed queue, a queue held at its
// max_in_flight with ready jobs, a namespace near its quota, a paused
// queue, in that order) and nothing else (a queue under its
// max_in_flight is not listed); the queues
// table and GET /queues sort by the oldest ready job and the recent
// rates. The server's and the engine's clock is moved: jobs are published
// minutes "ago", their history written then.
func TestDashboardAttention(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			now := time.Now().Truncate(time.Minute).Add(30 * time.Second)
			var clock atomic.Int64
			at := func(ago time.Duration) { clock.Store(now.Add(-ago).UnixNano()) }
			at(12 * time.Minute)
			l := startLive(t, liveOptions{client: backend(t), now: func() time.Time { return time.Unix(0, clock.Load()) }, historyFlush: time.Hour})
			tok := map[string]string{"X-Token": l.token(t, "shop", auth.Scope{})}
			tight := map[string]string{"X-Token": l.token(t, "tight", auth.Scope{})}
			admin := map[string]string{"Content-Type": "application/json"}
			publish := func(ns, q string, n int, hdr map[string]string, query string) {
				t.Helper()
				for range n {
					if r := liveDo(t, "PUT", l.api+"/api/"+ns+"/"+q+query, strings.NewReader("x"), hdr); r.status != http.StatusCreated {
						t.Fatalf("publish %s/%s: %d %s", ns, q, r.status, r.body)
					}
				}
			}
			ext := map[string]string{"X-Token": tok["X-Token"], "X-Kairos-Extensions": "1"}
			var receipt string
			consume := func(q string) string {
				t.Helper()
				r := liveDo(t, "GET", l.api+"/api/shop/"+q+"?ttr=30", nil, ext)
				var job struct {
					JobID   string `json:"job_id"`
					Receipt string `json:"receipt"`
				}
				if err := json.Unmarshal([]byte(r.body), &job); err != nil || job.JobID == "" {
					t.Fatalf("consume %s: %d %s", q, r.status, r.body)
				}
				receipt = job.Receipt
				return job.JobID
			}
			flush := func() {
				t.Helper()
				if err := l.eng.FlushHistory(context.Background()); err != nil { // into the clock's minute
					t.Fatal(err)
				}
			}
			publish("shop", "stuck", 3, tok, "") // 12 min ago, never consumed
			flush()
			at(10 * time.Minute)
			publish("shop", "slow", 5, tok, "") // 10 min ago, one consumed 3 min ago
			flush()
			at(8 * time.Minute)
			publish("shop", "held", 1, tok, "")
			flush()
			if r := liveDo(t, "PUT", l.admin+"/queue/shop/held/config", strings.NewReader(`{"paused":true}`), admin); r.status != http.StatusOK {
				t.Fatalf("pause: %d %s", r.status, r.body)
			}
			at(3 * time.Minute)
			publish("shop", "busy", 4, tok, "")
			for range 2 {
				id := consume("busy")
				if r := liveDo(t, "DELETE", l.api+"/api/shop/busy/job/"+id, nil, tok); r.status != http.StatusNoContent {
					t.Fatalf("ack: %d %s", r.status, r.body)
				}
			}
			consume("slow")
			publish("shop", "dying", 1, tok, "?tries=1")
			if r := liveDo(t, "PUT", l.api+"/api/shop/dying/job/"+consume("dying")+"/release?error=boom&receipt="+receipt, nil, tok); r.status/100 != 2 {
				t.Fatalf("release: %d %s", r.status, r.body)
			}
			publish("tight", "q", 1, tight, "")
			flush()
			at(0)
			// throttled: 2 of its 3 jobs in flight, its max_in_flight: held
			// with a ready job waiting. wide: 1 of 3 in flight, not listed
			// (both named after the others: the sorts below tie them last).
			for q, limit := range map[string]int{"throttled": 2, "wide": 3} {
				publish("shop", q, 3, tok, "")
				if r := liveDo(t, "PUT", l.admin+"/queue/shop/"+q+"/config", strings.NewReader(fmt.Sprintf(`{"max_in_flight":%d}`, limit)), admin); r.status != http.StatusOK {
					t.Fatalf("max_in_flight of %s: %d %s", q, r.status, r.body)
				}
			}
			consume("throttled")
			consume("throttled")
			consume("wide")
			// Quotas: tight at its quota, shop just above 90 % of its own.
			if r := liveDo(t, "PUT", l.admin+"/quota/tight", strings.NewReader(`{"max_jobs":1}`), admin); r.status != http.StatusOK {
				t.Fatalf("quota: %d %s", r.status, r.body)
			}
			var q struct{ Jobs int64 }
			if err := json.Unmarshal([]byte(liveDo(t, "GET", l.admin+"/quota/shop", nil, nil).body), &q); err != nil || q.Jobs < 10 {
				t.Fatalf("GET /quota/shop: %+v %v", q, err)
			}
			if r := liveDo(t, "PUT", l.admin+"/quota/shop", strings.NewReader(fmt.Sprintf(`{"max_jobs":%d}`, q.Jobs+1)), admin); r.status != http.StatusOK {
				t.Fatalf("quota: %d %s", r.status, r.body)
			}

			r := liveDo(t, "GET", l.admin+"/ui/", nil, nil)
			if r.status != http.StatusOK {
				t.Fatalf("overview: %d %s", r.status, r.body)
			}
			rows := regexp.MustCompile(`<tr data-pool="default"(?: data-ns="([^"]*)")?(?: data-queue="([^"]*)")? data-why="([^"]*)">`).FindAllStringSubmatch(r.body, -1)
			var got []string
			for _, m := range rows {
				got = append(got, strings.Trim(m[1]+"/"+m[2], "/")+": "+m[3])
			}
			want := []string{"tight: quota full", "shop/stuck: not consumed", "shop/dying: dead letter growing",
				"shop/slow: old ready job", "shop/throttled: at in-flight limit", "shop: near quota", "shop/held: paused"}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Errorf("attention list:\n got %q\nwant %q", got, want)
			}
			for _, text := range []string{"3 ready and nothing consumed since", "the oldest has waited 12m0s", "1 job died since",
				`href="/ui/queue/default/shop/stuck"`, "paused: consumers get nothing (1 ready)",
				"2 in flight, its max_in_flight is 2: 1 ready wait for a slot"} {
				if !strings.Contains(r.body, text) {
					t.Errorf("overview: no %q", text)
				}
			}

			// GET /overview holds the same list.
			var ov struct {
				Attention []struct {
					Pool, Namespace, Queue string
					Why                    []struct{ Kind, Text string }
					Ready                  int64
					OldestReadyAgeMS       int64 `json:"oldest_ready_age_ms"`
				}
			}
			getJSON(t, l.admin+"/overview", 200, &ov)
			got = nil
			for _, a := range ov.Attention {
				got = append(got, strings.Trim(a.Namespace+"/"+a.Queue, "/")+": "+a.Why[0].Kind)
			}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Errorf("GET /overview attention:\n got %q\nwant %q", got, want)
			} else if s := ov.Attention[1]; s.Ready != 3 || s.OldestReadyAgeMS != (12*time.Minute).Milliseconds() {
				t.Errorf("GET /overview attention of stuck: %+v", s)
			}

			// Sorts over every queue of the namespace, by age and rates.
			for _, tc := range []struct{ sort, want string }{
				{"oldest_ready", "stuck slow held busy"},
				{"consumed", "busy dying slow held"},
				{"published", "busy dying held slow"},
			} {
				var p struct{ Queues []struct{ Queue string } }
				getJSON(t, l.admin+"/queues/shop?order=desc&sort="+tc.sort, 200, &p)
				var names []string
				for _, x := range p.Queues {
					names = append(names, x.Queue)
				}
				if got := strings.Join(names, " "); !strings.HasPrefix(got, tc.want) {
					t.Errorf("GET /queues/shop sort=%s desc: %s, want %s first", tc.sort, got, tc.want)
				}
			}
			page := liveDo(t, "GET", l.admin+"/ui/ns/default/shop?sort=oldest&order=desc", nil, nil).body
			order := regexp.MustCompile(`<tr data-queue="([^"]+)">`).FindAllStringSubmatch(page, -1)
			if len(order) < 3 || order[0][1] != "stuck" || order[1][1] != "slow" || order[2][1] != "held" {
				t.Errorf("namespace page by oldest ready: %v", order)
			}
			if !strings.Contains(page, `data-sort="consumed"`) || !strings.Contains(page, `class="sorted desc">Oldest ready`) {
				t.Errorf("namespace page: no sort link by consumed/s, or the oldest ready column not marked sorted")
			}
		})
	}
}

// TestAttentionPools: a pool that cannot take work heads the list, with
// why; a healthy one is not listed.
func TestAttentionPools(t *testing.T) {
	var a attentionList
	a.judgePool(&poolView{Name: "ok", Reachable: true})
	a.judgePool(&poolView{Name: "res", Reachable: true, Reserve: true})
	a.judgePool(&poolView{Name: "down", Error: "dial tcp: refused"})
	a.judgePool(&poolView{Name: "full", Reachable: true, Full: true})
	a.judgeNamespace("ok", &nsView{Name: "ns", Usage: newUIUsage(quotaJSON{Jobs: 95, MaxJobs: 100})})
	a.judgeNamespace("ok", &nsView{Name: "free", Usage: newUIUsage(quotaJSON{Jobs: 5, MaxJobs: 100})})
	a.finish(time.Now())
	var got []string
	for _, r := range a.Rows {
		got = append(got, r.Pool+"/"+r.Namespace+": "+r.Why[0].Kind)
	}
	want := "down/: unreachable; full/: pool full; res/: pool reserve; ok/ns: near quota"
	if strings.Join(got, "; ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, "; "), want)
	}
	if !strings.Contains(a.Rows[0].Why[0].Text, "dial tcp: refused") {
		t.Errorf("the unreachable pool's reason: %q", a.Rows[0].Why[0].Text)
	}
}
