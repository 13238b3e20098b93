package enginetest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// RunSharded runs the contract of hot-queue shards (QueueConfig.Shards):
// a sharded queue is one logical queue to every operation, its jobs spread
// over the shards, and changing the number of shards under load loses no
// job.
func RunSharded(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *Harness, engine.Engine)
	}{
		{"Config", testShardsConfig},
		{"PublishConsumeAck", testShardsPublishConsumeAck},
		{"NoStarvation", testShardsNoStarvation},
		{"SpreadPerQueue", testShardsSpreadPerQueue},
		{"JobKey", testShardsJobKey},
		{"DeadLetter", testShardsDeadLetter},
		{"PauseResume", testShardsPause},
		{"Destroy", testShardsDestroy},
		{"ReleaseTouch", testShardsReleaseTouch},
		{"Republish", testShardsRepublish},
		{"JobsFromBeforeSharding", testShardsLegacyJobs},
		{"LongPoll", testShardsLongPoll},
		{"Batches", testShardsBatches},
		{"ChangeUnderLoad", testShardsChangeUnderLoad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := f(t)
			tc.fn(t, h, h.Engine)
		})
	}
}

// setShards sets ns/q's shards, keeping its other settings.
func setShards(t *testing.T, x engine.Engine, q string, k int) {
	t.Helper()
	cfg, err := x.QueueConfig(bg, ns, q)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Shards = k
	if err := x.SetQueueConfig(bg, ns, q, cfg); err != nil {
		t.Fatalf("set shards %d: %v", k, err)
	}
}

// shardOf is the shard a job ID names.
func shardOf(t *testing.T, id string) int {
	t.Helper()
	s, ok := engine.JobIDShard(id)
	if !ok {
		t.Fatalf("job id %q does not parse", id)
	}
	return s
}

func size(t *testing.T, x engine.Engine, q string) int64 {
	t.Helper()
	n, err := x.Size(bg, ns, q)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testShardsConfig(t *testing.T, h *Harness, x engine.Engine) {
	cfg, err := x.QueueConfig(bg, ns, "q")
	if err != nil || cfg.Shards != 1 {
		t.Fatalf("unsharded queue config = %+v, %v; want shards 1", cfg, err)
	}
	for _, bad := range []int{-1, engine.MaxShards + 1} {
		if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{Shards: bad}); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("shards %d: %v, want ErrInvalid", bad, err)
		}
	}
	setShards(t, x, "q", 4)
	if cfg, _ := x.QueueConfig(bg, ns, "q"); cfg.Shards != 4 {
		t.Fatalf("config after shards=4: %+v", cfg)
	}
	// 0 keeps the shards: a change of another setting leaves them.
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{Paused: true}); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := x.QueueConfig(bg, ns, "q"); cfg.Shards != 4 || !cfg.Paused {
		t.Fatalf("config after pause: %+v", cfg)
	}
	setShards(t, x, "q", 1)
	if cfg, _ := x.QueueConfig(bg, ns, "q"); cfg.Shards != 1 {
		t.Fatalf("config after shards=1: %+v", cfg)
	}
}

