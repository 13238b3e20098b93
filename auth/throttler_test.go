package auth

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newTestThrottler(tb testing.TB, c redis.UniversalClient, clock *fakeClock) *Throttler {
	tb.Helper()
	opts := ThrottlerOptions{}
	if clock != nil {
		opts.Now = clock.Now
	}
	return NewThrottler(c, quietLogger(), opts)
}

func mustSetLimit(tb testing.TB, th *Throttler, pool, ns, token string, l Limit) {
	tb.Helper()
	if err := th.Set(context.Background(), pool, ns, token, l); err != nil {
		tb.Fatalf("Set(%s/%s/%s, %+v): %v", pool, ns, token, l, err)
	}
}

// allowN calls Allow n times and returns how many were allowed.
func allowN(tb testing.TB, th *Throttler, pool, ns, token string, write bool, n int) int {
	tb.Helper()
	allowed := 0
	for range n {
		ok, err := th.Allow(context.Background(), pool, ns, token, write)
		if err != nil {
			tb.Fatalf("Allow: %v", err)
		}
		if ok {
			allowed++
		}
	}
	return allowed
}

// checkBucketOff checks that a bucket holds only the mark of a deleted
// limit, which expires once every instance has reloaded (2×Refresh).
func checkBucketOff(tb testing.TB, c redis.UniversalClient, key string) {
	tb.Helper()
	ctx := context.Background()
	state, err := c.HGetAll(ctx, key).Result()
	if err != nil || state["off"] != "1" || state["tokens"] != "" {
		tb.Errorf("bucket %s = %v, %v; want only the mark of a deleted limit", key, state, err)
	}
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 2*DefaultRefresh {
		tb.Errorf("bucket %s PTTL = %v, %v; want in (0, %v]", key, ttl, err, 2*DefaultRefresh)
	}
}

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name   string
		limit  Limit
		ok     bool
		reason string
	}{
		{"read only", Limit{Read: 10, Interval: 1}, true, ""},
		{"write only", Limit{Write: 10, Interval: 60}, true, ""},
		{"both", Limit{Read: 1, Write: 2, Interval: 3}, true, ""},
		{"negative read is unlimited", Limit{Read: -1, Write: 2, Interval: 3}, true, ""},
		{"both zero", Limit{Interval: 1}, false, "invalid limit: the read and write of limiter can't be 0 at the same time"},
		{"both negative", Limit{Read: -1, Write: -1, Interval: 1}, false, "invalid limit: the read and write of limiter can't be 0 at the same time"},
		{"zero interval", Limit{Read: 1}, false, "invalid limit: interval should be > 0"},
		{"negative interval", Limit{Write: 1, Interval: -5}, false, "invalid limit: interval should be > 0"},
		{"interval too long", Limit{Write: 1, Interval: MaxLimitInterval + 1}, false, "invalid limit: interval should be <= 1000000000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limit.Validate()
			if tc.ok {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tc.limit, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidLimit) || err.Error() != tc.reason {
				t.Fatalf("Validate(%+v) = %v, want %q wrapping ErrInvalidLimit", tc.limit, err, tc.reason)
			}
		})
	}
}

