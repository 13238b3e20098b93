package app_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// scheduleJSON is a schedule as the API renders it.
type scheduleJSON struct {
	Namespace  string     `json:"namespace"`
	Queue      string     `json:"queue"`
	Name       string     `json:"name"`
	Cron       string     `json:"cron"`
	TZ         string     `json:"tz"`
	Missed     string     `json:"missed"`
	Paused     bool       `json:"paused"`
	NextAt     *time.Time `json:"next_at"`
	LastTickAt *time.Time `json:"last_tick_at"`
	LastJobID  string     `json:"last_job_id"`
	Fired      int64      `json:"fired"`
	Job        struct {
		Data       []byte            `json:"data"`
		TTL        int64             `json:"ttl"`
		Tries      uint16            `json:"tries"`
		Priority   int               `json:"priority"`
		Versioned  bool              `json:"versioned"`
		Attributes map[string]string `json:"attributes"`
	} `json:"job"`
}

func getSchedule(tb testing.TB, api, ns, token, queue, name string) scheduleJSON {
	tb.Helper()
	r := doHTTP(tb, http.MethodGet, api+"/api/"+ns+"/"+queue+"/schedule/"+name, token, nil, nil)
	r.wantStatus(tb, http.StatusOK)
	var s scheduleJSON
	r.decode(tb, &s)
	return s
}

// drainJobs consumes (and ACKs) every ready job of queue, returning the
// bodies by job ID.
func drainJobs(tb testing.TB, api, ns, token, queue string) map[string]string {
	tb.Helper()
	got := map[string]string{}
	for {
		r := doHTTP(tb, http.MethodGet, api+"/api/"+ns+"/"+queue+"?count=100&ttr=60&timeout=0", token, nil, nil)
		if r.Status == http.StatusNotFound {
			return got
		}
		r.wantStatus(tb, http.StatusOK)
		var jobs []jobJSON
		if err := json.Unmarshal(r.Body, &jobs); err != nil {
			var one jobJSON
			r.decode(tb, &one)
			jobs = []jobJSON{one}
		}
		for _, j := range jobs {
			if _, dup := got[j.JobID]; dup {
				tb.Fatalf("job %s delivered twice", j.JobID)
			}
			got[j.JobID] = string(j.Data)
			doHTTP(tb, http.MethodDelete, api+"/api/"+ns+"/"+queue+"/job/"+j.JobID, token, nil, nil).wantStatus(tb, http.StatusNoContent)
		}
	}
}

