package rdb

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// fillPool publishes 4 KB jobs into queue q until the pool refuses one,
// and returns the IDs published and the refusal.
func fillPool(t *testing.T, e *Engine, ns, q string) ([]string, error) {
	t.Helper()
	body := []byte(strings.Repeat("x", 4096))
	var ids []string
	for i := 0; i < 100000; i++ {
		id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: body, Tries: 2, TTL: time.Hour})
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	t.Fatal("a pool of 8 MB took 100,000 jobs of 4 KB")
	return nil, nil
}

// TestFullPoolDrains fills a real Redis (maxmemory 8mb, noeviction) with
// 4 KB jobs: the publish that Redis refuses for memory fails with
// engine.ErrPoolFull naming the pool and writes nothing, a bulk publish and
// a delayed one are refused alike, and every job stored can still be
// consumed, released, dead-lettered, deleted and acknowledged, and a queue
// destroyed (tenants drain a full pool): before each kind of operation
// the pool is filled again with small jobs, so that each meets a full
// Redis. Afterwards publishing works again.
func TestFullPoolDrains(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Extra: []string{"maxmemory 8mb", "maxmemory-policy noeviction"}})
	client := srv.Client()
	e, err := New(bg, client, Options{Pool: "default"})
	if err != nil {
		t.Fatal(err)
	}
	fullPoolDrains(t, e, client)
}

// TestFullPoolDrainsCluster: TestFullPoolDrains on the real Redis Cluster,
// each master given 8 MB more than it holds: a full master refuses the
// publishes of its slot groups and drains as a single Redis does.
func TestFullPoolDrainsCluster(t *testing.T) {
	c := fullCluster(t, 8<<20)
	client := c.Client(t)
	e, err := New(bg, client, Options{Pool: "default"})
	if err != nil {
		t.Fatal(err)
	}
	fullPoolDrains(t, e, client)
}

// sameGroup returns a queue of namespace ns in the slot group of noisy/q
// (on a cluster: on the same master, which the test fills).
func sameGroup(t *testing.T, ns, q string) string {
	for i := 0; i < 100000; i++ {
		if name := fmt.Sprintf("g%d", i); slotGroup(ns, name) == slotGroup("noisy", q) {
			return name
		}
	}
	t.Fatal("no queue in the slot group")
	return ""
}

// fullPoolDrains is TestFullPoolDrains on engine e of pool "default" over
// client.
func fullPoolDrains(t *testing.T, e *Engine, client redis.UniversalClient) {
	const ns, q = "noisy", "q"
	quietQ, fillerQ := sameGroup(t, "quiet", q), sameGroup(t, "filler", q)
	ids, err := fillPool(t, e, ns, q)
	var pf *engine.PoolFullError
	if !errors.Is(err, engine.ErrPoolFull) || !errors.As(err, &pf) || pf.Pool != "default" {
		t.Fatalf("publish into a full pool after %d jobs: %v, want engine.ErrPoolFull for pool default", len(ids), err)
	}
	if len(ids) < 100 {
		t.Fatalf("only %d jobs fit in 8 MB", len(ids))
	}

	// A refused publish writes nothing, whatever its form.
	keys := client.DBSize(bg).Val()
	body := []byte(strings.Repeat("y", 4096))
	refused := []*engine.PublishRequest{
		{Namespace: ns, Queue: q, Body: body, Tries: 1},
		{Namespace: "quiet", Queue: quietQ, Body: body, Tries: 1, Delay: time.Minute},
		{Namespace: ns, Queue: q, Body: body, Tries: 1, Key: "idem"},
	}
	for _, r := range refused {
		if _, err := e.Publish(bg, r); !errors.Is(err, engine.ErrPoolFull) {
			t.Fatalf("publish %+v into a full pool: %v", r, err)
		}
	}
	if _, err := e.PublishBatch(bg, []*engine.PublishRequest{refused[0], {Namespace: ns, Queue: q, Body: body, Tries: 1, Delay: time.Minute}}); !errors.Is(err, engine.ErrPoolFull) {
		t.Fatalf("bulk publish into a full pool: %v", err)
	}
	if n := client.DBSize(bg).Val(); n != keys {
		t.Fatalf("refused publishes changed the key count: %d, was %d", n, keys)
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != int64(len(ids)) {
		t.Fatalf("size %d, %v; want the %d published", n, err, len(ids))
	}

	// refill fills the pool again with small jobs of another namespace
	// (what got freed since), so that the next operation meets a full pool.
	refill := func() {
		t.Helper()
		small := []byte(strings.Repeat("z", 256))
		for i := 0; ; i++ {
			_, err := e.Publish(bg, &engine.PublishRequest{Namespace: "filler", Queue: fillerQ, Body: small, Tries: 1})
			if errors.Is(err, engine.ErrPoolFull) {
				return
			}
			if err != nil || i > 100000 {
				t.Fatalf("refill: %v after %d jobs", err, i)
			}
		}
	}

	// Drain: release one (to be consumed again), dead-letter one and delete
	// it there, delete one outright, then consume and ACK the rest.
	consume := func(n int) []*engine.Job {
		t.Helper()
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: n})
		if err != nil {
			t.Fatalf("consume from a full pool: %v", err)
		}
		return jobs
	}
	refill()
	first := consume(3)
	if len(first) != 3 {
		t.Fatalf("consumed %d of 3", len(first))
	}
	refill()
	if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: first[0].ID, Receipt: first[0].Receipt, KeepTry: true}); err != nil {
		t.Fatalf("release in a full pool: %v", err)
	}
	refill()
	if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: first[1].ID, Receipt: first[1].Receipt, Reason: engine.ReasonNacked}); err != nil {
		t.Fatalf("nack in a full pool: %v", err)
	}
	// first[1] had 2 tries: one spent, one left, so it is ready again;
	// consume it with the rest. Delete first[2].
	refill()
	if err := e.Delete(bg, ns, q, first[2].ID); err != nil {
		t.Fatalf("delete in a full pool: %v", err)
	}
	left := len(ids) - 1
	acked := 0
	for left > 0 {
		if acked%64 == 0 {
			refill()
		}
		jobs := consume(16)
		if len(jobs) == 0 {
			t.Fatalf("nothing to consume with %d jobs left", left)
		}
		for _, j := range jobs {
			if j.ID == first[1].ID && j.Tries == 0 {
				// Its last try: nack it into the dead letter, then delete it there.
				refill()
				if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt, Reason: engine.ReasonNacked}); err != nil {
					t.Fatalf("nack into the dead letter of a full pool: %v", err)
				}
				refill()
				if n, err := e.DeleteDeadLetter(bg, ns, q, 10); err != nil || n != 1 {
					t.Fatalf("delete dead letter in a full pool: %d, %v", n, err)
				}
				left--
				continue
			}
			if acked%64 == 0 {
				refill()
			}
			if err := e.Ack(bg, ns, q, j.ID, j.Receipt); err != nil {
				t.Fatalf("ack in a full pool: %v", err)
			}
			acked++
			left--
		}
	}
	if acked != len(ids)-2 {
		t.Fatalf("acked %d, want %d", acked, len(ids)-2)
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != 0 {
		t.Fatalf("size after the drain %d, %v", n, err)
	}
	refill()
	if _, err := e.Destroy(bg, "filler", fillerQ); err != nil {
		t.Fatalf("destroy in a full pool: %v", err)
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: body, Tries: 1}); err != nil {
		t.Fatalf("publish after the drain: %v", err)
	}
}