func TestThrottlerBucketRefill(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		clock := newFakeClock()
		th := newTestThrottler(t, c, clock)
		mustSetLimit(t, th, "", "ns", "tok", Limit{Write: 3, Interval: 1})

		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 3); got != 3 {
			t.Fatalf("first 3 writes: %d allowed, want 3", got)
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 1); got != 0 {
			t.Fatal("4th write allowed, want refused")
		}
		// Reads are unlimited (read = 0).
		if got := allowN(t, th, DefaultPool, "ns", "tok", false, 20); got != 20 {
			t.Fatalf("reads: %d of 20 allowed, want all", got)
		}
		// Refused requests do not consume anything: a third of the interval
		// refills one request.
		clock.Advance(333 * time.Millisecond)
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 1); got != 0 {
			t.Fatal("allowed after 333 ms, want refused (1/3 interval is 334 ms)")
		}
		clock.Advance(time.Millisecond)
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 2); got != 1 {
			t.Fatalf("after 334 ms: %d allowed, want 1", got)
		}
		// A whole interval refills the whole bucket, never more.
		clock.Advance(5 * time.Second)
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 4); got != 3 {
			t.Fatalf("after a full refill: %d of 4 allowed, want 3", got)
		}
		// A clock behind the last refill (another instance's) refills nothing.
		clock.Advance(-10 * time.Second)
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 1); got != 0 {
			t.Fatal("allowed on a clock that went backwards, want refused (bucket empty)")
		}
		clock.Advance(10 * time.Second)
		// Another token, and the same token in another pool, are separate buckets.
		mustSetLimit(t, th, "b", "ns", "tok", Limit{Write: 3, Interval: 1})
		if got := allowN(t, th, "b", "ns", "tok", true, 4); got != 3 {
			t.Fatalf("pool b: %d of 4 allowed, want 3", got)
		}
		if got := allowN(t, th, DefaultPool, "ns", "unlimited", true, 10); got != 10 {
			t.Fatalf("token without a limit: %d of 10 allowed", got)
		}

		// The bucket key expires after about 2 intervals idle.
		ttl, err := c.PTTL(context.Background(), bucketKey(DefaultPool, "ns", "tok", true)).Result()
		if err != nil || ttl <= 0 || ttl > 2*time.Second {
			t.Fatalf("bucket PTTL = %v, %v; want in (0, 2s]", ttl, err)
		}
	})
}

func TestThrottlerRefund(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		clock := newFakeClock()
		th := newTestThrottler(t, c, clock)
		mustSetLimit(t, th, "", "ns", "tok", Limit{Read: 2, Interval: 60})

		// A refund on a bucket never used changes nothing.
		if err := th.Refund(ctx, DefaultPool, "ns", "tok", false); err != nil {
			t.Fatal(err)
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", false, 3); got != 2 {
			t.Fatalf("%d of 3 allowed, want 2", got)
		}
		if err := th.Refund(ctx, DefaultPool, "ns", "tok", false); err != nil {
			t.Fatal(err)
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", false, 2); got != 1 {
			t.Fatalf("after one refund: %d allowed, want 1", got)
		}
		// Refunds are capped at the limit.
		for range 5 {
			if err := th.Refund(ctx, DefaultPool, "ns", "tok", false); err != nil {
				t.Fatal(err)
			}
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", false, 5); got != 2 {
			t.Fatalf("after 5 refunds: %d allowed, want 2 (the capacity)", got)
		}
		// Refunds without a limit in that direction are no-ops.
		if err := th.Refund(ctx, DefaultPool, "ns", "tok", true); err != nil {
			t.Fatal(err)
		}
		if err := th.Refund(ctx, DefaultPool, "ns", "nolimit", false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestThrottlerNoAliasing guards against lmstfy's bug: after a reload every
// token shared the limit of the last entry decoded.
func TestThrottlerNoAliasing(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		clock := newFakeClock()
		admin := newTestThrottler(t, c, clock)
		slow := Limit{Read: 2, Write: 2, Interval: 100}
		fast := Limit{Read: 100, Write: 100, Interval: 1}
		mustSetLimit(t, admin, "", "ns", "slow", slow)
		mustSetLimit(t, admin, "b", "ns", "fast", fast)

		th := newTestThrottler(t, c, clock) // another instance
		for range 2 {                       // reload twice: aliasing would show after any reload
			if err := th.Reload(ctx); err != nil {
				t.Fatal(err)
			}
		}
		want := []LimitEntry{
			{Namespace: "ns", Token: "b:fast", Limiter: fast},
			{Namespace: "ns", Token: "slow", Limiter: slow},
		}
		got, err := th.List(ctx, false)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("List = %+v, %v; want %+v", got, err, want)
		}
		if got := allowN(t, th, DefaultPool, "ns", "slow", true, 5); got != 2 {
			t.Fatalf("slow token: %d of 5 allowed, want 2", got)
		}
		if got := allowN(t, th, "b", "ns", "fast", true, 50); got != 50 {
			t.Fatalf("fast token: %d of 50 allowed, want 50", got)
		}
		if err := admin.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := admin.List(ctx, true); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("admin List(force) = %+v, %v; want %+v", got, err, want)
		}
	})
}