func TestE2ESchedules(t *testing.T) {
	e := startE2E(t)
	put := func(name, q string, body string, hdr map[string]string) *response {
		return e.do(t, http.MethodPut, "sq/schedule/"+name, q, []byte(body), hdr)
	}
	// Bad input: 400 naming the parameter; nothing stored.
	for _, tc := range []struct{ name, q, want string }{
		{"a", "", `{"error":"invalid cron: the cron parameter is required"}`},
		{"a", "cron=61+*+*+*+*", `invalid cron: invalid cron expression`},
		{"a", "cron=%40every+100ms", `invalid cron: schedule fires more often than once a second`},
		{"a", "cron=0+0+30+2+*", `invalid cron: cron expression never fires`},
		{"a", "cron=%40hourly&tz=Mars%2FOlympus", `invalid tz: invalid time zone`},
		{"a*b", "cron=%40hourly", `invalid schedule name`},
		{"a", "cron=%40hourly&missed=all", `invalid missed`},
		{"a", "cron=%40hourly&delay=5", `invalid delay`},
		{"a", "cron=%40hourly&due_at=1", `invalid delay`},
		{"a", "cron=%40hourly&job_key=k", `invalid job_key`},
		{"a", "cron=%40hourly&tries=0", `tries shouldn't be zero`},
		{"a", "cron=%40hourly&priority=256", `invalid priority`},
		{"a", "cron=%40hourly&ttl=x", `invalid ttl`},
	} {
		r := put(tc.name, tc.q, "x", nil)
		r.wantStatus(t, http.StatusBadRequest)
		if !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%v: want %q", r, tc.want)
		}
	}
	r := e.do(t, http.MethodGet, "sq/schedule", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, `{"namespace":"e2e","queue":"sq","schedules":[]}`)
	e.do(t, http.MethodGet, "sq/schedule/nope", "", nil, nil).wantStatus(t, http.StatusNotFound)
	e.do(t, http.MethodDelete, "sq/schedule/nope", "", nil, nil).wantStatus(t, http.StatusNotFound)
	e.do(t, http.MethodPut, "sq/schedule/nope/pause", "", nil, nil).wantStatus(t, http.StatusNotFound)

	// A token that may not publish to the queue may not schedule either.
	ro := doHTTP(t, http.MethodPost, e.Admin+"/token/e2e?description=c&queues=sq&roles=consume", "", nil, nil)
	ro.wantStatus(t, http.StatusCreated)
	var tok struct{ Token string }
	ro.decode(t, &tok)
	for _, m := range []string{http.MethodPut, http.MethodGet} {
		r := doHTTP(t, m, e.url("sq/schedule/a", "cron=%40hourly"), tok.Token, []byte("x"), nil)
		r.wantStatus(t, http.StatusForbidden)
	}
	doHTTP(t, http.MethodGet, e.url("sq/schedule", ""), "", nil, nil).wantStatus(t, http.StatusUnauthorized)

	// A real schedule: every second, the template of a publish.
	start := time.Now()
	r = put("tick", "cron=%40every+1s&ttl=30&tries=2&priority=5", "hello", map[string]string{
		"Enable-Job-Version": "YES", "Job-Attr-Kind": "report",
	})
	r.wantStatus(t, http.StatusOK)
	var s scheduleJSON
	r.decode(t, &s)
	if s.Name != "tick" || s.Cron != "@every 1s" || s.TZ != "UTC" || s.Missed != "skip" || s.Paused ||
		s.NextAt == nil || s.NextAt.Sub(start) > 2*time.Second || string(s.Job.Data) != "hello" ||
		s.Job.TTL != 30 || s.Job.Tries != 2 || s.Job.Priority != 5 || !s.Job.Versioned || s.Job.Attributes["kind"] != "report" {
		t.Fatalf("put: %s", r.Body)
	}
	// Ticks arrive on time, as the template says.
	for i := 0; i < 2; i++ {
		r := e.do(t, http.MethodGet, "sq", "timeout=5&ttr=30", nil, nil)
		r.wantStatus(t, http.StatusOK)
		j := r.job(t)
		if string(j.Data) != "hello" || j.Attributes["kind"] != "report" || j.RemainTries != 1 {
			t.Fatalf("tick job: %s", r.Body)
		}
		e.ack(t, "sq", j.JobID)
	}
	got := getSchedule(t, e.API, e.NS, e.Token, "sq", "tick")
	if got.Fired < 2 || got.LastJobID == "" || got.LastTickAt == nil || !got.NextAt.After(*got.LastTickAt) {
		t.Fatalf("after two ticks: %+v", got)
	}
	// Pause: no tick fires; the job already published ahead (at most one)
	// may still come.
	r = e.do(t, http.MethodPut, "sq/schedule/tick/pause", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.decode(t, &s)
	if !s.Paused || s.NextAt != nil {
		t.Fatalf("pause: %s", r.Body)
	}
	time.Sleep(1500 * time.Millisecond)
	drainJobs(t, e.API, e.NS, e.Token, "sq")
	paused := getSchedule(t, e.API, e.NS, e.Token, "sq", "tick").Fired
	time.Sleep(2 * time.Second)
	if n := getSchedule(t, e.API, e.NS, e.Token, "sq", "tick").Fired; n != paused {
		t.Fatalf("fired %d → %d while paused", paused, n)
	}
	if jobs := drainJobs(t, e.API, e.NS, e.Token, "sq"); len(jobs) != 0 {
		t.Fatalf("jobs while paused: %v", jobs)
	}
	r = e.do(t, http.MethodPut, "sq/schedule/tick/resume", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.decode(t, &s)
	if s.Paused || s.NextAt == nil {
		t.Fatalf("resume: %s", r.Body)
	}
	e.do(t, http.MethodGet, "sq", "timeout=5&ttr=30", nil, nil).wantStatus(t, http.StatusOK)

	// A second schedule in a zone; the list is sorted by name.
	put("daily", "cron=0+2+*+*+*&tz=Europe%2FBerlin&missed=last", "d", nil).wantStatus(t, http.StatusOK)
	r = e.do(t, http.MethodGet, "sq/schedule", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	var list struct{ Schedules []scheduleJSON }
	r.decode(t, &list)
	if len(list.Schedules) != 2 || list.Schedules[0].Name != "daily" || list.Schedules[1].Name != "tick" ||
		list.Schedules[0].Missed != "last" || list.Schedules[0].TZ != "Europe/Berlin" {
		t.Fatalf("list: %s", r.Body)
	}
	if n := list.Schedules[0].NextAt; n == nil || n.In(mustZone(t, "Europe/Berlin")).Hour() != 2 {
		t.Fatalf("daily next %v", n)
	}
	e.do(t, http.MethodDelete, "sq/schedule/tick", "", nil, nil).wantStatus(t, http.StatusNoContent)
	e.do(t, http.MethodGet, "sq/schedule/tick", "", nil, nil).wantStatus(t, http.StatusNotFound)
}

func mustZone(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// soak is how long the exactly-once tests run: 12 s by default, 60 s (or
// any duration) with KAIROS_SCHEDULE_SOAK=60s.
func soak(t *testing.T) time.Duration {
	if v := os.Getenv("KAIROS_SCHEDULE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KAIROS_SCHEDULE_SOAK: %v", err)
		}
		return d
	}
	if testing.Short() {
		t.Skip("-short: the schedule soak takes 12 s")
	}
	return 12 * time.Second
}

// checkExactlyOnce stops the schedule and checks that the queue holds
// exactly one job per tick from first to the last tick fired.
func checkExactlyOnce(t *testing.T, api, ns, token, queue string, first time.Time, jobs map[string]string) {
	t.Helper()
	r := doHTTP(t, http.MethodPut, api+"/api/"+ns+"/"+queue+"/schedule/s/pause", token, nil, nil)
	r.wantStatus(t, http.StatusOK)
	var s scheduleJSON
	r.decode(t, &s)
	time.Sleep(2 * time.Second) // the last job published ahead falls due
	for id, b := range drainJobs(t, api, ns, token, queue) {
		jobs[id] = b
	}
	if s.LastTickAt == nil {
		t.Fatal("no tick fired")
	}
	ticks := int64(s.LastTickAt.Sub(first)/time.Second) + 1
	t.Logf("%d ticks from %v to %v, %d fired, %d jobs", ticks, first, *s.LastTickAt, s.Fired, len(jobs))
	if s.Fired != ticks || int64(len(jobs)) != ticks {
		t.Fatalf("%d ticks from %v to %v: fired %d, %d jobs", ticks, first, *s.LastTickAt, s.Fired, len(jobs))
	}
}

// TestE2EScheduleTwoServers: two apps on one Redis (on the Redis Cluster
// under TestE2ECluster) run the same @every 1s schedule; every tick
// publishes exactly one job.
func TestE2EScheduleTwoServers(t *testing.T) {
	var cfg func() *config.Config
	if onCluster(t) {
		// Not parallel: the cluster is shared, and flushed by each test.
		c := redistest.SharedCluster(t)
		c.Flush(t)
		cfg = func() *config.Config { return clusterConfig(c) }
	} else {
		t.Parallel()
		rs := redistest.Start(t)
		cfg = func() *config.Config { return redisConfig(rs.Addr) }
	}
	d := soak(t)
	a := startKairos(t, cfg())
	b := startKairos(t, cfg())
	token := a.newToken(t, "s2")
	r := doHTTP(t, http.MethodPut, a.API+"/api/s2/q/schedule/s?cron=%40every+1s", token, []byte("t"), nil)
	r.wantStatus(t, http.StatusOK)
	var s scheduleJSON
	r.decode(t, &s)
	jobs := map[string]string{}
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		// Consume through both servers meanwhile.
		api := a.API
		if i%2 == 1 {
			api = b.API
		}
		for id, body := range drainJobs(t, api, "s2", token, "q") {
			jobs[id] = body
		}
		time.Sleep(500 * time.Millisecond)
	}
	checkExactlyOnce(t, b.API, "s2", token, "q", *s.NextAt, jobs)
}

