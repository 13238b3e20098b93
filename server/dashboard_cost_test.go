package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// redisCalls sums the calls of INFO commandstats: every command Redis ran,
// those of scripts included.
func redisCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if _, rest, ok := strings.Cut(line, ":calls="); ok {
			v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			n += v
		}
	}
	return n
}

// TestDashboardRefreshCost: an open tab on a namespace of 10,000 queues,
// or on the overview of their pool, refreshing every 5 s, costs Redis a
// bounded number of commands a second (issue #33: every refresh used to
// read the 40,000 sizes again, about 8,000 commands a second per tab).
// Two simulated minutes: the dashboard's caches run on a clock the test
// moves, the engine does not Run (no background work), and Redis counts
// every command, those of scripts included.
func TestDashboardRefreshCost(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes to 10,000 queues")
	}
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { client.Close() })
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	eng, err := rdb.New(context.Background(), client, rdb.Options{Logger: log, HistoryFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Parallel() // mostly waiting on Redis and the race detector
	const queues = 10000
	reqs := make([]*engine.PublishRequest, queues)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: "big", Queue: fmt.Sprintf("q%05d", i), Body: []byte("x"), Tries: 1}
	}
	ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
	eng.PublishEach(context.Background(), reqs, ids, errs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(testConfig(), Deps{
		Engines: map[string]engine.Engine{auth.DefaultPool: eng},
		Tokens:  auth.NewStore(redistest.Start(t).Client(), []string{auth.DefaultPool}, log, auth.StoreOptions{}),
		Logger:  log,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var elapsed atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	srv.sizes.now, srv.activity.now = clock, clock
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { httpClient.CloseIdleConnections(); cancel(); <-done })
	admin := "http://" + srv.AdminAddr()

	const refresh, span = 5 * time.Second, 2 * time.Minute
	for _, tab := range []struct {
		path  string
		bound float64 // commands a second
	}{
		{"/ui/ns/default/big", 2000},
		{"/ui/", 3000},
	} {
		elapsed.Store(0)
		srv.sizes.m = map[string]*nsEntry[engine.QueueStats]{} // cold, as a first visit
		srv.activity.m = map[string]*nsEntry[engine.QueueDetail]{}
		start := redisCalls(t, client)
		var first int64
		for at := time.Duration(0); at < span; at += refresh {
			elapsed.Store(int64(at))
			if r := liveDo(t, http.MethodGet, admin+tab.path, nil, nil); r.status != http.StatusOK {
				t.Fatalf("GET %s: %d %s", tab.path, r.status, r.body[:min(len(r.body), 500)])
			}
			if at == 0 {
				first = redisCalls(t, client) - start - 1 // less this INFO
			}
		}
		n := float64(redisCalls(t, client)-start) - float64(span/refresh) // less the INFOs
		perSec := n / span.Seconds()
		t.Logf("a tab on %s, refreshed every %v for %v: %.0f Redis commands a second (a cold refresh: %d commands, %.0f a second if every refresh were cold)",
			tab.path, refresh, span, perSec, first, float64(first)/refresh.Seconds())
		if perSec > tab.bound {
			t.Errorf("a tab on %s costs %.0f Redis commands a second, want at most %.0f", tab.path, perSec, tab.bound)
		}
	}
}
