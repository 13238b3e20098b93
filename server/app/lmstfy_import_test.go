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

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/lmstfy"
	"github.com/kairos-dev/kairos/engine/lmstfy/lmstfytest"
	"github.com/kairos-dev/kairos/engine/rdb"
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
	// Delayed (queue "delayed", delay lmstfyWait) is due at DelayedDue or
	// a second later: lmstfy schedules in whole seconds, from the second
	// of the timer write, so DelayedDue (and InFlightDue) is the earliest
	// it can be.
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
func writeLmstfyData(t *testing.T, lm *lmstfytest.Server) lmstfyData {
	t.Helper()
	var d lmstfyData
	d.Token = lm.Token(t, lmstfyNS)
	cli := lm.Client(lmstfyNS, d.Token)
	for _, body := range []string{"a1", "a2", "a3"} {
		d.Ready = append(d.Ready, okID(t)(cli.Publish("ready", []byte(body), 3600, 3, 0)))
	}
	d.Ready = append(d.Ready, okID(t)(cli.PublishJob(&client.JobRequest{Queue: "ready", Data: []byte("a4"), TTL: 3600, Tries: 3,
		Attributes: map[string]string{"flavour": "v1"}})))
	before := time.Now()
	d.Delayed = okID(t)(cli.Publish("delayed", []byte("b"), 3600, 2, lmstfyWait))
	d.DelayedDue = time.Unix(before.Unix()+lmstfyWait, 0)
	d.InFlight = okID(t)(cli.Publish("inflight", []byte("c"), 3600, 2, 0))
	d.LastTry = okID(t)(cli.Publish("inflight", []byte("c-last"), 3600, 1, 0))
	before = time.Now()
	for range 2 {
		if j := okJob(t)(cli.Consume("inflight", lmstfyWait, 0)); j == nil {
			t.Fatal("lmstfy: nothing to consume in inflight")
		}
	}
	d.InFlightDue = time.Unix(before.Unix()+lmstfyWait, 0)
	d.Dead = okID(t)(cli.Publish("dead", []byte("d"), 3600, 1, 0))
	if j := okJob(t)(cli.Consume("dead", 1, 0)); j == nil || j.ID != d.Dead {
		t.Fatalf("lmstfy: consume dead: %+v", j)
	}
	lmstfytest.WaitFor(t, 10*time.Second, "lmstfy moves the job out of TTR into the dead letter", func() bool {
		size, head, err := cli.PeekDeadLetter("dead")
		return err == nil && size == 1 && head == d.Dead
	})
	lm.AdminDo(t, "POST", "/token/"+lmstfyNS+"/"+d.Token+"/limit", `{"read":1000,"write":500,"interval":1}`, 201, nil)
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
	lm := lmstfytest.Start(t, rs.Addr)
	writeLmstfyData(t, lm)
	lm.Stop(t)
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
	lm := lmstfytest.Start(t, rs.Addr)
	d := writeLmstfyData(t, lm)
	lm.Stop(t)

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
	if early := time.Until(d.DelayedDue); early > 0 {
		t.Errorf("the delayed job came %v before the earliest time lmstfy had it due", early)
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

// stopAfter is a Dest that stops the import after its calls-th Import
// call, once that call's jobs are written into Kairos and before the
// importer removes them from lmstfy's layout: where a kill hurts most.
type stopAfter struct {
	lmstfy.Dest
	calls int
}

var errStopped = errors.New("import stopped (test)")

func (s *stopAfter) Import(ctx context.Context, ns, q string, jobs []rdb.ImportJob) (int, error) {
	n, err := s.Dest.Import(ctx, ns, q, jobs)
	if s.calls--; s.calls <= 0 && err == nil {
		return n, errStopped
	}
	return n, err
}

// TestLmstfyImportResumes: an import stopped halfway (after writing a
// batch into Kairos, before removing it from lmstfy's layout), run again,
// leaves every lmstfy job once in Kairos: as many job keys as jobs, as
// many ready entries as ready jobs and timer entries as delayed ones.
func TestLmstfyImportResumes(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	lm := lmstfytest.Start(t, rs.Addr)
	tok := lm.Token(t, lmstfyNS)
	cli := lm.Client(lmstfyNS, tok)
	const ready, delayed = 2560, 1536
	bodies := make([]interface{}, 64) // lmstfy takes at most 64 per bulk publish
	for i := range bodies {
		bodies[i] = fmt.Sprintf("job %d", i)
	}
	want := map[string]bool{}
	for k := range ready / len(bodies) {
		for i := range bodies {
			bodies[i] = fmt.Sprintf("job %d", k*len(bodies)+i)
		}
		for _, id := range okIDs(t)(cli.BatchPublish("many", bodies, 3600, 3, 0)) {
			want[id] = true
		}
	}
	for range delayed / len(bodies) {
		for _, id := range okIDs(t)(cli.BatchPublish("later", bodies, 3600, 3, 600)) {
			want[id] = true
		}
	}
	lm.Stop(t)

	ctx := context.Background()
	c := rs.Client()
	e, err := rdb.New(ctx, c, rdb.Options{Pool: "default"})
	if err != nil {
		t.Fatal(err)
	}
	// Batches of 1000 entries: timer_set takes two steps (one Import call
	// each), the ready list three; the first run stops after the third
	// call, in the ready list.
	first := &lmstfy.Importer{Source: c, Dest: &stopAfter{Dest: e, calls: 3}, Log: testLogger(t)}
	res1, err := first.Run(ctx)
	if !errors.Is(err, errStopped) {
		t.Fatalf("first run: %+v, %v; want it stopped", res1, err)
	}
	if res1.Imported() == 0 || res1.Imported() >= ready+delayed {
		t.Fatalf("first run wrote %d jobs; want a part of %d", res1.Imported(), ready+delayed)
	}
	second := &lmstfy.Importer{Source: c, Dest: e, Log: testLogger(t)}
	res2, err := second.Run(ctx)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if res2.Already == 0 {
		t.Errorf("second run found no job of the first run's last batch in Kairos: %+v", res2)
	}
	if got := res1.Imported() + res2.Imported(); got != ready+delayed || res1.Ready+res2.Ready != ready || res1.Delayed+res2.Delayed != delayed {
		t.Errorf("written: %+v then %+v; want %d ready and %d delayed in all, each once", res1, res2, ready, delayed)
	}
	// What Kairos holds: every job once.
	keys := c.Keys(ctx, "j/{*}"+lmstfyNS+"/*").Val()
	got := map[string]bool{}
	for _, k := range keys {
		got[k[strings.LastIndexByte(k, '/')+1:]] = true
	}
	if len(keys) != len(want) || !maps.Equal(got, want) {
		t.Errorf("Kairos holds %d job keys (%d distinct IDs); want the %d jobs lmstfy held", len(keys), len(got), len(want))
	}
	if n, err := e.Size(ctx, lmstfyNS, "many"); err != nil || n != ready {
		t.Errorf("ready list of many: %d entries, %v; want %d", n, err, ready)
	}
	timers := c.Keys(ctx, "t/{*}"+lmstfyNS+"/later").Val()
	if len(timers) != 1 || c.ZCard(ctx, timers[0]).Val() != delayed {
		t.Errorf("timer of later: %v; want one with %d entries", timers, delayed)
	}
	if left := c.Keys(ctx, "[jqd]/"+lmstfyNS+"/*").Val(); len(left) > 0 || c.Exists(ctx, "timer_set").Val() != 0 {
		t.Errorf("lmstfy keys left: %d (+ timer_set: %d)", len(left), c.Exists(ctx, "timer_set").Val())
	}
	// The ready jobs come out in lmstfy's order (a bulk publish's bodies
	// are JSON values).
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: lmstfyNS, Queues: []string{"many"}, Count: 3, TTR: time.Minute})
	if err != nil || len(jobs) != 3 || string(jobs[0].Body) != `"job 0"` || string(jobs[1].Body) != `"job 1"` || string(jobs[2].Body) != `"job 2"` {
		for _, j := range jobs {
			t.Logf("consumed %s %q", j.ID, j.Body)
		}
		t.Errorf("first ready jobs: %v; want job 0, 1, 2", err)
	}
}