func testShardsPublishConsumeAck(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	const n = 40
	want := map[string]bool{}
	shards := map[int]int{}
	for i := 0; i < n; i++ {
		id := pub(t, h, "q", fmt.Sprint(i), nil)
		want[id] = true
		shards[shardOf(t, id)]++
	}
	if len(shards) != 4 {
		t.Fatalf("40 jobs spread over shards %v, want all of 0..3", shards)
	}
	if got := size(t, x, "q"); got != n {
		t.Fatalf("size = %d, want %d", got, n)
	}
	head, err := x.PeekQueue(bg, ns, "q")
	if err != nil || !want[head.ID] || head.Queue != "q" {
		t.Fatalf("peek queue = %+v, %v", head, err)
	}
	info, err := x.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(info[ns]) != "[q]" {
		t.Fatalf("info lists %v, want the one logical queue [q]", info[ns])
	}
	seen := map[string]bool{}
	for len(seen) < n {
		jobs := consume(t, h, time.Minute, 7, "q")
		if len(jobs) == 0 {
			t.Fatalf("consumed %d of %d, then nothing", len(seen), n)
		}
		for _, j := range jobs {
			if !want[j.ID] || seen[j.ID] || j.Queue != "q" {
				t.Fatalf("job %+v: published %v, seen %v", j, want[j.ID], seen[j.ID])
			}
			seen[j.ID] = true
			pj, err := x.PeekJob(bg, ns, "q", j.ID)
			if err != nil || pj.State != engine.StateInFlight || pj.Queue != "q" {
				t.Fatalf("peek job %s = %+v, %v", j.ID, pj, err)
			}
			// Half with the receipt, half lmstfy's way.
			if len(seen)%2 == 0 {
				err = x.Ack(bg, ns, "q", j.ID, j.Receipt)
			} else {
				err = x.Delete(bg, ns, "q", j.ID)
			}
			if err != nil {
				t.Fatalf("ack %s: %v", j.ID, err)
			}
			if _, err := x.PeekJob(bg, ns, "q", j.ID); !errors.Is(err, engine.ErrJobNotFound) {
				t.Fatalf("peek of an ACKed job: %v", err)
			}
		}
	}
	if got := size(t, x, "q"); got != 0 {
		t.Fatalf("size after all ACKed = %d", got)
	}
	if _, err := x.PeekQueue(bg, ns, "q"); !errors.Is(err, engine.ErrQueueEmpty) {
		t.Fatalf("peek of the empty queue: %v", err)
	}
	none(t, h, "q")
}

// testShardsNoStarvation: single-job consumes take from every shard in
// turn rather than draining one shard first.
func testShardsNoStarvation(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	for i := 0; i < 80; i++ {
		pub(t, h, "q", fmt.Sprint(i), nil)
	}
	shards := map[int]int{}
	for i := 0; i < 12; i++ {
		shards[shardOf(t, one(t, h, time.Minute, "q").ID)]++
	}
	if len(shards) < 3 {
		t.Fatalf("12 consumes of 80 jobs over 4 shards took from shards %v: a shard starves", shards)
	}
}

func testShardsJobKey(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	first := map[string]string{}
	shards := map[int]bool{}
	for i := 0; i < 12; i++ {
		k := fmt.Sprint("key-", i)
		first[k] = pub(t, h, "q", k, func(r *engine.PublishRequest) { r.Key = k })
		shards[shardOf(t, first[k])] = true
	}
	if len(shards) < 2 {
		t.Fatalf("12 keys all went to shards %v", shards)
	}
	check := func() {
		t.Helper()
		for k, id := range first {
			got, err := x.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", Body: []byte("again"), TTL: time.Hour, Tries: 1, Key: k})
			if !errors.Is(err, engine.ErrKeyExists) || got != id {
				t.Fatalf("publish with key %s again = %s, %v; want %s, ErrKeyExists", k, got, err, id)
			}
		}
	}
	check()
	// The previous mapping is still looked at after a change of K.
	setShards(t, x, "q", 3)
	check()
	id, err := x.CancelKey(bg, ns, "q", "key-5")
	if err != nil || id != first["key-5"] {
		t.Fatalf("cancel key = %s, %v; want %s", id, err, first["key-5"])
	}
	if _, err := x.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("the cancelled job: %v", err)
	}
	again, err := x.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", Body: []byte("new"), TTL: time.Hour, Tries: 1, Key: "key-5"})
	if err != nil || again == id {
		t.Fatalf("publish with the cancelled key = %s, %v", again, err)
	}
	if _, err := x.CancelKey(bg, ns, "q", "no-such-key"); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("cancel of an unknown key: %v", err)
	}
}

// killShards publishes n jobs with one try to the sharded queue q and lets
// their TTRs run out: they are dead.
func killShards(t *testing.T, h *Harness, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, pub(t, h, "q", fmt.Sprint(i), nil))
	}
	for got := 0; got < n; {
		jobs := consume(t, h, time.Second, n, "q")
		if len(jobs) == 0 {
			t.Fatalf("consumed %d of %d", got, n)
		}
		got += len(jobs)
	}
	h.Advance(2 * time.Second)
	return ids
}

