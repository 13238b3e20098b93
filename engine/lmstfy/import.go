package lmstfy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// Dest is where an Importer writes: a Kairos pool's engine
// (*rdb.Engine), on a standalone, Sentinel or cluster Redis.
type Dest interface {
	Import(ctx context.Context, ns, q string, jobs []rdb.ImportJob) (int, error)
}

var _ Dest = (*rdb.Engine)(nil)

// Importer moves every lmstfy job of Source into Dest, in the state it has
// there (doc/upgrade.md):
//
//   - a ready job (ready list) stays ready, in its order, with its tries;
//   - a timer_set entry whose time is its job ID's publish time plus the
//     ID's delay, with tries left, is a delayed job: delayed until then;
//   - any other timer_set entry is a job consumed and not ACKed: in flight
//     until its TTR deadline, with the tries the entry holds (lmstfy took
//     the delivery's try at the consume), then back to ready or, with no
//     try left, to the dead letter, as lmstfy would;
//   - a dead letter entry is a dead job (dead reason: TTR expired, the only
//     way into lmstfy's dead letter), in its order;
//
// each with its job ID, payload (body and attributes), and what is left of
// its TTL. Tokens and rate limits need no import: Kairos reads lmstfy's
// keys in the admin Redis as they are.
//
// The import is resumable and idempotent: a job is written into Kairos
// only if its key there does not exist, and removed from lmstfy's layout
// (its entry and job key) only after that write. An import stopped
// halfway and run again writes every job once: the jobs the first run
// wrote and did not remove are found in Kairos and only removed. One
// import runs at a time per source Redis (a lock key, lockKey, which
// expires 15 s after its holder stopped refreshing it).
//
// lmstfy must be stopped: an lmstfy server still running would keep
// writing and consuming lmstfy's layout during and after the import.
type Importer struct {
	// Source is lmstfy's Redis (standalone or Sentinel).
	Source redis.UniversalClient
	Dest   Dest
	Log    logrus.FieldLogger
	// Now is the clock (time of death of dead jobs); nil is time.Now.
	Now func() time.Time
	// Batch is how many entries one step reads; 0 means 1000.
	Batch int

	logged time.Time // the last progress line
}

// Result counts what an import did.
type Result struct {
	// Queues is the number of lmstfy queues looked at.
	Queues int
	// Ready, Delayed, InFlight and Dead count the jobs written into Kairos.
	Ready, Delayed, InFlight, Dead int64
	// Already counts the jobs found in Kairos already, written by an
	// earlier import that was stopped before removing them from lmstfy's
	// layout: removed, not written again.
	Already int64
	// Expired counts entries whose job had expired (no job key): lmstfy
	// would have dropped them when it met them; removed.
	Expired int64
	// Malformed counts entries that do not decode (lmstfy could not have
	// delivered them either); removed, each logged.
	Malformed int64
	// Registries is the number of lmstfy registry hashes deleted (m/ns and
	// each m/ns/NS), after every job was moved.
	Registries int
}

// Imported is the number of jobs written into Kairos.
func (r Result) Imported() int64 { return r.Ready + r.Delayed + r.InFlight + r.Dead }

// lockKey keeps two imports from one source apart (two servers started at
// once with LmstfyData = "import").
const lockKey = "kairos/lmstfy-import"

const lockTTL = 15 * time.Second

