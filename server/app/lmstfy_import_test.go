package app_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
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

// TestLmstfyImport is issue #30's cut-over: lmstfy (real, v1.0.16) writes
// jobs in every state, is stopped, and Kairos starts on the same Redis
// with LmstfyData = "import". Then lmstfy's own Go client, with the token
// lmstfy made, consumes every job from Kairos, each in the state it had:
// the ready ones in order with their TTL, tries and attributes, the
// delayed one not before its time, the consumed-not-ACKed ones not before
// their TTR (the one with no try left then goes to the dead letter), the
// dead one from the dead letter; the token's rate limit is Kairos's, and
// no key of lmstfy's layout is left.
func TestLmstfyImport(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	lm := startLmstfy(t, rs.Addr)
	d := writeLmstfyData(t, lm)
	lm.stop(t)

	cfg := redisConfig(rs.Addr)
	pool := cfg.Pool["default"]
	pool.LmstfyData = "import"
	cfg.Pool["default"] = pool
	k := startKairos(t, cfg)
	imp, ok := k.App.LmstfyImports["default"]
	if r := imp.Result; !ok || imp.Into != "default" || r.Ready != 4 || r.Delayed != 1 || r.InFlight != 2 || r.Dead != 1 ||
		r.Already != 0 || r.Expired != 0 || r.Malformed != 0 || r.Registries != 2 {
		t.Fatalf("import: %+v (ran: %t); want 4 ready, 1 delayed, 2 in flight, 1 dead, 2 registries deleted", imp, ok)
	}
	c := rs.Client()
	ctx := context.Background()
	for _, pattern := range []string{"timer_set", "m/ns*", "[jqd]/" + lmstfyNS + "/*"} {
		if left := c.Keys(ctx, pattern).Val(); len(left) > 0 {
			t.Errorf("keys of lmstfy's layout left after the import: %q", left)
		}
	}

	cli := client.NewLmstfyClient(k.APIHost, k.APIPort, lmstfyNS, d.Token)
	if n, err := cli.QueueSize("ready"); err != nil || n != 4 {
		t.Fatalf("size of ready: %d, %v; want 4", n, err)
	}
	for i, id := range d.Ready {
		j := okJob(t)(cli.Consume("ready", 30, 0))
		if j == nil || j.ID != id || string(j.Data) != fmt.Sprintf("a%d", i+1) || j.RemainTries != 2 || j.TTL <= 3500 || j.TTL > 3600 {
			t.Fatalf("ready job %d: %+v; want %s, body a%d, 2 tries left, TTL in (3500, 3600]", i, j, id, i+1)
		}
		if i == 3 && j.Attributes["flavour"] != "v1" {
			t.Errorf("v1 job's attributes: %v, want flavour=v1", j.Attributes)
		}
		noErr(t, "Ack", cli.Ack("ready", id))
	}

	size, head, aerr := cli.PeekDeadLetter("dead")
	noErr(t, "PeekDeadLetter", aerr)
	if size != 1 || head != d.Dead {
		t.Fatalf("dead letter: %d jobs, head %s; want 1, %s", size, head, d.Dead)
	}
	if n, err := cli.RespawnDeadLetter("dead", 10, 600); err != nil || n != 1 {
		t.Fatalf("respawn: %d, %v", n, err)
	}
	if j := okJob(t)(cli.Consume("dead", 30, 0)); j == nil || j.ID != d.Dead || string(j.Data) != "d" {
		t.Fatalf("respawned dead job: %+v, want %s", j, d.Dead)
	}
	noErr(t, "Ack", cli.Ack("dead", d.Dead))

	// Not due yet: the delayed job and the in-flight ones stay out of
	// reach (checked only while their time is at least a second away).
	if time.Until(d.DelayedDue) > time.Second {
		if j := okJob(t)(cli.Consume("delayed", 30, 0)); j != nil {
			t.Fatalf("the delayed job was consumed %v before its time: %+v", time.Until(d.DelayedDue), j)
		}
	}
	if time.Until(d.InFlightDue) > time.Second {
		if j := okJob(t)(cli.Consume("inflight", 30, 0)); j != nil {
			t.Fatalf("an in-flight job was delivered again %v before its TTR ran out: %+v", time.Until(d.InFlightDue), j)
		}
	}
	j := okJob(t)(cli.Consume("delayed", 30, lmstfyWait+10))
	if j == nil || j.ID != d.Delayed || string(j.Data) != "b" || j.RemainTries != 1 {
		t.Fatalf("delayed job: %+v; want %s, body b, 1 try left", j, d.Delayed)
	}
	if early := time.Until(d.DelayedDue); early > 1500*time.Millisecond {
		t.Errorf("the delayed job came %v early", early)
	}
	noErr(t, "Ack", cli.Ack("delayed", d.Delayed))
	j = okJob(t)(cli.Consume("inflight", 30, lmstfyWait+10))
	if j == nil || j.ID != d.InFlight || string(j.Data) != "c" || j.RemainTries != 0 {
		t.Fatalf("in-flight job after its TTR: %+v; want %s, body c, no try left", j, d.InFlight)
	}
	noErr(t, "Ack", cli.Ack("inflight", d.InFlight))
	// The job consumed with its last try goes to the dead letter at its
	// TTR, as in lmstfy.
	waitDead(t, cli, "inflight", 1)
	if _, head, err := cli.PeekDeadLetter("inflight"); err != nil || head != d.LastTry {
		t.Fatalf("dead letter of inflight: head %s, %v; want %s", head, err, d.LastTry)
	}

	// The token's rate limit, set through lmstfy, is Kairos's.
	r := doHTTP(t, http.MethodGet, k.Admin+"/token/"+lmstfyNS+"/"+d.Token+"/limit", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	var limit struct{ Read, Write, Interval int }
	r.decode(t, &limit)
	if limit.Read != 1000 || limit.Write != 500 || limit.Interval != 1 {
		t.Errorf("limit after the import: %s; want read 1000, write 500, interval 1", r.Body)
	}
}