// oomReply is Redis's refusal for memory as go-redis returns it.
type oomReply string

func (e oomReply) Error() string { return string(e) }
func (oomReply) RedisError()     {}

// TestFullOn: only Redis's OOM refusal becomes engine.ErrPoolFull, once,
// naming the engine's pool; other errors pass unchanged.
func TestFullOn(t *testing.T) {
	e := &Engine{pool: "blue"}
	oom := fmt.Errorf("publish: %w", oomReply("OOM command not allowed when used memory > 'maxmemory'. script: 1edd, on @user_script:44."))
	err := oom
	e.fullOn(&err)
	e.fullOn(&err) // not wrapped twice
	var pf *engine.PoolFullError
	if !errors.As(err, &pf) || pf.Pool != "blue" || pf.Err != oom || !errors.Is(err, engine.ErrPoolFull) {
		t.Fatalf("fullOn(OOM) = %v", err)
	}
	if want := "engine: pool blue is full: " + oom.Error(); err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	for _, other := range []error{nil, oomReply("ERR wrong number of arguments"), errors.New("OOM but not from Redis"), engine.ErrInvalid} {
		err := other
		e.fullOn(&err)
		if err != other {
			t.Errorf("fullOn(%v) = %v, want it unchanged", other, err)
		}
	}
	errs := []error{nil, oom}
	e.fullOnEach(errs)
	if errs[0] != nil || !errors.Is(errs[1], engine.ErrPoolFull) {
		t.Errorf("fullOnEach = %v", errs)
	}
}

// fullCluster flushes the shared Redis Cluster and gives each master a
// maxmemory of what it holds plus extra bytes, under noeviction, until the
// test ends (then no maxmemory, and flushed again).
func fullCluster(t *testing.T, extra int64) *redistest.Cluster {
	t.Helper()
	c := redistest.SharedCluster(t)
	c.Flush(t)
	for _, addr := range c.Masters(t) {
		n := redis.NewClient(&redis.Options{Addr: addr})
		used := usedMemory(t, n)
		if err := n.ConfigSet(bg, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := n.ConfigSet(bg, "maxmemory", strconv.FormatInt(used+extra, 10)).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = n.ConfigSet(bg, "maxmemory", "0").Err()
			_ = n.Close()
		})
	}
	t.Cleanup(func() { c.Flush(t) })
	return c
}
