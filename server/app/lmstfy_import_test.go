package app_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/bitleak/lmstfy/client"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
)

// Issue #30: a Kairos started on a Redis holding lmstfy's data must not
// hide it. These tests write the data with a real lmstfy server (v1.0.16)
// through lmstfy's own Go client, in every state a job can be in there.

// lmstfyNS is the namespace of the jobs lmstfy writes.
const lmstfyNS = "mig"

// lmstfyData is what writeLmstfyData left in lmstfy's Redis.
type lmstfyData struct {
	Token string
	// Ready are the IDs of queue "ready" in publish order (the last one
	// with attributes: a v1 ID); their TTL was 3600 s.
	Ready []string
	// Delayed (queue "delayed", delay lmstfyWait) is due at DelayedDue.
	Delayed    string
	DelayedDue time.Time
	// InFlight (queue "inflight", tries 2) and LastTry (the same queue,
	// tries 1) were consumed with TTR lmstfyWait and not ACKed: they are
	// due again at InFlightDue, InFlight with 1 try left, LastTry with
	// none (it goes to the dead letter then).
	InFlight, LastTry string
	InFlightDue       time.Time
	// Dead (queue "dead") is in the dead letter: consumed with TTR 1 and
	// its only try spent.
	Dead string
}

// lmstfyWait is the delay and the TTR of the jobs written: long enough to
// stop lmstfy and import before they fall due.
const lmstfyWait = 8

// writeLmstfyData writes jobs in every state through lmstfy (lm) with
// lmstfy's Go client, and a rate limit of the token through its admin API.
func writeLmstfyData(t *testing.T, lm *lmstfyServer) lmstfyData {
	t.Helper()
	var d lmstfyData
	d.Token = lm.token(t, lmstfyNS)
	cli := lm.client(lmstfyNS, d.Token)
	for _, body := range []string{"a1", "a2", "a3"} {
		d.Ready = append(d.Ready, okID(t)(cli.Publish("ready", []byte(body), 3600, 3, 0)))
	}
	d.Ready = append(d.Ready, okID(t)(cli.PublishJob(&client.JobRequest{Queue: "ready", Data: []byte("a4"), TTL: 3600, Tries: 3,
		Attributes: map[string]string{"flavour": "v1"}})))
	d.Delayed = okID(t)(cli.Publish("delayed", []byte("b"), 3600, 2, lmstfyWait))
	d.DelayedDue = time.Now().Add(lmstfyWait * time.Second)
	d.InFlight = okID(t)(cli.Publish("inflight", []byte("c"), 3600, 2, 0))
	d.LastTry = okID(t)(cli.Publish("inflight", []byte("c-last"), 3600, 1, 0))
	for range 2 {
		if j := okJob(t)(cli.Consume("inflight", lmstfyWait, 0)); j == nil {
			t.Fatal("lmstfy: nothing to consume in inflight")
		}
	}
	d.InFlightDue = time.Now().Add(lmstfyWait * time.Second)
	d.Dead = okID(t)(cli.Publish("dead", []byte("d"), 3600, 1, 0))
	if j := okJob(t)(cli.Consume("dead", 1, 0)); j == nil || j.ID != d.Dead {
		t.Fatalf("lmstfy: consume dead: %+v", j)
	}
	waitFor(t, 10*time.Second, "lmstfy moves the job out of TTR into the dead letter", func() bool {
		size, head, err := cli.PeekDeadLetter("dead")
		return err == nil && size == 1 && head == d.Dead
	})
	lm.admin(t, "POST", "/token/"+lmstfyNS+"/"+d.Token+"/limit", `{"read":1000,"write":500,"interval":1}`, 201, nil)
	return d
}

// snapshot returns every key of the Redis with its type and DUMP, and
// whether it has a TTL.
func snapshot(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		ttl := "persistent"
		if c.PTTL(ctx, k).Val() > 0 {
			ttl = "expiring"
		}
		out[k] = c.Type(ctx, k).Val() + " " + ttl + " " + c.Dump(ctx, k).Val()
	}
	return out
}

// TestLmstfyDataRefused: Kairos started on lmstfy's Redis with the same
// config refuses to start, names the choice (LmstfyData), and changes no
// key; also after lmstfy's registries were deleted (as Kairos before this
// fix did), and it starts once the choice is made elsewhere.
func TestLmstfyDataRefused(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	lm := startLmstfy(t, rs.Addr)
	writeLmstfyData(t, lm)
	lm.stop(t)
	c := rs.Client()
	ctx := context.Background()

	check := func(what string) {
		t.Helper()
		before := snapshot(t, c)
		if len(before) == 0 {
			t.Fatal("lmstfy left no key")
		}
		a, err := app.New(ctx, redisConfig(rs.Addr), app.Options{Logger: testLogger(t)})
		if err == nil {
			_ = a
			t.Fatalf("%s: Kairos started on lmstfy's data", what)
		}
		if !errors.Is(err, app.ErrLmstfyData) || !strings.Contains(err.Error(), "Pool.default") ||
			!strings.Contains(err.Error(), `LmstfyData = "import"`) || !strings.Contains(err.Error(), "-migrate-from-lmstfy") {
			t.Fatalf("%s: app.New: %v; want ErrLmstfyData naming [Pool.default] LmstfyData and -migrate-from-lmstfy", what, err)
		}
		after := snapshot(t, c)
		if !maps.Equal(before, after) {
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s: key %q changed: %.60q → %.60q", what, k, v, after[k])
				}
			}
			for k := range after {
				if _, ok := before[k]; !ok {
					t.Errorf("%s: key %q written", what, k)
				}
			}
		}
	}
	check("lmstfy's layout")
	// What Kairos before this fix left: lmstfy's registries deleted,
	// everything else in place.
	if err := c.Del(ctx, "m/ns", "m/ns/"+lmstfyNS).Err(); err != nil {
		t.Fatal(err)
	}
	check("lmstfy's layout without its registries")
}
