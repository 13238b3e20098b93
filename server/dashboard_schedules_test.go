package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/auth"
)

// TestDashboardScheduleSection checks the queue page's Schedules section on
// each live backend: a schedule made through the API is listed, and the
// page's CSRF-checked pause and delete POSTs change it as the API shows.
func TestDashboardScheduleSection(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t)})
			tok := map[string]string{"X-Token": l.token(t, "ns", auth.Scope{})}
			if r := liveDo(t, "PUT", l.api+"/api/ns/q/schedule/nightly?cron=0+3+*+*+*&tz=Europe/Paris", strings.NewReader("x"), tok); r.status != 200 {
				t.Fatalf("put schedule: %d %s", r.status, r.body)
			}
			// A job makes ns/q a queue the pool knows, so that its page
			// stays (with an empty section) once its one schedule is
			// deleted: a queue with no job, settings or schedule that was
			// never published to is a mistyped name (404).
			if r := liveDo(t, "PUT", l.api+"/api/ns/q?delay=3600", strings.NewReader("j"), tok); r.status != http.StatusCreated {
				t.Fatalf("publish: %d %s", r.status, r.body)
			}
			page := "/ui/queue/default/ns/q"
			r := liveDo(t, "GET", l.admin+page, nil, nil)
			if r.status != 200 || !strings.Contains(r.body, `data-schedule="nightly"`) || !strings.Contains(r.body, "Europe/Paris") ||
				!strings.Contains(r.body, `action="/ui/schedule/default/ns/q/nightly/pause"`) {
				t.Fatalf("queue page: %d, want the schedule listed with a pause form:\n%s", r.status, r.body)
			}
			var csrf string
			for _, c := range (&http.Response{Header: r.header}).Cookies() {
				if c.Name == "kairos_csrf" {
					csrf = c.Value
				}
			}
			post := func(action string, withToken bool) liveResponse {
				t.Helper()
				form := url.Values{}
				if withToken {
					form.Set("_csrf", csrf)
				}
				return liveDo(t, "POST", l.admin+"/ui/schedule/default/ns/q/nightly/"+action, strings.NewReader(form.Encode()),
					map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Cookie": "kairos_csrf=" + csrf})
			}
			paused := func() string {
				return liveDo(t, "GET", l.api+"/api/ns/q/schedule/nightly", nil, tok).body
			}
			if r := post("pause", false); r.status != http.StatusForbidden || strings.Contains(paused(), `"paused":true`) {
				t.Fatalf("pause without the CSRF token: %d, want 403 and nothing done", r.status)
			}
			if r := post("pause", true); r.status != http.StatusSeeOther || r.header.Get("Location") != page+"#schedules" {
				t.Fatalf("pause: %d %v", r.status, r.header)
			}
			if !strings.Contains(paused(), `"paused":true`) {
				t.Fatalf("not paused: %s", paused())
			}
			if r := post("delete", true); r.status != http.StatusSeeOther {
				t.Fatalf("delete: %d", r.status)
			}
			if r := liveDo(t, "GET", l.api+"/api/ns/q/schedule/nightly", nil, tok); r.status != http.StatusNotFound {
				t.Fatalf("after delete: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "GET", l.admin+page, nil, nil); !strings.Contains(r.body, `id="no-schedules"`) {
				t.Fatalf("queue page after delete: want the empty section")
			}
		})
	}
}
