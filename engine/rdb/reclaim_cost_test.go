package rdb

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestReclaimCost measures what the reclaimer costs Redis (used_cpu_user
// + used_cpu_sys) per pass, on pools where it finds nothing to remove:
// 10,000 queues of one job, and one queue of a million delayed or ready
// jobs. Opt-in (RECLAIM_COST=1; it publishes two million jobs, minutes):
//
//	RECLAIM_COST=1 go test -run TestReclaimCost -v ./engine/rdb
func TestReclaimCost(t *testing.T) {
	if os.Getenv("RECLAIM_COST") == "" {
		t.Skip("opt-in: RECLAIM_COST=1")
	}
	for _, tc := range []struct {
		name         string
		queues, perQ int
		delay        time.Duration
	}{{"10000 queues x 1 ready", 10000, 1, 0}, {"1 queue x 1,000,000 delayed", 1, 1000000, time.Hour}, {"1 queue x 1,000,000 ready", 1, 1000000, 0}} {
		srv := redistest.Start(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		e, err := New(bg, client, Options{})
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 100)
		var reqs []*engine.PublishRequest
		for q := 0; q < tc.queues; q++ {
			for i := 0; i < tc.perQ; i++ {
				reqs = append(reqs, &engine.PublishRequest{Namespace: "ns", Queue: fmt.Sprintf("q%05d", q), Body: body, Tries: 1, TTL: 2 * time.Hour, Delay: tc.delay})
				if len(reqs) == 1000 || (q == tc.queues-1 && i == tc.perQ-1) {
					for _, r := range reqs {
						if _, err := e.Publish(bg, r); err != nil {
							t.Fatal(err)
						}
					}
					reqs = reqs[:0]
				}
			}
		}
		client.ConfigResetStat(bg)
		c0 := cpuOf(t, client)
		start := time.Now()
		var st ReclaimStats
		for i := 0; i < 10; i++ {
			s, err := e.ReclaimOnce(bg)
			if err != nil {
				t.Fatal(err)
			}
			st.Looked += s.Looked
			st.Calls += s.Calls
		}
		el := time.Since(start)
		c1 := cpuOf(t, client)
		info, _ := client.Info(bg, "commandstats").Result()
		var lines []string
		for _, l := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(l, "cmdstat_evalsha") || strings.HasPrefix(l, "cmdstat_hkeys") {
				lines = append(lines, l)
			}
		}
		t.Logf("%s: 10 passes (the first ones: every queue's ends due) in %v, Redis CPU %.1f ms a pass; looked at %d entries in %d calls; %v", tc.name, el, (c1-c0)*1000/10, st.Looked, st.Calls, lines)
		client.Close()
	}
}

// cpuOf is Redis's CPU time so far, in seconds.
func cpuOf(t *testing.T, c *redis.Client) float64 {
	t.Helper()
	info, _ := c.Info(bg, "cpu").Result()
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			var f float64
			fmt.Sscan(v, &f)
			total += f
		}
	}
	return total
}
