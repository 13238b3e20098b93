package app_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/kairos-dev/kairos/engine"
)

// TestE2EShards (issue #22 item 5): a queue set to shards=4 with the queue
// configuration API is one queue over HTTP, lmstfy's routes and lmstfy's
// own Go client included, while its jobs spread over the shards; changing
// the shards on the live queue loses no job. TestE2ECluster runs it on the
// real cluster.
func TestE2EShards(t *testing.T) {
	e := startE2E(t)
	cli := e.lmstfyClient(e.Token)
	const q = "hot"
	cfgPath := "/queue/" + e.NS + "/" + q + "/config"
	want(t, e.admin(t, http.MethodGet, cfgPath, ""), http.StatusOK, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`)
	want(t, e.admin(t, http.MethodPut, cfgPath, `{"shards":65}`), http.StatusBadRequest, `{"error":"invalid shards: an integer 1..64 (0 means 1)"}`)
	e.setQueueConfig(t, q, `{"shards":4}`, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4}`)
	want(t, e.admin(t, http.MethodGet, cfgPath, ""), http.StatusOK, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4}`)

	// Publish over HTTP and with lmstfy's client.
	published := map[string]bool{}
	shards := map[int]int{}
	for i := 0; i < 24; i++ {
		var id string
		if i%2 == 0 {
			id = e.publish(t, q, "ttl=600&tries=1", fmt.Sprint(i))
		} else {
			id = okID(t)(cli.Publish(q, []byte(fmt.Sprint(i)), 600, 1, 0))
		}
		published[id] = true
		s, _ := engine.JobIDShard(id)
		shards[s]++
	}
	if len(shards) != 4 {
		t.Fatalf("24 publishes went to shards %v, want all of 0..3", shards)
	}
	want(t, e.do(t, http.MethodGet, q+"/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"hot","size":24}`)
	size, err := cli.QueueSize(q)
	noErr(t, "QueueSize", err)
	if size != 24 {
		t.Fatalf("lmstfy QueueSize = %d, want 24", size)
	}
	peek := e.do(t, http.MethodGet, q+"/peek", "", nil, nil)
	peek.wantStatus(t, http.StatusOK)
	if j := peek.job(t); !published[j.JobID] || j.Queue != q {
		t.Fatalf("peek queue: %s", peek.Body)
	}

	// Consume it all back: lmstfy's single and batch consume, a consume
	// over two queues, ACKs over HTTP and with the client.
	seen := map[string]bool{}
	take := func(id, queue string) {
		t.Helper()
		if !published[id] || seen[id] || queue != q {
			t.Fatalf("consumed job %s of queue %s: published %v, seen before %v", id, queue, published[id], seen[id])
		}
		seen[id] = true
	}
	for i := 0; i < 4; i++ {
		j := e.consume(t, q, "ttr=30")
		take(j.JobID, j.Queue)
		e.ack(t, q, j.JobID)
	}
	for i := 0; i < 4; i++ {
		j := e.consume(t, "cold,"+q, "ttr=30")
		take(j.JobID, j.Queue)
		noErr(t, "Ack", cli.Ack(q, j.JobID))
	}
	for i := 0; i < 4; i++ {
		job := okJob(t)(cli.Consume(q, 30, 0))
		if job == nil {
			t.Fatalf("lmstfy Consume: no job after %d", len(seen))
		}
		take(job.ID, job.Queue)
		noErr(t, "Ack", cli.Ack(q, job.ID))
	}
	// Change the shards on the live queue: the jobs of every shard stay.
	e.setQueueConfig(t, q, `{"shards":2}`, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":2}`)
	want(t, e.do(t, http.MethodGet, q+"/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"hot","size":12}`)
	for len(seen) < 24 {
		jobs := okJobs(t)(cli.BatchConsume([]string{q}, 5, 30, 1))
		if len(jobs) == 0 {
			t.Fatalf("BatchConsume: nothing after %d of 24", len(seen))
		}
		for _, j := range jobs {
			take(j.ID, j.Queue)
			if r := e.do(t, http.MethodGet, q+"/job/"+j.ID, "", nil, nil); r.Status != http.StatusOK {
				t.Fatalf("peek job %s: %s", j.ID, r)
			}
			e.ack(t, q, j.ID)
			want(t, e.do(t, http.MethodGet, q+"/job/"+j.ID, "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
		}
	}
	e.wantNoJob(t, q, "")
	want(t, e.do(t, http.MethodGet, q+"/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"hot","size":0}`)

	// An idempotency key maps to one shard: its second publish finds the first job.
	keyed := e.publish(t, q, "job_key=order-7", "keyed")
	want(t, e.do(t, http.MethodPut, q, "job_key=order-7", []byte("again"), nil), http.StatusOK, `{"job_id":"`+keyed+`","msg":"duplicate job_key"}`)
	want(t, e.do(t, http.MethodDelete, q+"/job_key/order-7", "", nil, nil), http.StatusOK, `{"job_id":"`+keyed+`","msg":"cancelled"}`)
	want(t, e.do(t, http.MethodGet, q+"/job/"+keyed, "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)

	// Dead letter over the shards: four jobs die, all respawn.
	e.setQueueConfig(t, q, `{"shards":4}`, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":4}`)
	for i := 0; i < 4; i++ {
		e.publish(t, q, "tries=1", "doomed")
	}
	for i := 0; i < 4; i++ {
		e.consume(t, q, "ttr=1")
	}
	waitDead(t, cli, q, 4)
	want(t, e.do(t, http.MethodGet, q+"/deadletter/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"hot","size":4}`)
	want(t, e.do(t, http.MethodPut, q+"/deadletter", "limit=10&ttl=60", nil, nil), http.StatusOK, `{"count":4,"msg":"respawned"}`)
	jobs := okJobs(t)(cli.BatchConsume([]string{q}, 10, 30, 2))
	for len(jobs) < 4 {
		more := okJobs(t)(cli.BatchConsume([]string{q}, 10, 30, 2))
		if len(more) == 0 {
			t.Fatalf("consumed %d of the 4 respawned jobs", len(jobs))
		}
		jobs = append(jobs, more...)
	}
	// Destroy empties every shard.
	for i := 0; i < 8; i++ {
		e.publish(t, q, "delay=600", "later")
	}
	want(t, e.do(t, http.MethodDelete, q, "", nil, nil), http.StatusNoContent, "")
	for _, j := range jobs {
		if r := e.do(t, http.MethodGet, q+"/job/"+j.ID, "", nil, nil); r.Status != http.StatusNotFound {
			t.Fatalf("job %s after destroy: %s", j.ID, r)
		}
	}
	e.wantNoJob(t, q, "")
}
