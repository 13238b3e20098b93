package audit

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestMain stops the Redis Cluster the tests share.
func TestMain(m *testing.M) { redistest.Main(m) }

// forEachRedis runs fn on miniredis, on a real redis-server and on the
// shared 6-node Redis Cluster (flushed first), each empty.
func forEachRedis(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		fn(t, c)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, redistest.Start(t).Client())
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.SharedCluster(t)
		c.Flush(t)
		fn(t, c.Client(t))
	})
}

func entry(i int, account, ns string) Entry {
	return Entry{
		Time:    time.Date(2026, 11, 28, 12, 0, i, 0, time.UTC),
		Account: account, Authenticated: true, Remote: "127.0.0.1", Source: "api",
		Method: "PUT", Route: "/queue/:namespace/:queue/config",
		Target: map[string]string{"namespace": ns, "queue": fmt.Sprintf("q%d", i)},
		Status: 200, OK: true,
	}
}

// seed records n entries (i = 1..n) and returns them as stored (with Seq).
func seed(tb testing.TB, s *Store, n int, account func(i int) string) []Entry {
	tb.Helper()
	var out []Entry
	for i := 1; i <= n; i++ {
		e := entry(i, account(i), fmt.Sprintf("ns%d", i%3))
		seq, err := s.Record(context.Background(), e)
		if err != nil {
			tb.Fatal(err)
		}
		e.Seq = seq
		out = append(out, e)
	}
	return out
}

// diff is "" when the entries are equal, else both lists.
func diff(want, got []Entry) string {
	if len(want) == 0 && len(got) == 0 || reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("-want %+v\n+got %+v", want, got)
}

func reversed(es []Entry) []Entry {
	out := make([]Entry, 0, len(es))
	for i := len(es) - 1; i >= 0; i-- {
		out = append(out, es[i])
	}
	return out
}

// TestStoreRecordList: entries come back newest first as recorded, with
// their sequence numbers; pages follow one another without a gap or a
// repeat, also when entries are recorded between two pages.
func TestStoreRecordList(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		if err := LoadScripts(ctx, c); err != nil {
			t.Fatal(err)
		}
		s := NewStore(c, 0)
		if s.MaxEntries() != DefaultMaxEntries {
			t.Fatalf("MaxEntries = %d", s.MaxEntries())
		}
		got, next, err := s.List(ctx, Query{})
		if err != nil || len(got) != 0 || next != 0 {
			t.Fatalf("empty log: %v, %d, %v", got, next, err)
		}
		all := seed(t, s, 7, func(int) string { return "alice" })
		for i, e := range all {
			if e.Seq != int64(i+1) {
				t.Fatalf("entry %d: seq %d", i, e.Seq)
			}
		}
		got, next, err = s.List(ctx, Query{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := diff(reversed(all), got); diff != "" {
			t.Fatalf("List (-want +got):\n%s", diff)
		}
		if next != 0 {
			t.Fatalf("next = %d on the only page", next)
		}

		// Pages of 3: 7 6 5 | (two new entries) 4 3 2 | 1.
		p1, next, err := s.List(ctx, Query{Limit: 3})
		if err != nil || next != 5 {
			t.Fatalf("page 1: next %d, %v", next, err)
		}
		more := seed(t, s, 2, func(int) string { return "bob" })
		if more[0].Seq != 8 {
			t.Fatalf("seq after 7: %d", more[0].Seq)
		}
		p2, next, err := s.List(ctx, Query{Limit: 3, Before: next})
		if err != nil || next != 2 {
			t.Fatalf("page 2: next %d, %v", next, err)
		}
		p3, next, err := s.List(ctx, Query{Limit: 3, Before: next})
		if err != nil || next != 0 {
			t.Fatalf("page 3: next %d, %v", next, err)
		}
		if diff := diff(reversed(all), append(append(p1, p2...), p3...)); diff != "" {
			t.Fatalf("pages (-want +got):\n%s", diff)
		}
	})
}