func testShardsDeadLetter(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	ids := killShards(t, h, 12)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if n, err := x.DeadLetterSize(bg, ns, "q"); err != nil || n != 12 {
		t.Fatalf("dead letter size = %d, %v", n, err)
	}
	dl := deadLetter(t, h, "q")
	if dl.Size != 12 || !want[dl.Head] {
		t.Fatalf("peek dead letter = %+v", dl)
	}
	// Pages cover every dead job once.
	listed := map[string]bool{}
	for off := int64(0); off < 12; off += 5 {
		page, err := x.ListDeadLetter(bg, ns, "q", off, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			if !want[j.ID] || listed[j.ID] || j.Queue != "q" || j.State != engine.StateDead {
				t.Fatalf("listed %+v (dead %v, listed before %v)", j, want[j.ID], listed[j.ID])
			}
			listed[j.ID] = true
		}
	}
	if len(listed) != 12 {
		t.Fatalf("pages listed %d of 12", len(listed))
	}
	// Newest first is the exact reverse, page by page, of oldest first;
	// a reason filter and its scan bound count entries over all shards.
	all := func(q engine.DeadLetterQuery) (ids []string) {
		for q.Offset = 0; q.Offset >= 0; {
			got, p := pageIDs(t, x, q)
			if p.Size != 12 || len(got) > int(q.Limit) {
				t.Fatalf("page %+v: %v of size %d", q, got, p.Size)
			}
			ids = append(ids, got...)
			q.Offset = p.Next
		}
		return ids
	}
	oldest, newest := all(engine.DeadLetterQuery{Limit: 5}), all(engine.DeadLetterQuery{Limit: 5, Newest: true})
	slices.Reverse(newest)
	if len(oldest) != 12 || !slices.Equal(oldest, newest) {
		t.Fatalf("oldest first %v, newest first reversed %v", oldest, newest)
	}
	if got := all(engine.DeadLetterQuery{Limit: 2, Newest: true, Reason: engine.ReasonTTRExpired, Scan: 3}); len(got) != 12 {
		t.Fatalf("filtered pages listed %d of 12", len(got))
	}
	if got, p := pageIDs(t, x, engine.DeadLetterQuery{Limit: 100, Reason: engine.ReasonNacked, Scan: 7}); len(got) != 0 || p.Next != 7 {
		t.Fatalf("nacked, 7 entries scanned: %v, next %d", got, p.Next)
	}
	if got, p := pageIDs(t, x, engine.DeadLetterQuery{Limit: 100, Reason: engine.ReasonNacked}); len(got) != 0 || p.Next != -1 {
		t.Fatalf("nacked: %v, next %d", got, p.Next)
	}
	// One by ID, in every shard.
	byShard := map[int]string{}
	for _, id := range ids {
		byShard[shardOf(t, id)] = id
	}
	if len(byShard) < 2 {
		t.Fatalf("12 dead jobs all in shards %v", byShard)
	}
	var one1 string
	for _, id := range byShard {
		one1 = id
		if err := x.RespawnDeadJob(bg, ns, "q", id, time.Hour); err != nil {
			t.Fatalf("respawn %s: %v", id, err)
		}
	}
	if err := x.DeleteDeadJob(bg, ns, "q", one1); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("delete of a respawned job as dead: %v", err)
	}
	left := 12 - int64(len(byShard))
	if got := size(t, x, "q"); got != int64(len(byShard)) {
		t.Fatalf("size after respawning %d = %d", len(byShard), got)
	}
	// The rest: 2 deleted, then all respawned.
	if n, err := x.DeleteDeadLetter(bg, ns, "q", 2); err != nil || n != 2 {
		t.Fatalf("delete dead letter 2 = %d, %v", n, err)
	}
	if n, err := x.RespawnDeadLetter(bg, ns, "q", 100, time.Hour); err != nil || n != left-2 {
		t.Fatalf("respawn all = %d, %v; want %d", n, err, left-2)
	}
	if n, _ := x.DeadLetterSize(bg, ns, "q"); n != 0 {
		t.Fatalf("dead letter size after respawn = %d", n)
	}
	if got := size(t, x, "q"); got != 10 {
		t.Fatalf("size after respawn = %d, want 10", got)
	}
}