// Run imports every lmstfy job of Source into Dest and returns what it
// did; on an error, what it did until then.
func (im *Importer) Run(ctx context.Context) (Result, error) {
	var res Result
	if im.Log == nil {
		l := logrus.New()
		l.SetOutput(discard{})
		im.Log = l
	}
	if im.Now == nil {
		im.Now = time.Now
	}
	if im.Batch <= 0 {
		im.Batch = 1000
	}
	im.logged = time.Now()
	if _, ok := im.Source.(*redis.ClusterClient); ok {
		return res, errors.New("lmstfy: a Redis Cluster holds no lmstfy data (lmstfy runs on one Redis): import from lmstfy's standalone or Sentinel Redis")
	}
	unlock, err := im.lock(ctx)
	if err != nil {
		return res, err
	}
	defer unlock()
	queues := map[string]bool{}
	if err := scanLists(ctx, im.Source, queues); err != nil {
		return res, err
	}
	reg, registered, err := registryQueues(ctx, im.Source)
	if err != nil {
		return res, err
	}
	for q := range reg {
		queues[q] = true
	}
	if err := im.timer(ctx, &res, queues); err != nil {
		return res, err
	}
	res.Queues = len(queues)
	for name := range queues {
		ns, q, _ := splitQueue(name)
		if err := im.list(ctx, &res, ns, q, false); err != nil {
			return res, err
		}
		if err := im.list(ctx, &res, ns, q, true); err != nil {
			return res, err
		}
	}
	// Every job moved: lmstfy's registries go, unless jobs came back (an
	// lmstfy server still running).
	left, err := Detect(ctx, im.Source, false)
	if err != nil {
		return res, err
	}
	if left.Jobs() {
		return res, fmt.Errorf("lmstfy: jobs appeared in lmstfy's layout during the import (%s): is an lmstfy server still running on this Redis? Stop it and run the import again", left)
	}
	nss := map[string]bool{}
	for _, name := range registered {
		ns, _, _ := splitQueue(name)
		nss[ns] = true
	}
	all, err := im.Source.HKeys(ctx, namespaces).Result()
	if err != nil {
		return res, err
	}
	for _, ns := range all {
		nss[ns] = true
	}
	keys := []string{namespaces}
	for ns := range nss {
		keys = append(keys, queuesKey(ns))
	}
	n, err := im.Source.Del(ctx, keys...).Result()
	if err != nil {
		return res, fmt.Errorf("lmstfy: delete the registries: %w", err)
	}
	res.Registries = int(n)
	return res, nil
}