func TestThrottlerAddSetGetDelete(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		th := newTestThrottler(t, c, newFakeClock())
		l := Limit{Read: 5, Write: 3, Interval: 10}

		if _, ok, err := th.Get(ctx, "", "ns", "tok"); ok || err != nil {
			t.Fatalf("Get before Add = %v, %v", ok, err)
		}
		if err := th.Add(ctx, "", "ns", "tok", Limit{Interval: 1}); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("Add(invalid) = %v", err)
		}
		if err := th.Add(ctx, "", "ns", "tok", l); err != nil {
			t.Fatal(err)
		}
		if err := th.Add(ctx, DefaultPool, "ns", "tok", Limit{Read: 1, Interval: 1}); !errors.Is(err, ErrLimitExists) {
			t.Fatalf("second Add = %v, want ErrLimitExists", err)
		}
		// lmstfy's layout: field "{pool}/{ns}/{token}", JSON {"read","write","interval"}.
		raw, err := c.HGet(ctx, "__throttler_keys__", "default/ns/tok").Result()
		if err != nil {
			t.Fatal(err)
		}
		var stored map[string]int64
		if err := json.Unmarshal([]byte(raw), &stored); err != nil ||
			!reflect.DeepEqual(stored, map[string]int64{"read": 5, "write": 3, "interval": 10}) {
			t.Fatalf("stored limit %s (%v)", raw, err)
		}
		if got, ok, err := th.Get(ctx, "", "ns", "tok"); !ok || err != nil || got != l {
			t.Fatalf("Get = %+v, %v, %v", got, ok, err)
		}

		l2 := Limit{Write: 1, Interval: 10}
		if err := th.Set(ctx, "", "ns", "tok", Limit{Interval: 0, Read: 1}); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("Set(invalid) = %v", err)
		}
		if err := th.Set(ctx, "", "ns", "tok", l2); err != nil {
			t.Fatal(err)
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 3); got != 1 {
			t.Fatalf("after Set (write=1): %d of 3 allowed", got)
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", false, 10); got != 10 {
			t.Fatalf("after Set (read unlimited): %d of 10 allowed", got)
		}

		if err := th.Delete(ctx, "", "ns", "tok"); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := th.Get(ctx, "", "ns", "tok"); ok || err != nil {
			t.Fatalf("Get after Delete = %v, %v", ok, err)
		}
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 5); got != 5 {
			t.Fatalf("after Delete: %d of 5 allowed, want all", got)
		}
		checkBucketOff(t, c, bucketKey(DefaultPool, "ns", "tok", true))
		if err := th.Delete(ctx, "", "ns", "never-limited"); err != nil {
			t.Fatalf("Delete of a missing limit = %v", err)
		}
		// Add works again after Delete.
		if err := th.Add(ctx, "", "ns", "tok", l); err != nil {
			t.Fatal(err)
		}
	})
}