func testShardsPause(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{Paused: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		pub(t, h, "q", fmt.Sprint(i), nil)
	}
	none(t, h, "q")
	// A shard added while paused is paused too.
	setShards(t, x, "q", 8)
	for i := 0; i < 16; i++ {
		pub(t, h, "q", fmt.Sprint(i), nil)
	}
	none(t, h, "q")
	cfg, _ := x.QueueConfig(bg, ns, "q")
	cfg.Paused = false
	if err := x.SetQueueConfig(bg, ns, "q", cfg); err != nil {
		t.Fatal(err)
	}
	if got := len(consume(t, h, time.Minute, 100, "q")); got != 24 {
		t.Fatalf("after resume consumed %d, want 24", got)
	}
}

func testShardsDestroy(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	for i := 0; i < 12; i++ {
		pub(t, h, "q", fmt.Sprint(i), func(r *engine.PublishRequest) {
			if i%3 == 0 {
				r.Delay = time.Hour
			}
		})
	}
	n, err := x.Destroy(bg, ns, "q")
	if err != nil || n != 12 {
		t.Fatalf("destroy = %d, %v; want 12", n, err)
	}
	if got := size(t, x, "q"); got != 0 {
		t.Fatalf("size after destroy = %d", got)
	}
	h.Advance(2 * time.Hour)
	none(t, h, "q")
}

func testShardsReleaseTouch(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	for i := 0; i < 8; i++ {
		pub(t, h, "q", fmt.Sprint(i), func(r *engine.PublishRequest) { r.Tries = 3 })
	}
	jobs := consume(t, h, time.Minute, 8, "q")
	if len(jobs) != 8 {
		t.Fatalf("consumed %d of 8", len(jobs))
	}
	for _, j := range jobs {
		if _, err := x.Touch(bg, ns, "q", j.ID, j.Receipt, time.Hour); err != nil {
			t.Fatalf("touch %s: %v", j.ID, err)
		}
		if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: j.ID, Receipt: j.Receipt}); err != nil {
			t.Fatalf("release %s: %v", j.ID, err)
		}
		if err := x.Ack(bg, ns, "q", j.ID, j.Receipt); !errors.Is(err, engine.ErrStaleReceipt) {
			t.Fatalf("ack with the receipt of a released delivery: %v", err)
		}
	}
	again := consume(t, h, time.Minute, 8, "q")
	if len(again) != 8 {
		t.Fatalf("consumed %d of the 8 released", len(again))
	}
	for _, j := range again {
		if j.Deliveries != 2 {
			t.Fatalf("released job %s delivered %d times", j.ID, j.Deliveries)
		}
	}
}

// testShardsLegacyJobs: jobs published before the queue was sharded (in
// shard 0, with IDs that may name any shard) stay consumable, ACKable and
// visible.
func testShardsLegacyJobs(t *testing.T, h *Harness, x engine.Engine) {
	var ids []string
	for s := 0; s < 4; s++ {
		// Explicit IDs that name shards 0..3, published unsharded.
		id := engine.NewShardJobID(time.Now(), 0, false, s)
		pub(t, h, "q", fmt.Sprint(s), func(r *engine.PublishRequest) { r.ID = id })
		ids = append(ids, id)
	}
	setShards(t, x, "q", 4)
	for _, id := range ids {
		if j, err := x.PeekJob(bg, ns, "q", id); err != nil || j.State != engine.StateReady {
			t.Fatalf("peek job %s after sharding: %+v, %v", id, j, err)
		}
	}
	if got := size(t, x, "q"); got != 4 {
		t.Fatalf("size = %d, want 4", got)
	}
	jobs := consume(t, h, time.Minute, 4, "q")
	if len(jobs) != 4 {
		t.Fatalf("consumed %d of 4", len(jobs))
	}
	for i, j := range jobs {
		var err error
		if i%2 == 0 {
			err = x.Delete(bg, ns, "q", j.ID)
		} else {
			err = x.Ack(bg, ns, "q", j.ID, j.Receipt)
		}
		if err != nil {
			t.Fatalf("ack %s: %v", j.ID, err)
		}
	}
	for _, id := range ids {
		if _, err := x.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
			t.Fatalf("job %s after its ACK: %v", id, err)
		}
	}
	h.Advance(2 * time.Minute)
	none(t, h, "q")
}