// TestLmstfyImportIntoCluster: lmstfy's standalone Redis imported into a
// Redis Cluster pool, the pool's MigrateTo (lmstfy's data cannot be on a
// cluster; the config path onto one). Clients keep the pool's name and
// lmstfy's token: the ready jobs come out in order, the dead one is in
// the dead letter, and the delayed and in-flight ones wait in the
// cluster pool in their states until their times.
func TestLmstfyImportIntoCluster(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	lm := lmstfytest.Start(t, rs.Addr)
	d := writeLmstfyData(t, lm)
	lm.Stop(t)
	cl := redistest.SharedCluster(t)
	cl.Flush(t)

	cfg := redisConfig(rs.Addr)
	cfg.Pool["default"] = config.RedisConf{Addr: rs.Addr, LmstfyData: "import", MigrateTo: "c"}
	cfg.Pool["c"] = config.RedisConf{Cluster: true, Addrs: cl.Addrs}
	k := startKairos(t, cfg)
	imp := k.App.LmstfyImports["default"]
	if r := imp.Result; imp.Into != "c" || r.Ready != 4 || r.Delayed != 1 || r.InFlight != 2 || r.Dead != 1 {
		t.Fatalf("import: %+v; want 4 ready, 1 delayed, 2 in flight, 1 dead into pool c", imp)
	}
	cli := client.NewLmstfyClient(k.APIHost, k.APIPort, lmstfyNS, d.Token)
	for i, id := range d.Ready {
		j := okJob(t)(cli.Consume("ready", 30, 0))
		if j == nil || j.ID != id || string(j.Data) != fmt.Sprintf("a%d", i+1) {
			t.Fatalf("ready job %d: %+v; want %s", i, j, id)
		}
		noErr(t, "Ack", cli.Ack("ready", id))
	}
	if size, head, err := cli.PeekDeadLetter("dead"); err != nil || size != 1 || head != d.Dead {
		t.Fatalf("dead letter: %d, %s, %v; want %s", size, head, err, d.Dead)
	}
	ctx := context.Background()
	c := k.App.Engines["c"]
	if j, err := c.PeekJob(ctx, lmstfyNS, "delayed", d.Delayed); err != nil || j.State != engine.StateDelayed ||
		(j.DueAt.Before(d.DelayedDue) || j.DueAt.After(d.DelayedDue.Add(2*time.Second))) {
		t.Errorf("delayed job in the cluster pool: %+v, %v; want delayed until about %v", j, err, d.DelayedDue)
	}
	for _, id := range []string{d.InFlight, d.LastTry} {
		if j, err := c.PeekJob(ctx, lmstfyNS, "inflight", id); err != nil || j.State != engine.StateInFlight ||
			(j.DueAt.Before(d.InFlightDue) || j.DueAt.After(d.InFlightDue.Add(2*time.Second))) {
			t.Errorf("in-flight job %s in the cluster pool: %+v, %v; want in flight until about %v", id, j, err, d.InFlightDue)
		}
	}
	if left := rs.Client().Keys(ctx, "[jqd]/"+lmstfyNS+"/*").Val(); len(left) > 0 {
		t.Errorf("lmstfy keys left: %q", left)
	}
}
