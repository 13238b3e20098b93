package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/auth"
)

// TestReleaseSaysWhy, on miniredis and a real Redis: release takes its
// error text from the query or a JSON body (cut at 4096 bytes, a bad body
// refused), consume's X-Kairos-Worker names the delivery, peek job with
// X-Kairos-Extensions shows the attempts and the last error (and without
// it answers lmstfy's fields only), the dead letter lists and filters by
// the last error, and the bulk routes act on IDs or on a match.
func TestReleaseSaysWhy(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t)})
			tok := l.token(t, "ns", auth.Scope{})
			h := map[string]string{"X-Token": tok}
			ext := map[string]string{"X-Token": tok, "X-Kairos-Extensions": "1"}
			type consumed struct {
				JobID   string `json:"job_id"`
				Receipt string `json:"receipt"`
			}
			take := func(worker string) consumed {
				t.Helper()
				hh := map[string]string{"X-Token": tok, "X-Kairos-Extensions": "1"}
				if worker != "" {
					hh["X-Kairos-Worker"] = worker
				}
				r := liveDo(t, "GET", l.api+"/api/ns/q?timeout=0&ttr=60", nil, hh)
				var c consumed
				if r.status != 200 || json.Unmarshal([]byte(r.body), &c) != nil || c.Receipt == "" {
					t.Fatalf("consume: %d %s", r.status, r.body)
				}
				return c
			}
			pub := liveDo(t, "PUT", l.api+"/api/ns/q?tries=3", strings.NewReader("x"), h)
			if pub.status != 201 {
				t.Fatalf("publish: %d %s", pub.status, pub.body)
			}
			c := take("host-1:42")
			rel := l.api + "/api/ns/q/job/" + c.JobID + "/release?receipt=" + c.Receipt
			if r := liveDo(t, "PUT", rel, strings.NewReader("{nope"), h); r.status != 400 || r.body != `{"error":"invalid body: a JSON object {\"error\":\"…\"}"}` {
				t.Fatalf("bad body: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "PUT", rel+"&error=db%20timeout", nil, h); r.status != 204 {
				t.Fatalf("release with error=: %d %s", r.status, r.body)
			}
			c = take("")
			long := strings.Repeat("x", 5000)
			body, _ := json.Marshal(map[string]string{"error": "panic: boom\n" + long})
			rel = l.api + "/api/ns/q/job/" + c.JobID + "/release?receipt=" + c.Receipt
			if r := liveDo(t, "PUT", rel, strings.NewReader(string(body)), map[string]string{"X-Token": tok, "Content-Type": "application/json"}); r.status != 204 {
				t.Fatalf("release with a body: %d %s", r.status, r.body)
			}
			c = take("w2")
			if r := liveDo(t, "PUT", l.api+"/api/ns/q/job/"+c.JobID+"/release?receipt="+c.Receipt+"&error=gave%20up", nil, h); r.status != 204 {
				t.Fatalf("last release: %d %s", r.status, r.body)
			}
			// lmstfy's peek job: no new key.
			if r := liveDo(t, "GET", l.api+"/api/ns/q/job/"+c.JobID, nil, h); r.status != 200 || strings.Contains(r.body, "attempts") || strings.Contains(r.body, "last_error") {
				t.Fatalf("lmstfy peek job: %s", r.body)
			}
			r := liveDo(t, "GET", l.api+"/api/ns/q/job/"+c.JobID, nil, ext)
			var j struct {
				State     string        `json:"state"`
				LastError string        `json:"last_error"`
				Attempts  []attemptJSON `json:"attempts"`
			}
			if r.status != 200 || json.Unmarshal([]byte(r.body), &j) != nil {
				t.Fatalf("peek job: %d %s", r.status, r.body)
			}
			if j.State != "dead" || len(j.Attempts) != 3 || j.LastError != "gave up" {
				t.Fatalf("peek job: %s", r.body)
			}
			a3, a2, a1 := j.Attempts[0], j.Attempts[1], j.Attempts[2]
			if a1.Outcome != "nacked" || a1.Worker != "host-1:42" || a1.Error != "db timeout" || a1.StartMS == 0 || a1.EndMS < a1.StartMS ||
				a2.Worker != "" || len(a2.Error) != 4096 || !strings.HasPrefix(a2.Error, "panic: boom\nxxx") || a2.StartMS == 0 ||
				a3.Worker != "w2" || a3.Delivery != 3 {
				t.Fatalf("attempts: %+v %+v %+v", a1, a2, a3)
			}
			if !strings.Contains(r.body, `{"attempts":[{"delivery":3,"duration_ms":`) {
				t.Fatalf("attempts first, keys in order: %s", r.body[:min(len(r.body), 120)])
			}
			// The dead letter: last_error, and the error filter.
			r = liveDo(t, "GET", l.api+"/api/ns/q/deadletter/jobs?error=gave", nil, h)
			if r.status != 200 || !strings.Contains(r.body, `"last_error":"gave up"`) || !strings.Contains(r.body, `"total":1`) {
				t.Fatalf("dead letter by error: %s", r.body)
			}
			if r = liveDo(t, "GET", l.api+"/api/ns/q/deadletter/jobs?error=nothing", nil, h); r.body != `{"jobs":[],"next_offset":-1,"total":1}` {
				t.Fatalf("dead letter by another error: %s", r.body)
			}
			// Bulk: a bad body, IDs, a match.
			for _, b := range []string{``, `{}`, `{"job_ids":[]}`, `{"job_ids":["a"],"match":{}}`, `{"match":{"reason":"sad"}}`} {
				if r := liveDo(t, "POST", l.api+"/api/ns/q/deadletter/jobs/delete", strings.NewReader(b), h); r.status != 400 {
					t.Fatalf("bulk %q: %d %s", b, r.status, r.body)
				}
			}
			if r := liveDo(t, "POST", l.api+"/api/ns/q/deadletter/jobs/respawn", strings.NewReader(`{"job_ids":["`+c.JobID+`","01ZZZZZZZZZZZZZZZZZZZZZZZZ"],"ttl":60}`), h); r.status != 200 || r.body != `{"count":1,"missing":["01ZZZZZZZZZZZZZZZZZZZZZZZZ"],"more":false}` {
				t.Fatalf("bulk respawn: %d %s", r.status, r.body)
			}
			c = take("")
			if r := liveDo(t, "PUT", l.api+"/api/ns/q/job/"+c.JobID+"/release?receipt="+c.Receipt+"&error=again", nil, h); r.status != 204 {
				t.Fatalf("release: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "POST", l.api+"/api/ns/q/deadletter/jobs/delete", strings.NewReader(`{"match":{"reason":"nacked","error":"again"}}`), h); r.status != 200 || r.body != `{"count":1,"more":false}` {
				t.Fatalf("bulk delete by match: %d %s", r.status, r.body)
			}
			if r := liveDo(t, "GET", l.api+"/api/ns/q/job/"+c.JobID, nil, h); r.status != 404 {
				t.Fatalf("deleted job: %d %s", r.status, r.body)
			}
		})
	}
}