func testShardsLongPoll(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	for i := 0; i < 6; i++ {
		got := make(chan []*engine.Job, 1)
		go func() {
			jobs, _ := x.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1, Timeout: 5 * time.Second})
			got <- jobs
		}()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		id := pub(t, h, "q", fmt.Sprint(i), nil)
		select {
		case jobs := <-got:
			if len(jobs) != 1 || jobs[0].ID != id {
				t.Fatalf("long poll got %v, want %s", jobs, id)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("long poll woke after %v", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a waiting consumer was not woken by job %s of shard %d", id, shardOf(t, id))
		}
	}
}

// testShardsBatches: the event loops' forms (PublishEach, ConsumeEach,
// DeleteEach, Watch) on a sharded queue; a PublishEach's jobs of the queue
// go to one shard, successive calls to the shards in turn.
func testShardsBatches(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	// Each PublishEach puts its jobs of the queue in one shard (one script
	// call), the next call in the next shard: four calls cover the four.
	shards := map[int]bool{}
	for b := 0; b < 4; b++ {
		reqs := make([]*engine.PublishRequest, 4)
		for i := range reqs {
			reqs[i] = &engine.PublishRequest{Namespace: ns, Queue: "q", Body: []byte(fmt.Sprint(4*b + i)), TTL: time.Hour, Tries: 1}
		}
		ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
		x.PublishEach(bg, reqs, ids, errs)
		batch := map[int]bool{}
		for i := range reqs {
			if errs[i] != nil || reqs[i].Queue != "q" {
				t.Fatalf("publish each %d: %v (queue %q)", i, errs[i], reqs[i].Queue)
			}
			batch[shardOf(t, ids[i])] = true
			shards[shardOf(t, ids[i])] = true
		}
		if len(batch) != 1 {
			t.Fatalf("PublishEach %d spread its 4 jobs over shards %v; want one", b, batch)
		}
	}
	if len(shards) != 4 {
		t.Fatalf("4 PublishEach of 4 jobs went to shards %v; want all 4", shards)
	}
	creqs := []*engine.ConsumeRequest{
		{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 10},
		{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 10},
	}
	jobs, cerrs := make([][]*engine.Job, 2), make([]error, 2)
	x.ConsumeEach(bg, creqs, jobs, cerrs)
	var refs []engine.JobRef
	for i := range creqs {
		if cerrs[i] != nil || creqs[i].Queues[0] != "q" || len(creqs[i].Queues) != 1 {
			t.Fatalf("consume each %d: %v, request now %+v", i, cerrs[i], creqs[i])
		}
		for _, j := range jobs[i] {
			refs = append(refs, engine.JobRef{Namespace: ns, Queue: j.Queue, ID: j.ID})
		}
	}
	if len(refs) != 16 {
		t.Fatalf("ConsumeEach got %d jobs, want 16", len(refs))
	}
	derrs := make([]error, len(refs))
	x.DeleteEach(bg, refs, derrs)
	for i, r := range refs {
		if derrs[i] != nil {
			t.Fatalf("delete each %s: %v", r.ID, derrs[i])
		}
		if _, err := x.PeekJob(bg, ns, "q", r.ID); !errors.Is(err, engine.ErrJobNotFound) {
			t.Fatalf("job %s after DeleteEach: %v", r.ID, err)
		}
	}
	// A watch on the queue fires for a job of any shard.
	for i := 0; i < 4; i++ {
		woke := make(chan struct{}, 1)
		stop, _, ok := x.Watch(ns, []string{"q"}, func() { woke <- struct{}{} })
		if !ok {
			return // an engine that cannot watch
		}
		id := pub(t, h, "q", "w", nil)
		select {
		case <-woke:
		case <-time.After(5 * time.Second):
			stop()
			t.Fatalf("no wake-up for job %s of shard %d", id, shardOf(t, id))
		}
		if j := one(t, h, time.Minute, "q"); j.ID != id {
			t.Fatalf("after the wake-up got %s, want %s", j.ID, id)
		}
	}
}

