package server

import (
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
)

// TestLimitChangeAppliesOnEveryServer: two servers on one Redis, the
// second one not reloading its limits during the test. A limit raised,
// lowered or deleted through the first server's admin API judges the very
// next request on the second.
func TestLimitChangeAppliesOnEveryServer(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			a := startLive(t, liveOptions{client: backend(t)})
			b := startLive(t, liveOptions{client: a.client, throttleRefresh: time.Hour})
			tok := a.token(t, "ns", auth.Scope{})
			hdr := map[string]string{"X-Token": tok}
			setLimit := func(body string) {
				t.Helper()
				r := liveDo(t, "PUT", a.admin+"/token/ns/"+tok+"/limit", strings.NewReader(body), nil)
				if r.status != 200 {
					t.Fatalf("PUT limit %s: %d %s", body, r.status, r.body)
				}
			}
			publish := func(l *live) int {
				t.Helper()
				return liveDo(t, "PUT", l.api+"/api/ns/q", strings.NewReader("x"), hdr).status
			}
			setLimit(`{"write":1,"interval":60}`)
			if err := b.throttler.Reload(t.Context()); err != nil { // b knows the limit, then never reloads
				t.Fatal(err)
			}
			if got := []int{publish(b), publish(b)}; got[0] != 201 || got[1] != 429 {
				t.Fatalf("under write 1/60s: %v, want [201 429]", got)
			}

			setLimit(`{"write":3,"interval":60}`) // raised: 2 more now
			if got := []int{publish(b), publish(b), publish(b)}; got[0] != 201 || got[1] != 201 || got[2] != 429 {
				t.Errorf("after raising to 3 on the other server: %v, want [201 201 429]", got)
			}

			setLimit(`{"write":10,"interval":60}`)
			setLimit(`{"write":2,"interval":60}`) // lowered below the 3 made
			if got := publish(b); got != 429 {
				t.Errorf("after lowering to 2 on the other server: %d, want 429", got)
			}

			if r := liveDo(t, "DELETE", a.admin+"/token/ns/"+tok+"/limit", nil, nil); r.status != 200 {
				t.Fatalf("DELETE limit: %d %s", r.status, r.body)
			}
			for i := range 5 {
				if got := publish(b); got != 201 {
					t.Fatalf("publish %d after deleting the limit on the other server: %d, want 201", i, got)
				}
			}
		})
	}
}