// lock takes lockKey, waiting while another import holds it, and returns
// the function that releases it; a goroutine refreshes it meanwhile.
func (im *Importer) lock(ctx context.Context) (func(), error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	me := hex.EncodeToString(b[:])
	logged := false
	for {
		ok, err := im.Source.SetNX(ctx, lockKey, me, lockTTL).Result()
		if err != nil {
			return nil, fmt.Errorf("lmstfy: import lock %s: %w", lockKey, err)
		}
		if ok {
			break
		}
		if !logged {
			im.Log.WithField("lock", lockKey).Warn("another lmstfy import runs on this Redis: waiting for it to end (or for its lock to expire, 15 s after its server stopped)")
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(lockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = refreshLock.Run(context.Background(), im.Source, []string{lockKey}, me, lockTTL.Milliseconds()).Err()
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		_ = releaseLock.Run(context.Background(), im.Source, []string{lockKey}, me).Err()
	}, nil
}

var refreshLock = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

var releaseLock = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// fetched is a job key's value and PTTL.
type fetched struct {
	get  *redis.StringCmd
	pttl *redis.DurationCmd
}

// fetch reads the value and the remaining TTL of each job key.
func (im *Importer) fetch(ctx context.Context, keys []string) ([]fetched, error) {
	out := make([]fetched, len(keys))
	_, err := im.Source.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			out[i] = fetched{p.Get(ctx, k), p.PTTL(ctx, k)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("lmstfy: read jobs: %w", err)
	}
	// A redis.Nil from Pipelined is the first failed command's error: each
	// command's own error is checked in job.
	return out, nil
}

// job returns the ImportJob of f, or false when the job expired (no job
// key: lmstfy would drop the entry). Any other error of the read stops
// the import: an entry is never taken for an expired job's by mistake.
func (f fetched) job(id string) (rdb.ImportJob, bool, error) {
	v, err := f.get.Bytes()
	if errors.Is(err, redis.Nil) {
		return rdb.ImportJob{}, false, nil
	}
	if err != nil {
		return rdb.ImportJob{}, false, fmt.Errorf("lmstfy: read job %s: %w", id, err)
	}
	j := rdb.ImportJob{ID: id, Payload: v}
	ttl, err := f.pttl.Result()
	switch {
	case err != nil:
		return j, false, fmt.Errorf("lmstfy: read the TTL of job %s: %w", id, err)
	case ttl == -2:
		return j, false, nil // expired between GET and PTTL
	case ttl > 0:
		j.TTL = ttl
	}
	return j, true, nil
}

// timer imports timer_set, batch by batch from its earliest entries, and
// adds the queues it names to queues.
func (im *Importer) timer(ctx context.Context, res *Result, queues map[string]bool) error {
	for {
		zs, err := im.Source.ZRangeWithScores(ctx, timerSet, 0, int64(im.Batch-1)).Result()
		if err != nil {
			return fmt.Errorf("lmstfy: %s: %w", timerSet, err)
		}
		if len(zs) == 0 {
			return nil
		}
		entries := make([]timerEntry, len(zs))
		keys := make([]string, len(zs))
		members := make([]interface{}, len(zs))
		for i, z := range zs {
			m, _ := z.Member.(string)
			members[i] = m
			e, err := decodeTimer(m)
			if err != nil {
				res.Malformed++
				im.Log.WithField("entry", fmt.Sprintf("%q", m)).Warn("lmstfy: removed a malformed timer_set entry (lmstfy could not have delivered it either)")
				continue
			}
			entries[i] = e
			keys[i] = jobKey(e.ns, e.q, e.id)
			queues[queueName(e.ns, e.q)] = true
		}
		var jobKeys []string
		var fetchKeys []string
		for _, k := range keys {
			if k != "" {
				fetchKeys = append(fetchKeys, k)
			}
		}
		got, err := im.fetch(ctx, fetchKeys)
		if err != nil {
			return err
		}
		// Per queue, the delayed jobs and the in-flight ones, in order.
		type group struct{ delayed, inflight []rdb.ImportJob }
		groups := map[string]*group{}
		var order []string
		k := 0
		for i, z := range zs {
			if keys[i] == "" {
				continue
			}
			f := got[k]
			k++
			e := entries[i]
			jobKeys = append(jobKeys, keys[i])
			j, ok, err := f.job(e.id)
			if err != nil {
				return err
			}
			if !ok {
				res.Expired++
				continue
			}
			name := queueName(e.ns, e.q)
			g := groups[name]
			if g == nil {
				g = &group{}
				groups[name] = g
				order = append(order, name)
			}
			j.At = time.Unix(int64(z.Score), 0)
			j.Tries = e.tries
			if timerDelayed(e, z.Score) {
				j.State = engine.StateDelayed
				g.delayed = append(g.delayed, j)
			} else {
				j.State = engine.StateInFlight
				j.Deliveries = 1
				g.inflight = append(g.inflight, j)
			}
		}
		for _, name := range order {
			ns, q, _ := splitQueue(name)
			g := groups[name]
			if err := im.write(ctx, res, ns, q, g.delayed, &res.Delayed); err != nil {
				return err
			}
			if err := im.write(ctx, res, ns, q, g.inflight, &res.InFlight); err != nil {
				return err
			}
		}
		// Written: out of lmstfy's layout, entries and job keys at once.
		if _, err := im.Source.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, timerSet, members...)
			if len(jobKeys) > 0 {
				p.Del(ctx, jobKeys...)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("lmstfy: remove imported timer_set entries: %w", err)
		}
	}
}

// timerDelayed tells a delayed job's timer entry from an in-flight one's:
// lmstfy schedules a delayed job at its publish second plus its delay,
// both in its ID (the second can tick between the ID and the entry), and
// never with 0 tries; a consumed job's entry is due at the consume time
// plus the TTR, which comes after the delay.
func timerDelayed(e timerEntry, score float64) bool {
	if e.tries == 0 {
		return false
	}
	info, err := engine.ParseJobID(e.id)
	if err != nil || info.Delay <= 0 {
		return false
	}
	due := info.Published.Unix() + int64(info.Delay/time.Second)
	s := int64(math.Floor(score))
	return s >= due && s <= due+1
}

// write imports jobs of one state into Dest, adding the jobs written to
// *count and the others to res.Already.
func (im *Importer) write(ctx context.Context, res *Result, ns, q string, jobs []rdb.ImportJob, count *int64) error {
	if len(jobs) == 0 {
		return nil
	}
	n, err := im.Dest.Import(ctx, ns, q, jobs)
	*count += int64(n)
	if err != nil {
		return fmt.Errorf("lmstfy: import into Kairos: %w", err)
	}
	res.Already += int64(len(jobs) - n)
	if time.Since(im.logged) >= 10*time.Second {
		im.logged = time.Now()
		im.Log.WithFields(logrus.Fields{"ready": res.Ready, "delayed": res.Delayed, "in_flight": res.InFlight, "dead": res.Dead,
			"already_imported": res.Already}).Info(fmt.Sprintf("lmstfy import: %d jobs written into Kairos so far", res.Imported()))
	}
	return nil
}

// list imports the ready list (or, with dead, the dead letter) of ns/q,
// batch by batch from its newest end, so that the oldest jobs end at the
// consume end of Kairos's list, after every job already there.
func (im *Importer) list(ctx context.Context, res *Result, ns, q string, dead bool) error {
	key, state, count := readyKey(ns, q), engine.StateReady, &res.Ready
	if dead {
		key, state, count = deadKey(ns, q), engine.StateDead, &res.Dead
	}
	for {
		es, err := im.Source.LRange(ctx, key, 0, int64(im.Batch-1)).Result()
		if err != nil {
			return fmt.Errorf("lmstfy: %s: %w", key, err)
		}
		if len(es) == 0 {
			return nil
		}
		var ids, keys []string
		var tries []uint16
		for _, e := range es {
			t, id, err := decodeEntry(e)
			if err != nil {
				res.Malformed++
				im.Log.WithField("list", key).WithField("entry", fmt.Sprintf("%q", e)).Warn("lmstfy: removed a malformed entry (lmstfy could not have delivered it either)")
				continue
			}
			ids = append(ids, id)
			tries = append(tries, t)
			keys = append(keys, jobKey(ns, q, id))
		}
		got, err := im.fetch(ctx, keys)
		if err != nil {
			return err
		}
		var jobs []rdb.ImportJob
		for i, f := range got {
			j, ok, err := f.job(ids[i])
			if err != nil {
				return err
			}
			if !ok {
				res.Expired++
				continue
			}
			j.State, j.Tries = state, tries[i]
			if dead {
				j.Tries, j.Deliveries, j.At = 0, 1, im.Now()
			}
			jobs = append(jobs, j)
		}
		if err := im.write(ctx, res, ns, q, jobs, count); err != nil {
			return err
		}
		args := make([]interface{}, len(es))
		for i, e := range es {
			args[i] = e
		}
		if err := removeHead.Run(ctx, im.Source, append([]string{key}, keys...), args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("lmstfy: remove imported entries of %s: %w", key, err)
		}
	}
}

// removeHead removes entries read from the head of a list and their job
// keys: by one LTRIM when the head still holds them, else one LREM each
// (another import removed them, or something pushed in between).
//
//	KEYS[1] the list   KEYS[2…] job keys to delete
//	ARGV the entries, as LRANGE 0 n-1 returned them
var removeHead = redis.NewScript(`
local n = #ARGV
local head = redis.call('LRANGE', KEYS[1], 0, n - 1)
local same = #head == n
if same then
  for i = 1, n do
    if head[i] ~= ARGV[i] then same = false break end
  end
end
if same then
  redis.call('LTRIM', KEYS[1], n, -1)
else
  for i = 1, n do redis.call('LREM', KEYS[1], 1, ARGV[i]) end
end
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
return n
`)

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
