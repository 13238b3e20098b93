package server

import (
	"context"
	"fmt"
	"html"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

var (
	deadRowRE  = regexp.MustCompile(`<tr data-job="([0-9A-Z]+)">`)
	deadLinkRE = regexp.MustCompile(`<a href="([^"]*)" id="dead-(newest|newer|older|oldest)">`)
)

// deadSection is the dead letter of a queue page as the test reads it:
// the job IDs in page order and the pager's links by name.
type deadSection struct {
	ids   []string
	links map[string]string
	body  string
}

func getDeadSection(t *testing.T, l *live, target string) deadSection {
	t.Helper()
	r := liveDo(t, "GET", l.admin+target, nil, nil)
	if r.status != 200 {
		t.Fatalf("GET %s: %d %s", target, r.status, r.body)
	}
	i := strings.Index(r.body, `id="dead"`)
	if i < 0 {
		t.Fatalf("GET %s: no dead letter section", target)
	}
	sec := r.body[i:]
	sec = sec[:strings.Index(sec, "</section>")]
	out := deadSection{links: map[string]string{}, body: sec}
	for _, m := range deadRowRE.FindAllStringSubmatch(sec, -1) {
		out.ids = append(out.ids, m[1])
	}
	for _, m := range deadLinkRE.FindAllStringSubmatch(sec, -1) {
		out.links[m[2]] = html.UnescapeString(m[1])
	}
	return out
}

// TestDashboardDeadLetterPages reproduces issue #33's finding: the dead
// letter read oldest first, "older" led to newer deaths, and the recent
// ones were pages away with no link to the last page. The queue page now
// shows the newest death first, pages both ways with newest, newer,
// older and oldest links, and filters by reason.
func TestDashboardDeadLetterPages(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t)})
			ctx := context.Background()
			const n = 45 // two full pages of 20 and one of 5
			for i := 0; i < n; i++ {
				if _, err := l.eng.Publish(ctx, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte(fmt.Sprint(i)), Tries: 1}); err != nil {
					t.Fatal(err)
				}
			}
			jobs, err := l.eng.Consume(ctx, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Minute, Count: n})
			if err != nil || len(jobs) != n {
				t.Fatalf("consume: %d jobs, %v", len(jobs), err)
			}
			// ids in order of death; the even ones nacked, the odd ones
			// recorded as TTR expiries.
			var ids, nacked []string
			for i, j := range jobs {
				reason := engine.ReasonTTRExpired
				if i%2 == 0 {
					reason = engine.ReasonNacked
					nacked = append(nacked, j.ID)
				}
				if err := l.eng.Release(ctx, &engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: j.ID, Receipt: j.Receipt, Reason: reason}); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, j.ID)
			}
			// newestFirst is ids[from:to] newest first.
			newestFirst := func(ids []string, from, to int) []string {
				s := slices.Clone(ids[from:to])
				slices.Reverse(s)
				return s
			}
			check := func(what string, got deadSection, want []string, links ...string) {
				t.Helper()
				if !slices.Equal(got.ids, want) {
					t.Fatalf("%s: rows %v, want %v", what, got.ids, want)
				}
				var have []string
				for _, k := range []string{"newest", "newer", "older", "oldest"} {
					if got.links[k] != "" {
						have = append(have, k)
					}
				}
				if !slices.Equal(have, links) {
					t.Fatalf("%s: links %v, want %v", what, got.links, links)
				}
			}

			first := getDeadSection(t, l, "/ui/queue/default/ns/q")
			check("first page", first, newestFirst(ids, 25, 45), "older", "oldest")
			second := getDeadSection(t, l, first.links["older"])
			check("older", second, newestFirst(ids, 5, 25), "newest", "newer", "older", "oldest")
			check("newer from the second page", getDeadSection(t, l, second.links["newer"]), newestFirst(ids, 25, 45), "older", "oldest")
			check("older from the second page", getDeadSection(t, l, second.links["older"]), newestFirst(ids, 0, 5), "newest", "newer")
			last := getDeadSection(t, l, first.links["oldest"])
			check("oldest", last, newestFirst(ids, 0, 20), "newest", "newer")
			check("newer from the oldest page", getDeadSection(t, l, last.links["newer"]), newestFirst(ids, 20, 40), "newest", "newer", "older", "oldest")
			check("newest from the oldest page", getDeadSection(t, l, last.links["newest"]), newestFirst(ids, 25, 45), "older", "oldest")

			// Filtered: 23 nacked deaths, 20 on the first page.
			nf := getDeadSection(t, l, "/ui/queue/default/ns/q?dead_reason=nacked")
			check("nacked", nf, newestFirst(nacked, 3, 23), "older", "oldest")
			if !strings.Contains(nf.body, `<option value="nacked" selected>`) {
				t.Fatalf("the filter does not show nacked selected:\n%s", nf.body)
			}
			no := getDeadSection(t, l, nf.links["older"])
			check("nacked, older", no, newestFirst(nacked, 0, 3), "newest", "newer")
			if !strings.Contains(nf.links["older"], "dead_reason=nacked") {
				t.Fatalf("the older link drops the filter: %s", nf.links["older"])
			}
			check("nacked, newer again", getDeadSection(t, l, no.links["newer"]), newestFirst(nacked, 3, 23), "older", "oldest")
			check("nacked, oldest", getDeadSection(t, l, nf.links["oldest"]), newestFirst(nacked, 0, 20), "newest", "newer")
			none := getDeadSection(t, l, "/ui/queue/default/ns/q?dead_reason=webhook_failed")
			check("webhook_failed", none, nil)
			if !strings.Contains(none.body, "No dead job webhook_failed") {
				t.Fatalf("webhook_failed: no empty message:\n%s", none.body)
			}
			if r := liveDo(t, "GET", l.admin+"/ui/queue/default/ns/q?dead_reason=bored", nil, nil); r.status != 400 {
				t.Fatalf("unknown reason: %d, want 400", r.status)
			}
		})
	}
}