// testShardsChangeUnderLoad changes K up and down while producers publish
// and consumers consume and ACK: every published job is delivered, none is
// lost.
func testShardsChangeUnderLoad(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 2)
	const producers, consumers, perProducer = 3, 4, 150
	var mu sync.Mutex
	published := map[string]bool{}
	acked := map[string]bool{}
	var done atomic.Bool
	var pwg, cwg sync.WaitGroup
	for p := 0; p < producers; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := 0; i < perProducer; i++ {
				id, err := x.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", Body: []byte("x"), TTL: time.Hour, Tries: 3})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				published[id] = true
				mu.Unlock()
			}
		}()
	}
	errc := make(chan error, consumers)
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				jobs, err := x.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 5, Timeout: 100 * time.Millisecond})
				if err != nil {
					errc <- err
					return
				}
				if len(jobs) == 0 && done.Load() {
					return
				}
				for _, j := range jobs {
					if err := x.Ack(bg, ns, "q", j.ID, j.Receipt); err != nil {
						errc <- fmt.Errorf("ack %s: %w", j.ID, err)
						return
					}
					mu.Lock()
					acked[j.ID] = true
					mu.Unlock()
				}
			}
		}()
	}
	for _, k := range []int{8, 3, 1, 5, 2} {
		time.Sleep(150 * time.Millisecond)
		setShards(t, x, "q", k)
	}
	pwg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= producers*perProducer || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	done.Store(true)
	cwg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var lost []string
	for id := range published {
		if !acked[id] {
			lost = append(lost, id)
		}
	}
	sort.Strings(lost)
	if len(published) != producers*perProducer || len(lost) > 0 {
		t.Fatalf("published %d, acked %d; lost %d: %v", len(published), len(acked), len(lost), lost)
	}
	if got := size(t, x, "q"); got != 0 {
		t.Fatalf("size at the end = %d", got)
	}
	if n, _ := x.DeadLetterSize(bg, ns, "q"); n != 0 {
		t.Fatalf("dead letter at the end = %d", n)
	}
}

// testShardsRepublish: lmstfy's re-publish replaces a job of any shard in
// the same step, in that job's shard.
func testShardsRepublish(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 4)
	var olds []string
	for i := 0; i < 8; i++ {
		olds = append(olds, pub(t, h, "q", "old", nil))
	}
	jobs := consume(t, h, time.Minute, 8, "q")
	if len(jobs) != 8 {
		t.Fatalf("consumed %d of 8", len(jobs))
	}
	for _, old := range olds {
		id := pub(t, h, "q", "new", func(r *engine.PublishRequest) { r.Replaces = old })
		if _, err := x.PeekJob(bg, ns, "q", old); !errors.Is(err, engine.ErrJobNotFound) {
			t.Fatalf("replaced job %s still there: %v", old, err)
		}
		if shardOf(t, id) != shardOf(t, old) {
			t.Fatalf("job %s of shard %d replaced by %s in shard %d", old, shardOf(t, old), id, shardOf(t, id))
		}
	}
	if got := len(consume(t, h, time.Minute, 20, "q")); got != 8 {
		t.Fatalf("consumed %d of the 8 new jobs", got)
	}
	h.Advance(2 * time.Minute)
	none(t, h, "q")
}

// testShardsSpreadPerQueue: publishes alternating between two sharded
// queues, with consumes between them, still spread each queue over all of
// its shards (no turn shared by queues that would alias).
func testShardsSpreadPerQueue(t *testing.T, h *Harness, x engine.Engine) {
	setShards(t, x, "q", 2)
	setShards(t, x, "r", 2)
	got := map[string]map[int]int{"q": {}, "r": {}}
	for i := 0; i < 10; i++ {
		for _, q := range []string{"q", "r"} {
			got[q][shardOf(t, pub(t, h, q, "x", nil))]++
		}
		consume(t, h, time.Minute, 1, "other")
	}
	for q, shards := range got {
		if shards[0] != 5 || shards[1] != 5 {
			t.Fatalf("10 publishes to %s, alternating with another queue's, went to shards %v; want 5 and 5", q, shards)
		}
	}
}
