package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
)

// Fair groups and in-flight limits end to end (issue #32): the two
// scenarios over real HTTP, on miniredis and a real redis-server, with the
// event loops on and off — fairness (20,000 jobs of one group, then 50 of
// each of ten others: at least 475 of those 500 among the first 600
// consumes) and the limits (max_in_flight 5 with 20 consumers: exactly 5
// delivered; group_max_in_flight 2 with three groups: 2 per group, and a
// freed slot serves a waiting consumer) — with the groups route and the
// queue config read back on the way.

func TestGroupsOverHTTP(t *testing.T) {
	for name, backend := range liveBackends {
		for _, loops := range []int{0, -1} {
			t.Run(fmt.Sprintf("%s/EventLoops=%d", name, loops), func(t *testing.T) {
				testGroupsOverHTTP(t, name, backend(t), loops)
			})
		}
	}
}

// consumedJob is what the tests read of a consumed job.
type consumedJob struct {
	JobID string `json:"job_id"`
	Data  []byte `json:"data"`
	Group string `json:"group"`
}

// consumeJobs consumes up to count jobs of ns/q (timeout 0) and returns
// them; none is a 404.
func consumeJobs(t testing.TB, l *live, ns, q string, count int, hdr map[string]string) []consumedJob {
	t.Helper()
	r := liveDo(t, "GET", fmt.Sprintf("%s/api/%s/%s?timeout=0&ttr=600&count=%d", l.api, ns, q, count), nil, hdr)
	switch {
	case r.status == http.StatusNotFound && r.body == `{"msg":"no job available"}`:
		return nil
	case r.status != http.StatusOK:
		t.Fatalf("consume %s/%s: %d %s", ns, q, r.status, r.body)
	}
	if count == 1 {
		var j consumedJob
		if err := json.Unmarshal([]byte(r.body), &j); err != nil {
			t.Fatalf("consume: %v in %s", err, r.body)
		}
		return []consumedJob{j}
	}
	var js []consumedJob
	if err := json.Unmarshal([]byte(r.body), &js); err != nil {
		t.Fatalf("consume: %v in %s", err, r.body)
	}
	return js
}

// bulkPublish publishes n jobs to ns/q with query, 64 a request; job i's
// body is first+i.
func bulkPublish(t testing.TB, l *live, ns, q, query string, first, n int, hdr map[string]string) {
	t.Helper()
	for i := 0; i < n; i += 64 {
		var b strings.Builder
		b.WriteByte('[')
		for k := i; k < min(i+64, n); k++ {
			if k > i {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(first + k))
		}
		b.WriteByte(']')
		r := liveDo(t, "PUT", l.api+"/api/"+ns+"/"+q+"/bulk?"+query, strings.NewReader(b.String()), hdr)
		if r.status != http.StatusCreated {
			t.Fatalf("bulk publish %s?%s: %d %s", q, query, r.status, r.body)
		}
	}
}