// TestE2EScheduleKill: two kairos-server processes run an @every 1s
// schedule while each is SIGKILLed and restarted in turn: no tick is lost
// or doubled.
func TestE2EScheduleKill(t *testing.T) {
	t.Parallel()
	d := soak(t)
	bin := buildServer(t)
	rs := redistest.Start(t)
	procs := []*serverProc{newServerProc(t, bin, rs.Addr), newServerProc(t, bin, rs.Addr)}
	for _, p := range procs {
		p.start()
	}
	tr := doHTTP(t, http.MethodPost, procs[0].admin+"/token/sk?description=kill", "", nil, nil)
	tr.wantStatus(t, http.StatusCreated)
	var tok struct{ Token string }
	tr.decode(t, &tok)
	r := doHTTP(t, http.MethodPut, procs[0].api+"/api/sk/q/schedule/s?cron=%40every+1s", tok.Token, []byte("t"), nil)
	r.wantStatus(t, http.StatusOK)
	var s scheduleJSON
	r.decode(t, &s)
	jobs := map[string]string{}
	deadline := time.Now().Add(d)
	kills := 0
	for i := 0; time.Now().Before(deadline); i++ {
		// Kill one server at a moment that drifts across the tick, let the
		// other fire alone, start it again.
		p := procs[i%2]
		time.Sleep(time.Duration(300+137*i%700) * time.Millisecond)
		p.kill()
		kills++
		time.Sleep(1200 * time.Millisecond)
		p.start()
		for id, body := range drainJobs(t, procs[(i+1)%2].api, "sk", tok.Token, "q") {
			jobs[id] = body
		}
	}
	t.Logf("%d kills", kills)
	checkExactlyOnce(t, procs[0].api, "sk", tok.Token, "q", *s.NextAt, jobs)
}