func TestThrottlerReloadSkipsBadEntries(t *testing.T) {
	ctx := context.Background()
	c := newMiniredisClient(t)
	if err := c.HSet(ctx, "__throttler_keys__",
		"default/ns/good", `{"read":1,"write":0,"interval":5}`,
		"default/ns/notjson", `{`,
		"default/ns/zero", `{"read":0,"write":0,"interval":5}`,
		"malformed", `{"read":1,"write":1,"interval":1}`,
		"b/ns/tok/with/slash", `{"read":0,"write":7,"interval":1}`,
	).Err(); err != nil {
		t.Fatal(err)
	}
	th := newTestThrottler(t, c, newFakeClock())
	got, err := th.List(ctx, true)
	want := []LimitEntry{
		{Namespace: "ns", Token: "b:tok/with/slash", Limiter: Limit{Write: 7, Interval: 1}},
		{Namespace: "ns", Token: "good", Limiter: Limit{Read: 1, Interval: 5}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %+v, %v; want %+v", got, err, want)
	}
}

func TestThrottlerRun(t *testing.T) {
	t.Parallel()
	c := newMiniredisClient(t)
	admin := newTestThrottler(t, c, nil)
	th := NewThrottler(c, quietLogger(), ThrottlerOptions{Refresh: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- th.Run(ctx) }()

	mustSetLimit(t, admin, "", "ns", "tok", Limit{Write: 1, Interval: 60})
	deadline := time.Now().Add(2 * time.Second)
	for {
		if l, _, ok := th.cached(DefaultPool, "ns", "tok"); ok && l.Write == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not pick up a limit set by another instance")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestThrottlerConcurrency: 20 goroutines × 10 requests, spread over two
// instances, against a limit of 50 → exactly 50 allowed.
func TestThrottlerConcurrency(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		clock := newFakeClock() // frozen: no refill during the test
		a := newTestThrottler(t, c, clock)
		b := newTestThrottler(t, c, clock)
		mustSetLimit(t, a, "", "ns", "tok", Limit{Write: 50, Interval: 1})
		if err := b.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 20 {
			th := a
			if g%2 == 1 {
				th = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					ok, err := th.Allow(ctx, DefaultPool, "ns", "tok", true)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 50 {
			t.Fatalf("%d requests allowed, want exactly 50", got)
		}
	})
}

// TestThrottlerChangeAppliesEverywhere: a limit changed or deleted through
// one instance judges the next request on another instance that has not
// reloaded yet, as lmstfy's shared window does; the requests already made
// count against the new limit.
func TestThrottlerChangeAppliesEverywhere(t *testing.T) {
	const w, r = true, false
	tests := []struct {
		name string
		// before is the limit both instances have loaded; used requests are
		// then made on b in each direction.
		before         Limit
		usedW, usedR   int
		change         func(ctx context.Context, a *Throttler) error
		wantW, wantR   int // of 10 further requests on b, which did not reload
		wantAW, wantAR int // then of 10 on a
		after20s       int // writes allowed on a after 20 more seconds
	}{
		{
			name:   "raised",
			before: Limit{Write: 1, Interval: 60}, usedW: 1,
			change: func(ctx context.Context, a *Throttler) error {
				return a.Set(ctx, "", "ns", "tok", Limit{Write: 3, Interval: 60})
			},
			wantW: 2, wantR: 10, wantAW: 0, wantAR: 10, after20s: 1,
		},
		{
			name:   "lowered below what was used",
			before: Limit{Write: 10, Read: 10, Interval: 60}, usedW: 5, usedR: 1,
			change: func(ctx context.Context, a *Throttler) error {
				return a.Set(ctx, "", "ns", "tok", Limit{Write: 3, Read: 3, Interval: 60})
			},
			wantW: 0, wantR: 2, wantAW: 0, wantAR: 0, after20s: 1,
		},
		{
			name:   "interval shortened",
			before: Limit{Write: 2, Interval: 600}, usedW: 2,
			change: func(ctx context.Context, a *Throttler) error {
				return a.Set(ctx, "", "ns", "tok", Limit{Write: 2, Interval: 20})
			},
			wantW: 0, wantR: 10, wantAW: 0, wantAR: 10, after20s: 2,
		},
		{
			name:   "one direction unlimited",
			before: Limit{Write: 1, Read: 1, Interval: 60}, usedW: 1, usedR: 1,
			change: func(ctx context.Context, a *Throttler) error {
				return a.Set(ctx, "", "ns", "tok", Limit{Write: 1, Interval: 60})
			},
			wantW: 0, wantR: 10, wantAW: 0, wantAR: 10, after20s: 0,
		},
		{
			name:   "deleted",
			before: Limit{Write: 1, Read: 1, Interval: 60}, usedW: 1, usedR: 1,
			change: func(ctx context.Context, a *Throttler) error {
				return a.Delete(ctx, "", "ns", "tok")
			},
			wantW: 10, wantR: 10, wantAW: 10, wantAR: 10, after20s: 5,
		},
		{
			name:   "deleted then added",
			before: Limit{Write: 1, Interval: 60}, usedW: 1,
			change: func(ctx context.Context, a *Throttler) error {
				if err := a.Delete(ctx, "", "ns", "tok"); err != nil {
					return err
				}
				return a.Add(ctx, "", "ns", "tok", Limit{Write: 4, Interval: 60})
			},
			wantW: 4, wantR: 10, wantAW: 0, wantAR: 10, after20s: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
				ctx := context.Background()
				clock := newFakeClock()
				a := newTestThrottler(t, c, clock)
				b := newTestThrottler(t, c, clock) // another server
				mustSetLimit(t, a, "", "ns", "tok", tc.before)
				if err := b.Reload(ctx); err != nil {
					t.Fatal(err)
				}
				if got := allowN(t, b, DefaultPool, "ns", "tok", w, tc.usedW); got != tc.usedW {
					t.Fatalf("before: %d of %d writes allowed", got, tc.usedW)
				}
				if got := allowN(t, b, DefaultPool, "ns", "tok", r, tc.usedR); got != tc.usedR {
					t.Fatalf("before: %d of %d reads allowed", got, tc.usedR)
				}
				clock.Advance(time.Millisecond)
				if err := tc.change(ctx, a); err != nil {
					t.Fatal(err)
				}
				if got := allowN(t, b, DefaultPool, "ns", "tok", w, 10); got != tc.wantW {
					t.Errorf("writes on the other server: %d of 10 allowed, want %d", got, tc.wantW)
				}
				if got := allowN(t, b, DefaultPool, "ns", "tok", r, 10); got != tc.wantR {
					t.Errorf("reads on the other server: %d of 10 allowed, want %d", got, tc.wantR)
				}
				if got := allowN(t, a, DefaultPool, "ns", "tok", w, 10); got != tc.wantAW {
					t.Errorf("writes on the changing server: %d of 10 allowed, want %d", got, tc.wantAW)
				}
				if got := allowN(t, a, DefaultPool, "ns", "tok", r, 10); got != tc.wantAR {
					t.Errorf("reads on the changing server: %d of 10 allowed, want %d", got, tc.wantAR)
				}
				// Once b has reloaded and the pin is over, both go on
				// under the new limit.
				clock.Advance(20 * time.Second)
				if err := b.Reload(ctx); err != nil {
					t.Fatal(err)
				}
				got := allowN(t, a, DefaultPool, "ns", "tok", w, 5)
				if got != tc.after20s {
					t.Errorf("20 s later: %d of 5 writes allowed, want %d", got, tc.after20s)
				}
			})
		})
	}
}

// TestThrottlerJobs: WriteJobs limits published jobs apart from the
// request limits: AllowJobs takes n or refuses, a refund gives n back
// (capped at the limit), ChargeJobs takes n whatever the bucket holds (the
// rest of a bulk) and leaves it in debt until it refills, and the request
// buckets are untouched.
func TestThrottlerJobs(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		clock := newFakeClock()
		th := newTestThrottler(t, c, clock)
		mustSetLimit(t, th, "", "ns", "tok", Limit{Write: 5, WriteJobs: 100, Interval: 60})
		if th.UnlimitedJobs(DefaultPool, "ns", "tok") || !th.UnlimitedJobs(DefaultPool, "ns", "other") {
			t.Fatal("UnlimitedJobs: want false for tok, true for a token without a limit")
		}
		allowJobs := func(n int) bool {
			t.Helper()
			ok, err := th.AllowJobs(ctx, DefaultPool, "ns", "tok", n)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !allowJobs(64) || allowJobs(64) || !allowJobs(36) || allowJobs(1) {
			t.Fatal("100 jobs a minute: want 64 taken, 64 refused, 36 taken, 1 refused")
		}
		if err := th.RefundJobs(ctx, DefaultPool, "ns", "tok", 64); err != nil {
			t.Fatal(err)
		}
		if !allowJobs(64) || allowJobs(1) {
			t.Fatal("after a refund of 64: want 64 taken, then 1 refused")
		}
		// The request limit is its own bucket: 5 publishes.
		if got := allowN(t, th, DefaultPool, "ns", "tok", true, 6); got != 5 {
			t.Fatalf("%d of 6 publish requests allowed, want 5", got)
		}
		// Refunds are capped at the limit; a bulk's rest is charged
		// whatever the bucket holds, into debt.
		for range 3 {
			if err := th.RefundJobs(ctx, DefaultPool, "ns", "tok", 64); err != nil {
				t.Fatal(err)
			}
		}
		if !allowJobs(1) {
			t.Fatal("a bulk's first job from a full bucket: refused")
		}
		if err := th.ChargeJobs(ctx, DefaultPool, "ns", "tok", 149); err != nil { // 100 − 150: 50 in debt
			t.Fatal(err)
		}
		clock.Advance(30 * time.Second) // 50 jobs back: 0
		if allowJobs(1) {
			t.Fatal("in debt: a job admitted")
		}
		// The refusal said the bucket needs 600 ms for a job: this
		// instance knows it short for maxJobsHold, without I/O.
		if !th.JobsShort(DefaultPool, "ns", "tok") || th.JobsShort(DefaultPool, "ns", "other") {
			t.Fatal("JobsShort after a refusal: want true for tok only")
		}
		clock.Advance(maxJobsHold)
		if th.JobsShort(DefaultPool, "ns", "tok") {
			t.Fatal("JobsShort after maxJobsHold: want false")
		}
		clock.Advance(6 * time.Second) // 10 jobs
		if allowJobs(11) || !allowJobs(10) {
			t.Fatal("debt repaid, 10 jobs back: want 11 refused, 10 taken")
		}
		// Another instance learns the jobs limit by reloading.
		other := newTestThrottler(t, c, clock)
		if !other.UnlimitedJobs(DefaultPool, "ns", "tok") {
			t.Fatal("UnlimitedJobs before any limit was loaded: want true")
		}
		if err := other.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if other.UnlimitedJobs(DefaultPool, "ns", "tok") {
			t.Fatal("UnlimitedJobs after Reload: want false")
		}
		// An admin change here forgets what a refusal taught.
		if allowJobs(1) || !th.JobsShort(DefaultPool, "ns", "tok") {
			t.Fatal("empty again: want a refusal, remembered")
		}
		// Without WriteJobs, jobs are not limited (no I/O).
		mustSetLimit(t, th, "", "ns", "tok", Limit{Write: 5, Interval: 60})
		if th.JobsShort(DefaultPool, "ns", "tok") {
			t.Fatal("JobsShort after Set: want false")
		}
		if !th.UnlimitedJobs(DefaultPool, "ns", "tok") || !allowJobs(1000) {
			t.Fatal("without WriteJobs: want unlimited")
		}
		if err := th.ChargeJobs(ctx, DefaultPool, "ns", "tok", 1000); err != nil {
			t.Fatal(err)
		}
		if err := (Limit{WriteJobs: 10, Interval: 1}).Validate(); err != nil {
			t.Fatalf("a limit of jobs alone: %v", err)
		}
	})
}