func testGroupsOverHTTP(t *testing.T, backend string, client redis.UniversalClient, loops int) {
	l := startLive(t, liveOptions{client: client, config: func(c *config.Config) {
		c.Kairos.EventLoops = loops
		c.EnableAccessLog = false
	}})
	if served := l.srv.eventLoops() > 0; served != (loops >= 0 && runtime.GOOS == "linux") {
		t.Fatalf("event loops: %v, want %v", served, loops >= 0)
	}
	hdr := map[string]string{"X-Token": l.token(t, "ns", auth.Scope{})}
	// miniredis's LPUSH copies the whole list, so that 20,000 pushes to
	// one list cost seconds there: its tier holds 2,000 jobs of big, which
	// is the same test (any backlog beyond the 600 consumes is).
	big := 20000
	if backend == "miniredis" {
		big = 2000
	}
	t.Run("fair", func(t *testing.T) { testGroupsFair(t, l, big, hdr) })
	t.Run("limits", func(t *testing.T) { testGroupsLimits(t, l, hdr) })
	t.Run("schedule", func(t *testing.T) {
		// A schedule's template carries a group (its ticks: engine/rdb's
		// TestScheduleGroup).
		r := liveDo(t, "PUT", l.api+"/api/ns/sq/schedule/s1?cron=@hourly&group=shop-1", strings.NewReader("x"), hdr)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"priority":0,"group":"shop-1","versioned":false`) {
			t.Fatalf("PUT schedule with a group: %d %s", r.status, r.body)
		}
		if r = liveDo(t, "GET", l.api+"/api/ns/sq/schedule/s1", nil, hdr); !strings.Contains(r.body, `"group":"shop-1"`) {
			t.Fatalf("GET schedule: %d %s", r.status, r.body)
		}
		if r = liveDo(t, "PUT", l.api+"/api/ns/sq/schedule/s1?cron=@hourly&group=a.b", strings.NewReader("x"), hdr); r.status != http.StatusBadRequest || r.body != `{"error":"invalid group"}` {
			t.Fatalf("PUT schedule with an invalid group: %d %s", r.status, r.body)
		}
	})
}

// testGroupsFair: big (20,000) jobs of group big, then 50 of each of ten
// other groups; at least 475 of those 500 are among the first 600
// consumes, each group's jobs come in their publish order, and the groups
// route shows big first.
func testGroupsFair(t *testing.T, l *live, big int, hdr map[string]string) {
	const small, others = 50, 10
	bulkPublish(t, l, "ns", "fair", "group=big&ttl=0", 0, big, hdr)
	for g := range others {
		// Singles (the event loops' path when on) and bulk.
		group := "shop-" + strconv.Itoa(g)
		if g%4 != 1 {
			bulkPublish(t, l, "ns", "fair", "group="+group, big+g*small, small, hdr)
			continue
		}
		for k := range small {
			r := liveDo(t, "PUT", l.api+"/api/ns/fair?group="+group, strings.NewReader(strconv.Itoa(big+g*small+k)), hdr)
			if r.status != http.StatusCreated {
				t.Fatalf("publish to %s: %d %s", group, r.status, r.body)
			}
		}
	}

	// 600 consumes: 50 single ones, then batches of 50.
	var got []consumedJob
	for len(got) < 50 {
		js := consumeJobs(t, l, "ns", "fair", 1, hdr)
		if len(js) == 0 {
			t.Fatalf("no job after %d consumes", len(got))
		}
		got = append(got, js...)
	}
	for len(got) < 600 {
		js := consumeJobs(t, l, "ns", "fair", 50, hdr)
		if len(js) == 0 {
			t.Fatalf("no job after %d consumes", len(got))
		}
		got = append(got, js...)
	}
	got = got[:600]
	last := map[string]int{}
	fromOthers := 0
	for i, j := range got {
		n, err := strconv.Atoi(string(j.Data))
		if err != nil {
			t.Fatalf("consume %d: body %q", i, j.Data)
		}
		want := "big"
		if n >= big {
			want = "shop-" + strconv.Itoa((n-big)/small)
			fromOthers++
		}
		if j.Group != want {
			t.Fatalf("consume %d: job %d of group %q, want %q", i, n, j.Group, want)
		}
		if prev, ok := last[j.Group]; ok && n <= prev {
			t.Fatalf("consume %d: group %s's job %d after its job %d", i, j.Group, n, prev)
		}
		last[j.Group] = n
	}
	if fromOthers < 475 {
		t.Fatalf("%d of the %d jobs of the small groups among the first 600 consumes, want at least 475", fromOthers, others*small)
	}

	r := liveDo(t, "GET", l.admin+"/queue/ns/fair/groups?limit=5", nil, nil)
	var gs struct {
		InFlight int64 `json:"in_flight"`
		Groups   []struct {
			Group    string `json:"group"`
			Ready    int64  `json:"ready"`
			InFlight int64  `json:"in_flight"`
		} `json:"groups"`
		Total     int  `json:"total"`
		Truncated bool `json:"truncated"`
	}
	if r.status != http.StatusOK {
		t.Fatalf("GET groups: %d %s", r.status, r.body)
	}
	if err := json.Unmarshal([]byte(r.body), &gs); err != nil {
		t.Fatalf("GET groups: %v in %s", err, r.body)
	}
	bigSeen := 600 - fromOthers
	if gs.Total != others+1 || !gs.Truncated || len(gs.Groups) != 5 || gs.Groups[0].Group != "big" ||
		gs.Groups[0].Ready != int64(big-bigSeen) || gs.Groups[0].InFlight != int64(bigSeen) || gs.InFlight != 600 {
		t.Fatalf("GET groups after 600 consumes (%d of big): %s", bigSeen, r.body)
	}
	for i := 1; i < len(gs.Groups); i++ {
		a, b := gs.Groups[i-1], gs.Groups[i]
		if a.Ready+a.InFlight < b.Ready+b.InFlight {
			t.Fatalf("GET groups: not biggest first: %s", r.body)
		}
	}
}

// testGroupsLimits: max_in_flight 5 with 20 consumers delivers exactly 5;
// group_max_in_flight 2 with three groups delivers 2 per group; an ACK
// frees a slot for a consumer waiting on the limit.
func testGroupsLimits(t *testing.T, l *live, hdr map[string]string) {
	r := liveDo(t, "PUT", l.admin+"/queue/ns/lim/config", strings.NewReader(`{"max_in_flight":5}`), nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"max_in_flight":5`) {
		t.Fatalf("PUT config max_in_flight: %d %s", r.status, r.body)
	}
	r = liveDo(t, "PUT", l.admin+"/queue/ns/glim/config", strings.NewReader(`{"group_max_in_flight":2,"group_weights":{"a":3}}`), nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"group_max_in_flight":2,"group_weights":{"a":3}`) {
		t.Fatalf("PUT config group_max_in_flight: %d %s", r.status, r.body)
	}
	if r = liveDo(t, "GET", l.admin+"/queue/ns/glim/config", nil, nil); r.body != `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1,"group_max_in_flight":2,"group_weights":{"a":3}}` {
		t.Fatalf("GET config: %d %s", r.status, r.body)
	}
	bulkPublish(t, l, "ns", "lim", "", 0, 30, hdr)
	for _, g := range []string{"a", "b", "c"} {
		bulkPublish(t, l, "ns", "glim", "group="+g, 0, 10, hdr)
	}

	// 20 consumers at once on each queue, each holding what it gets.
	race := func(q string) []consumedJob {
		var mu sync.Mutex
		var all []consumedJob
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				js := consumeJobs(t, l, "ns", q, 1, hdr)
				mu.Lock()
				all = append(all, js...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return all
	}
	if got := race("lim"); len(got) != 5 {
		t.Fatalf("max_in_flight 5, 20 consumers: %d delivered", len(got))
	}
	got := race("glim")
	per := map[string]int{}
	for _, j := range got {
		per[j.Group]++
	}
	if len(got) != 6 || per["a"] != 2 || per["b"] != 2 || per["c"] != 2 {
		t.Fatalf("group_max_in_flight 2, three groups, 20 consumers: %v", per)
	}
	// At the limit, a consume that waits is served once a slot frees.
	waited := make(chan liveResponse, 1)
	go func() {
		waited <- liveDo(t, "GET", l.api+"/api/ns/glim?timeout=5&ttr=600", nil, hdr)
	}()
	var freed consumedJob
	for _, j := range got {
		if j.Group == "b" {
			freed = j
		}
	}
	if r := liveDo(t, "DELETE", l.api+"/api/ns/glim/job/"+freed.JobID, nil, hdr); r.status != http.StatusNoContent {
		t.Fatalf("ACK: %d %s", r.status, r.body)
	}
	w := <-waited
	var j consumedJob
	if w.status != http.StatusOK || json.Unmarshal([]byte(w.body), &j) != nil || j.Group != "b" {
		t.Fatalf("a consume waiting at the limit, after an ACK of group b: %d %s", w.status, w.body)
	}
	if more := consumeJobs(t, l, "ns", "glim", 5, hdr); len(more) != 0 {
		t.Fatalf("every group at its limit, yet a consume got %d jobs", len(more))
	}
	r = liveDo(t, "GET", l.admin+"/queue/ns/glim/groups", nil, nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"in_flight":6,"max_in_flight":0,"group_max_in_flight":2,`) || strings.Count(r.body, `"limited":true`) != 3 {
		t.Fatalf("GET groups at the limits: %d %s", r.status, r.body)
	}
	// The dashboard's queue page shows the same.
	r = liveDo(t, "GET", l.admin+"/ui/queue/default/ns/glim", nil, nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `<b id="groups-inflight">6</b>`) || !strings.Contains(r.body, `<b id="group-max-in-flight">2</b>`) ||
		strings.Count(r.body, `<tr data-group=`) != 3 || strings.Count(r.body, `at its limit`) != 3 {
		t.Fatalf("the queue page at the limits: %d %s", r.status, r.body)
	}
}
