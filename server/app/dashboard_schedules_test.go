package app_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestDashboardSchedules checks the queue page's Schedules section over
// real HTTP on a real redis-server: schedules made through the API are
// listed with their spec, zone, policy, state, next and last ticks and a
// link to the last job; pause, resume and delete are CSRF-checked form
// POSTs whose effect shows through the API, and the page's form creates
// one (refusing a bad cron, zone, name or policy, and a name in use).
func TestDashboardSchedules(t *testing.T) {
	e := startBrowserE2E(t)
	const q = "cronq"
	put := func(name, query string) {
		t.Helper()
		r := doHTTP(t, http.MethodPut, e.API+"/api/"+e.NS+"/"+q+"/schedule/"+name+"?"+query, e.Token, []byte("tick"), nil)
		r.wantStatus(t, http.StatusOK)
	}
	put("nightly", url.Values{"cron": {"0 3 * * *"}, "tz": {"Europe/Paris"}, "missed": {"last"}}.Encode())
	put("every-second", url.Values{"cron": {"@every 1s"}}.Encode())
	getSched := func(name string) (out struct {
		Paused    bool   `json:"paused"`
		LastJobID string `json:"last_job_id"`
	}, status int) {
		t.Helper()
		r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+q+"/schedule/"+name, e.Token, nil, nil)
		if r.Status == http.StatusOK {
			if err := json.Unmarshal(r.Body, &out); err != nil {
				t.Fatal(err)
			}
		}
		return out, r.Status
	}
	// Wait for a tick of every-second, so the page has a last job to link.
	var lastJob string
	for deadline := time.Now().Add(20 * time.Second); lastJob == ""; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("every-second never fired")
		}
		s, _ := getSched("every-second")
		lastJob = s.LastJobID
	}

	page := "/ui/queue/default/" + e.NS + "/" + q
	st, h, body := dashDo(t, e, "GET", page, true, nil, nil)
	if st != http.StatusOK {
		t.Fatalf("queue page: %d", st)
	}
	var csrf string
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "kairos_csrf" {
			csrf = c.Value
		}
	}
	for _, want := range []string{
		`id="schedules"`, `Schedules (2)`, `data-schedule="nightly"`, `<code>0 3 * * *</code>`, "Europe/Paris", "<td>last</td>",
		`data-schedule="every-second"`, `<code>@every 1s</code>`, "<td>skip</td>",
		`action="` + "/ui/schedule/default/" + e.NS + "/" + q + `/nightly/pause"`,
		`action="` + "/ui/schedule/default/" + e.NS + "/" + q + `/nightly/delete"`,
		`href="/ui/job/default/` + e.NS + "/" + q + "/",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("queue page lacks %q", want)
		}
	}
	if !strings.Contains(body, `class="last-job">`) {
		t.Errorf("queue page: no link to every-second's last job")
	}
	// The live refresh carries the section too.
	if _, _, live := dashDo(t, e, "GET", page, true, nil, map[string]string{"X-Kairos-Live": "1"}); !strings.Contains(live, `data-live="schedules"`) {
		t.Errorf("live refresh lacks the schedules region")
	}

	cookie := map[string]string{"Cookie": "kairos_csrf=" + csrf}
	action := func(name, a string, form url.Values, hdr map[string]string) (int, string, string) {
		t.Helper()
		st, h, _ := dashDo(t, e, "POST", "/ui/schedule/default/"+e.NS+"/"+q+"/"+name+"/"+a, true, form, hdr)
		var flash string
		for _, c := range (&http.Response{Header: h}).Cookies() {
			if c.Name == "kairos_flash" {
				flash, _ = url.QueryUnescape(c.Value)
			}
		}
		return st, h.Get("Location"), flash
	}
	// Without the CSRF token: refused, nothing done.
	if st, _, _ := action("nightly", "pause", url.Values{}, cookie); st != http.StatusForbidden {
		t.Fatalf("pause without the token: %d, want 403", st)
	}
	if s, _ := getSched("nightly"); s.Paused {
		t.Fatal("a refused pause paused the schedule")
	}
	tok := url.Values{"_csrf": {csrf}}
	st, loc, flash := action("nightly", "pause", tok, cookie)
	if st != http.StatusSeeOther || loc != page+"#schedules" || flash != "oschedule nightly paused" {
		t.Fatalf("pause: %d %q %q", st, loc, flash)
	}
	if s, _ := getSched("nightly"); !s.Paused {
		t.Fatal("nightly not paused after the UI's pause")
	}
	_, _, body = dashDo(t, e, "GET", page, true, nil, cookie)
	if !strings.Contains(body, "/nightly/resume") || strings.Contains(body, "/nightly/pause") {
		t.Errorf("the page does not offer to resume the paused schedule")
	}
	if st, _, flash = action("nightly", "resume", tok, cookie); st != http.StatusSeeOther || flash != "oschedule nightly resumed" {
		t.Fatalf("resume: %d %q", st, flash)
	}
	if s, _ := getSched("nightly"); s.Paused {
		t.Fatal("nightly still paused after the UI's resume")
	}
	if st, _, flash = action("nightly", "delete", tok, cookie); st != http.StatusSeeOther || flash != "oschedule nightly deleted" {
		t.Fatalf("delete: %d %q", st, flash)
	}
	if _, st := getSched("nightly"); st != http.StatusNotFound {
		t.Fatalf("nightly after the UI's delete: %d, want 404", st)
	}
	// Deleting it again: refused with the API's message, back to the page.
	if st, _, flash = action("nightly", "delete", tok, cookie); st != http.StatusSeeOther || flash != "eschedule not found" {
		t.Fatalf("delete again: %d %q", st, flash)
	}
	if st, _, _ = action("nightly", "explode", tok, cookie); st != http.StatusNotFound {
		t.Fatalf("unknown action: %d, want 404", st)
	}
	if st, _, _ = action("bad%20name", "pause", tok, cookie); st != http.StatusBadRequest {
		t.Fatalf("bad schedule name: %d, want 400", st)
	}
	if st, _ := dashDoStatus(t, e, "/ui/schedule/default/bad.ns/"+q+"/every-second/pause", tok, cookie); st != http.StatusBadRequest {
		t.Fatalf("bad namespace: %d, want 400", st)
	}
	if st, _, _ = action("every-second", "delete", tok, cookie); st != http.StatusSeeOther {
		t.Fatalf("delete every-second: %d", st)
	}
	// The page's form creates one; a bad cron, zone or name, or a name in
	// use, is refused with the reason and stores nothing.
	create := func(form url.Values) (int, string, string) {
		t.Helper()
		form.Set("_csrf", csrf)
		st, h, _ := dashDo(t, e, "POST", page+"/schedule", true, form, cookie)
		var flash string
		for _, c := range (&http.Response{Header: h}).Cookies() {
			if c.Name == "kairos_flash" {
				flash, _ = url.QueryUnescape(c.Value)
			}
		}
		return st, h.Get("Location"), flash
	}
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"name": {"ui-made"}, "cron": {"61 * * * *"}}, "einvalid cron: "},
		{url.Values{"name": {"ui-made"}, "cron": {"@daily"}, "tz": {"Mars/Olympus"}}, "einvalid tz: "},
		{url.Values{"name": {"ui made"}, "cron": {"@daily"}}, "einvalid schedule name"},
		{url.Values{"name": {"ui-made"}, "cron": {""}}, "einvalid cron: the cron parameter is required"},
		{url.Values{"name": {"ui-made"}, "cron": {"@daily"}, "missed": {"all"}}, "einvalid missed"},
	} {
		if st, _, flash := create(tc.form); st != http.StatusSeeOther || !strings.HasPrefix(flash, tc.want) {
			t.Errorf("create %v: %d %q, want a flash starting %q", tc.form, st, flash, tc.want)
		}
	}
	if _, st := getSched("ui-made"); st != http.StatusNotFound {
		t.Fatalf("a refused create stored a schedule: %d", st)
	}
	st, loc, flash = create(url.Values{"name": {"ui-made"}, "cron": {"15 4 * * 1"}, "tz": {"America/New_York"}, "missed": {"last"}, "body": {`<b>"hi"</b>`}})
	if st != http.StatusSeeOther || loc != page+"#schedules" || flash != "oschedule ui-made created" {
		t.Fatalf("create: %d %q %q", st, loc, flash)
	}
	r := doHTTP(t, http.MethodGet, e.API+"/api/"+e.NS+"/"+q+"/schedule/ui-made", e.Token, nil, nil)
	var made struct {
		Cron, TZ, Missed string
		Paused           bool
		Job              struct{ Data []byte }
	}
	r.decode(t, &made)
	if made.Cron != "15 4 * * 1" || made.TZ != "America/New_York" || made.Missed != "last" || made.Paused || string(made.Job.Data) != `<b>"hi"</b>` {
		t.Fatalf("the schedule made from the page: %+v", made)
	}
	if st, _, flash = create(url.Values{"name": {"ui-made"}, "cron": {"@daily"}}); st != http.StatusSeeOther || !strings.HasPrefix(flash, "eschedule ui-made exists") {
		t.Fatalf("create over an existing one: %d %q", st, flash)
	}
	if st, _, _ = action("ui-made", "delete", tok, cookie); st != http.StatusSeeOther {
		t.Fatalf("delete ui-made: %d", st)
	}

	_, _, body = dashDo(t, e, "GET", page, true, nil, cookie)
	if !strings.Contains(body, `Schedules (0)`) || !strings.Contains(body, `id="no-schedules"`) {
		t.Errorf("queue page after deleting both schedules: want the empty section")
	}
}

func dashDoStatus(t *testing.T, e *browserE2E, u string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	st, _, body := dashDo(t, e, "POST", u, true, form, hdr)
	return st, body
}
