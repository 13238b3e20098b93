package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// steppingClock is real time that also jumps step further at every
// reading, as a loaded server's clock does between two readings.
type steppingClock struct {
	step  time.Duration
	reads atomic.Int64
}

func (c *steppingClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.reads.Add(1)) * c.step)
}

// TestDueAtStoredExactly: a job published with due_at is due at exactly
// that millisecond, however far the clock moves between the server's
// reading and the engine's, through gin and through the event loops, for a
// single and a bulk publish.
func TestDueAtStoredExactly(t *testing.T) {
	for name, loops := range map[string]int{"gin": -1, "event loop": 1} {
		t.Run(name, func(t *testing.T) {
			clock := &steppingClock{step: 7 * time.Millisecond}
			l := startLive(t, liveOptions{now: clock.Now, config: func(c *config.Config) { c.Kairos.EventLoops = loops }})
			tok := l.token(t, "ns", auth.Scope{})
			due := time.Now().Add(time.Hour).UnixMilli()
			rfc := time.UnixMilli(due + 1).Add(300 * time.Microsecond).UTC().Format(time.RFC3339Nano)
			for _, tc := range []struct {
				name, path, dueAt, body string
				want                    int64 // the stored due time, ms
				jobs                    int
			}{
				{"unix ms", "/api/ns/ms", fmt.Sprint(due), "x", due, 1},
				{"RFC 3339 with a fraction of a ms (rounded up)", "/api/ns/rfc", rfc, "x", due + 2, 1},
				{"bulk", "/api/ns/bulk/bulk", fmt.Sprint(due), `["a","b","c"]`, due, 3},
			} {
				r := liveDo(t, "PUT", l.api+tc.path+"?due_at="+strings.ReplaceAll(tc.dueAt, "+", "%2B"), strings.NewReader(tc.body), map[string]string{"X-Token": tok})
				if r.status != 201 {
					t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
				}
				q := strings.TrimPrefix(strings.TrimSuffix(tc.path, "/bulk"), "/api/ns/")
				got, err := l.client.ZRangeWithScores(context.Background(), rdb.TimerKey("ns", q), 0, -1).Result()
				if err != nil || len(got) != tc.jobs {
					t.Fatalf("%s: timer = %v, %v; want %d entries", tc.name, got, err, tc.jobs)
				}
				for _, z := range got {
					if int64(z.Score) != tc.want {
						t.Errorf("%s: stored due time %d, want %d (%+d ms)", tc.name, int64(z.Score), tc.want, int64(z.Score)-tc.want)
					}
				}
			}
		})
	}
}