// TestStoreCap: the log keeps the newest MaxEntries entries, and paging
// past the oldest kept one ends the list.
func TestStoreCap(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := NewStore(c, 5)
		all := seed(t, s, 12, func(int) string { return "alice" })
		if n, err := c.LLen(ctx, ListKey).Result(); err != nil || n != 5 {
			t.Fatalf("LLEN = %d, %v; want 5", n, err)
		}
		got, next, err := s.List(ctx, Query{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if diff := diff(reversed(all[7:]), got); diff != "" {
			t.Fatalf("kept (-want +got):\n%s", diff)
		}
		if next != 0 {
			t.Fatalf("next = %d", next)
		}
		got, next, err = s.List(ctx, Query{Limit: 2, Before: 9})
		if err != nil || next != 0 || len(got) != 1 || got[0].Seq != 8 {
			t.Fatalf("before 9: %+v, next %d, %v; want seq 8 alone", got, next, err)
		}
		got, _, err = s.List(ctx, Query{Before: 3})
		if err != nil || len(got) != 0 {
			t.Fatalf("before a trimmed entry: %+v, %v", got, err)
		}
	})
}

// TestStoreFilter: account and namespace filters read on through the list
// (past MaxPage entries) and page like the unfiltered list.
func TestStoreFilter(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := NewStore(c, 0)
		n := MaxPage + 200
		acct := func(i int) string {
			if i%100 == 0 {
				return "carol"
			}
			return "alice"
		}
		all := seed(t, s, n, acct)
		var carol []Entry
		for _, e := range reversed(all) {
			if e.Account == "carol" {
				carol = append(carol, e)
			}
		}
		got, next, err := s.List(ctx, Query{Account: "carol", Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		if diff := diff(carol[:4], got); diff != "" {
			t.Fatalf("carol page 1 (-want +got):\n%s", diff)
		}
		got2, next2, err := s.List(ctx, Query{Account: "carol", Limit: 4, Before: next})
		if err != nil {
			t.Fatal(err)
		}
		if diff := diff(carol[4:], got2); diff != "" {
			t.Fatalf("carol page 2 (-want +got):\n%s", diff)
		}
		if next2 != 0 {
			t.Fatalf("next after the last carol entry = %d", next2)
		}
		got, _, err = s.List(ctx, Query{Account: "carol", Namespace: "ns1", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if e.Account != "carol" || e.Target["namespace"] != "ns1" {
				t.Fatalf("filter let through %+v", e)
			}
		}
		if len(got) != 3 { // i = 100, 400, 700 (i%3 == 1) of 100..700
			t.Fatalf("carol in ns1: %d entries, want 3", len(got))
		}
		got, next, err = s.List(ctx, Query{Account: "nobody"})
		if err != nil || len(got) != 0 || next != 0 {
			t.Fatalf("no match: %v, %d, %v", got, next, err)
		}

		// A scan budget of one read (seq 700..201): a short page (5 of
		// carol's 7) and where to go on.
		s.scan = MaxPage
		got, next, err = s.List(ctx, Query{Account: "carol", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if diff := diff(carol[:5], got); diff != "" || next != int64(n-MaxPage+1) {
			t.Fatalf("budgeted page, next %d (-want +got):\n%s", next, diff)
		}
		got, next, err = s.List(ctx, Query{Account: "carol", Limit: 100, Before: next})
		if err != nil {
			t.Fatal(err)
		}
		if diff := diff(carol[5:], got); diff != "" || next != 0 {
			t.Fatalf("after the budgeted page, next %d (-want +got):\n%s", next, diff)
		}
	})
}

// TestStoreConcurrent: concurrent recorders get distinct sequence numbers
// and the list holds each entry once, in sequence order.
func TestStoreConcurrent(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s := NewStore(c, 0)
		const workers, each = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := s.Record(ctx, entry(i, fmt.Sprintf("w%d", w), "ns")); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, _, err := s.List(ctx, Query{Limit: MaxPage})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != workers*each {
			t.Fatalf("%d entries, want %d", len(got), workers*each)
		}
		for i, e := range got {
			if want := int64(workers*each - i); e.Seq != want {
				t.Fatalf("entry %d: seq %d, want %d", i, e.Seq, want)
			}
		}
	})
}

// TestStoreDown: Record and List fail (they do not hang) when the Redis
// is gone.
func TestStoreDown(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s := NewStore(c, 0)
	m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Record(ctx, entry(1, "a", "ns")); err == nil {
		t.Fatal("Record on a closed Redis: no error")
	}
	if _, _, err := s.List(ctx, Query{}); err == nil {
		t.Fatal("List on a closed Redis: no error")
	}
}
