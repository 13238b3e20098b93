package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

func TestNewRefusesBadArguments(t *testing.T) {
	tests := []struct {
		name string
		addr string
		opts []client.Option
	}{
		{"empty address", "", []client.Option{client.WithNamespace("ns")}},
		{"bad scheme", "ftp://host:1", []client.Option{client.WithNamespace("ns")}},
		{"no host", "http://", []client.Option{client.WithNamespace("ns")}},
		{"query in address", "http://host:1?a=b", []client.Option{client.WithNamespace("ns")}},
		{"no namespace", "127.0.0.1:7777", nil},
		{"empty namespace", "127.0.0.1:7777", []client.Option{client.WithNamespace("")}},
		{"nil http client", "127.0.0.1:7777", []client.Option{client.WithNamespace("ns"), client.WithHTTPClient(nil)}},
		{"zero timeout", "127.0.0.1:7777", []client.Option{client.WithNamespace("ns"), client.WithTimeout(0)}},
		{"negative retries", "127.0.0.1:7777", []client.Option{client.WithNamespace("ns"), client.WithRetry(-1, 0, 0)}},
		{"backoff above cap", "127.0.0.1:7777", []client.Option{client.WithNamespace("ns"), client.WithRetry(1, time.Second, time.Millisecond)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.New(tc.addr, tc.opts...)
			if !errors.Is(err, client.ErrBadRequest) {
				t.Fatalf("New: error %v, want ErrBadRequest", err)
			}
		})
	}
}

func TestPublishConsumeAck(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id, err := e.C.Publish(ctx, "q", []byte("hello"), client.TTL(time.Hour), client.Tries(3),
		client.Attributes(map[string]string{"trace": "abc"}), client.Attribute("Tenant", "t1"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(id) != 27 || id[0] != '1' {
		t.Fatalf("job id %q: want a version-1 ID (attributes given)", id)
	}
	job, err := e.C.Consume(ctx, "q", 30*time.Second, 0)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	want := client.Job{ID: id, Namespace: e.NS, Queue: "q", Body: []byte("hello"), RemainTries: 2,
		Attributes: map[string]string{"trace": "abc", "tenant": "t1"}}
	if job.ID != want.ID || job.Namespace != want.Namespace || job.Queue != want.Queue ||
		string(job.Body) != string(want.Body) || job.RemainTries != want.RemainTries ||
		len(job.Attributes) != 2 || job.Attributes["trace"] != "abc" || job.Attributes["tenant"] != "t1" {
		t.Fatalf("Consume: got %+v, want %+v", job, want)
	}
	if job.TTL < 3590*time.Second || job.TTL > time.Hour || job.TTL%time.Second != 0 {
		t.Fatalf("TTL %v, want about 1h in whole seconds", job.TTL)
	}
	if job.ElapsedMS < 0 || job.ElapsedMS > 10000 {
		t.Fatalf("ElapsedMS %d", job.ElapsedMS)
	}
	if err := e.C.Ack(ctx, "q", job.ID); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	_, err = e.C.PeekJob(ctx, "q", id)
	wantErr(t, "PeekJob after Ack", err, client.ErrNotFound, http.StatusNotFound)
	// ACK is idempotent: an unknown job is fine.
	if err := e.C.Ack(ctx, "q", id); err != nil {
		t.Fatalf("second Ack: %v", err)
	}

	// Without attributes and options: a 26-character ID, server defaults.
	id2 := publish(t, e.C, "q", "plain")
	if len(id2) != 26 {
		t.Fatalf("job id %q: want a 26-character ULID", id2)
	}
	job = consume(t, e.C, "q", 0)
	if job.Attributes != nil || job.RemainTries != 0 || job.TTL != 86400*time.Second && job.TTL != 86399*time.Second {
		t.Fatalf("defaults: %+v", job)
	}
}

func TestPublishDelay(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	start := time.Now()
	id := publish(t, e.C, "q", "later", client.Delay(700*time.Millisecond)) // rounded up to 1 s
	_, err := e.C.PeekQueue(ctx, "q")
	wantErr(t, "PeekQueue of a delayed job", err, client.ErrNoJob, http.StatusNotFound)
	job, err := e.C.Consume(ctx, "q", time.Second, 5*time.Second)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if job.ID != id {
		t.Fatalf("got job %s, want %s", job.ID, id)
	}
	if waited := time.Since(start); waited < 650*time.Millisecond {
		t.Fatalf("a job delayed 700ms was consumed after %v", waited)
	}
}

func TestPublishRefusedArguments(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name   string
		queue  string
		opts   []client.PublishOption
		status int // 0: refused by the client
	}{
		{"empty queue", "", nil, 0},
		{"zero tries", "q", []client.PublishOption{client.Tries(0)}, 0},
		{"too many tries", "q", []client.PublishOption{client.Tries(70000)}, 0},
		{"negative delay", "q", []client.PublishOption{client.Delay(-time.Second)}, 0},
		{"huge ttl", "q", []client.PublishOption{client.TTL(200 * 365 * 24 * time.Hour)}, 0},
		{"bad attribute name", "q", []client.PublishOption{client.Attribute("a b", "c")}, 0},
		{"ttl shorter than delay", "q", []client.PublishOption{client.TTL(time.Second), client.Delay(time.Minute)}, http.StatusBadRequest},
		{"bad queue name", "q.x", nil, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.C.Publish(ctx, tc.queue, []byte("x"), tc.opts...)
			wantErr(t, "Publish", err, client.ErrBadRequest, tc.status)
		})
	}
	_, err := e.C.Publish(ctx, "q", make([]byte, client.MaxBodySize+1))
	wantErr(t, "Publish of a body over 1 MiB", err, client.ErrBadRequest, http.StatusRequestEntityTooLarge)
}

func TestRePublish(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	old := publish(t, e.C, "q", "v1", client.Tries(1))
	job := consume(t, e.C, "q", 30*time.Second)
	newID, err := e.C.RePublish(ctx, "q", job.ID, []byte("v2"), client.Tries(2), client.Attribute("k", "v"))
	if err != nil {
		t.Fatalf("RePublish: %v", err)
	}
	if newID == old {
		t.Fatalf("RePublish kept the ID %s", old)
	}
	if _, err := e.C.PeekJob(ctx, "q", old); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("old job after RePublish: %v, want ErrNotFound", err)
	}
	got := consume(t, e.C, "q", time.Second)
	if got.ID != newID || string(got.Body) != "v2" || got.RemainTries != 1 || got.Attributes["k"] != "v" {
		t.Fatalf("republished job: %+v", got)
	}
	_, err = e.C.RePublish(ctx, "q", "", []byte("x"))
	wantErr(t, "RePublish without id", err, client.ErrBadRequest, 0)
}

func TestBatchPublish(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	jobs := []any{
		json.RawMessage(`{ "a" : [1, 2] }`), // kept byte for byte
		[]byte(`"<b>&"`),                    // raw JSON given as bytes
		"text",                              // a Go string becomes a JSON string
		map[string]int{"n": 1},
		42,
		nil,
	}
	want := []string{`{ "a" : [1, 2] }`, `"<b>&"`, `"text"`, `{"n":1}`, `42`, `null`}
	ids, err := e.C.BatchPublish(ctx, "bulk", jobs, client.TTL(time.Minute), client.Tries(2))
	if err != nil {
		t.Fatalf("BatchPublish: %v", err)
	}
	if len(ids) != len(jobs) {
		t.Fatalf("BatchPublish: %d ids for %d jobs", len(ids), len(jobs))
	}
	got, err := e.C.BatchConsume(ctx, []string{"bulk"}, 10, time.Minute, 0)
	if err != nil {
		t.Fatalf("BatchConsume: %v", err)
	}
	if len(got) != len(jobs) {
		t.Fatalf("BatchConsume: %d jobs, want %d", len(got), len(jobs))
	}
	for i, j := range got {
		if j.ID != ids[i] || string(j.Body) != want[i] || j.RemainTries != 1 {
			t.Errorf("job %d: id %s body %q tries %d, want id %s body %q tries 1", i, j.ID, j.Body, j.RemainTries, ids[i], want[i])
		}
	}

	tooMany := make([]any, client.MaxBulk+1)
	for i := range tooMany {
		tooMany[i] = i
	}
	for name, jobs := range map[string][]any{
		"none":        nil,
		"65 jobs":     tooMany,
		"invalid raw": {json.RawMessage(`{`)},
		"unencodable": {func() {}},
	} {
		_, err := e.C.BatchPublish(ctx, "bulk", jobs)
		wantErr(t, "BatchPublish "+name, err, client.ErrBadRequest, 0)
	}
	// Exactly MaxBulk is fine.
	ids, err = e.C.BatchPublish(ctx, "bulk", tooMany[:client.MaxBulk])
	if err != nil || len(ids) != client.MaxBulk {
		t.Fatalf("BatchPublish of %d: %d ids, %v", client.MaxBulk, len(ids), err)
	}
	if n, err := e.C.QueueSize(ctx, "bulk"); err != nil || n != client.MaxBulk {
		t.Fatalf("QueueSize: %d, %v; want %d", n, err, client.MaxBulk)
	}
}

func TestConsumeFromQueuesAndBatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	low := publish(t, e.C, "low", "l")
	high := publish(t, e.C, "high", "h")
	job, err := e.C.ConsumeFromQueues(ctx, time.Minute, 0, "high", "low")
	if err != nil || job.ID != high || job.Queue != "high" {
		t.Fatalf("ConsumeFromQueues: %+v, %v; want the high-priority job %s", job, err, high)
	}
	job, err = e.C.ConsumeFromQueues(ctx, time.Minute, 0, "high", "low")
	if err != nil || job.ID != low || job.Queue != "low" {
		t.Fatalf("ConsumeFromQueues: %+v, %v; want %s from low", job, err, low)
	}
	_, err = e.C.ConsumeFromQueues(ctx, time.Minute, 0, "high", "low")
	wantErr(t, "ConsumeFromQueues of empty queues", err, client.ErrNoJob, http.StatusNotFound)

	for i := range 5 {
		publish(t, e.C, "b", strings.Repeat("x", i+1))
	}
	one, err := e.C.BatchConsume(ctx, []string{"a", "b"}, 1, time.Minute, 0)
	if err != nil || len(one) != 1 || string(one[0].Body) != "x" {
		t.Fatalf("BatchConsume count 1: %v, %v", one, err)
	}
	rest, err := e.C.BatchConsume(ctx, []string{"a", "b"}, 10, time.Minute, 0)
	if err != nil || len(rest) != 4 {
		t.Fatalf("BatchConsume count 10: %d jobs, %v; want 4", len(rest), err)
	}
	_, err = e.C.BatchConsume(ctx, []string{"b"}, 10, time.Minute, 0)
	wantErr(t, "BatchConsume of an empty queue", err, client.ErrNoJob, http.StatusNotFound)

	for _, tc := range []struct {
		name   string
		queues []string
		count  int
		ttr    time.Duration
	}{
		{"count 0", []string{"b"}, 0, time.Second},
		{"count 101", []string{"b"}, 101, time.Second},
		{"no queue", nil, 1, time.Second},
		{"empty queue name", []string{"b", ""}, 1, time.Second},
		{"comma in name", []string{"a,b"}, 1, time.Second},
		{"negative ttr", []string{"b"}, 1, -time.Second},
	} {
		_, err := e.C.BatchConsume(ctx, tc.queues, tc.count, tc.ttr, 0)
		wantErr(t, "BatchConsume "+tc.name, err, client.ErrBadRequest, 0)
	}
}

func TestConsumeLongPoll(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// The HTTP deadline exceeds the long-poll: a 300 ms request timeout
	// does not cut a 1 s poll short.
	c := e.client(t, client.WithToken(e.Token), client.WithTimeout(300*time.Millisecond))
	start := time.Now()
	_, err := c.Consume(ctx, "empty", time.Second, time.Second)
	wantErr(t, "Consume of an empty queue", err, client.ErrNoJob, http.StatusNotFound)
	if waited := time.Since(start); waited < 900*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("a 1 s long-poll returned after %v", waited)
	}

	// A publish wakes a waiting consumer.
	type result struct {
		job *client.Job
		err error
	}
	got := make(chan result, 1)
	go func() {
		j, err := c.Consume(ctx, "wake", time.Minute, 10*time.Second)
		got <- result{j, err}
	}()
	time.Sleep(100 * time.Millisecond)
	id := publish(t, e.C, "wake", "now")
	select {
	case r := <-got:
		if r.err != nil || r.job.ID != id {
			t.Fatalf("woken consume: %+v, %v", r.job, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting consume was not woken by a publish")
	}

	// Cancelling the context ends the wait at once.
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	_, err = c.Consume(cctx, "empty", time.Second, 30*time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Consume: %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("cancelled Consume returned after %v", waited)
	}
}

func TestPeekAndSizes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := e.C.PeekQueue(ctx, "q")
	wantErr(t, "PeekQueue of an empty queue", err, client.ErrNoJob, http.StatusNotFound)
	_, err = e.C.PeekJob(ctx, "q", "01J00000000000000000000000")
	wantErr(t, "PeekJob of an unknown job", err, client.ErrNotFound, http.StatusNotFound)
	_, err = e.C.PeekJob(ctx, "q", "")
	wantErr(t, "PeekJob without id", err, client.ErrBadRequest, 0)

	first := publish(t, e.C, "q", "one", client.Tries(4))
	publish(t, e.C, "q", "two")
	publish(t, e.C, "q", "later", client.Delay(time.Hour))
	job, err := e.C.PeekQueue(ctx, "q")
	if err != nil || job.ID != first || string(job.Body) != "one" || job.RemainTries != 4 {
		t.Fatalf("PeekQueue: %+v, %v", job, err)
	}
	job, err = e.C.PeekJob(ctx, "q", first)
	if err != nil || job.ID != first || job.Queue != "q" || job.Namespace != e.NS {
		t.Fatalf("PeekJob: %+v, %v", job, err)
	}
	// Size counts ready jobs only, and needs no token.
	anon := e.client(t)
	if n, err := anon.QueueSize(ctx, "q"); err != nil || n != 2 {
		t.Fatalf("QueueSize: %d, %v; want 2", n, err)
	}
	if err := e.C.DestroyQueue(ctx, "q"); err != nil {
		t.Fatalf("DestroyQueue: %v", err)
	}
	if n, err := anon.QueueSize(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("QueueSize after destroy: %d, %v", n, err)
	}
	if _, err := e.C.PeekJob(ctx, "q", first); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("PeekJob after destroy: %v", err)
	}
}

func TestDeadLetter(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, publish(t, e.C, "q", "dead"+string(rune('0'+i)), client.Tries(1)))
	}
	for range 3 {
		consume(t, e.C, "q", time.Second) // never ACKed
	}
	anon := e.client(t)
	eventually(t, 5*time.Second, "3 jobs in the dead letter", func() bool {
		n, err := anon.DeadLetterSize(ctx, "q")
		return err == nil && n == 3
	})
	size, head, err := e.C.PeekDeadLetter(ctx, "q")
	if err != nil || size != 3 || head != ids[0] {
		t.Fatalf("PeekDeadLetter: %d %q %v; want 3 %q", size, head, err, ids[0])
	}
	n, err := e.C.RespawnDeadLetter(ctx, "q", 2, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("RespawnDeadLetter: %d, %v; want 2", n, err)
	}
	job := consume(t, e.C, "q", time.Minute)
	if job.ID != ids[0] || job.RemainTries != 0 || job.TTL > time.Hour || job.TTL < time.Hour-10*time.Second {
		t.Fatalf("respawned job: %+v", job)
	}
	if err := e.C.DeleteDeadLetter(ctx, "q", 5); err != nil {
		t.Fatalf("DeleteDeadLetter: %v", err)
	}
	size, head, err = e.C.PeekDeadLetter(ctx, "q")
	if err != nil || size != 0 || head != "" {
		t.Fatalf("PeekDeadLetter after delete: %d %q %v", size, head, err)
	}
	_, err = e.C.RespawnDeadLetter(ctx, "q", 0, time.Hour)
	wantErr(t, "RespawnDeadLetter limit 0", err, client.ErrBadRequest, 0)
	err = e.C.DeleteDeadLetter(ctx, "q", -1)
	wantErr(t, "DeleteDeadLetter limit -1", err, client.ErrBadRequest, 0)
}

func TestAuthErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)

	noToken := e.client(t)
	_, err := noToken.Publish(ctx, "q", []byte("x"))
	wantErr(t, "Publish without token", err, client.ErrUnauthorized, http.StatusUnauthorized)
	var apiErr *client.APIError
	errors.As(err, &apiErr)
	if apiErr.Message != "token not found" || apiErr.Method != http.MethodPut || apiErr.Path != "/api/ns1/q" {
		t.Fatalf("APIError fields: %+v", apiErr)
	}
	if msg := err.Error(); !strings.Contains(msg, "401 token not found") || !strings.Contains(msg, apiErr.RequestID) {
		t.Fatalf("Error(): %q", msg)
	}

	bad := e.client(t, client.WithToken("not-a-token"))
	_, err = bad.Consume(ctx, "q", time.Second, 0)
	wantErr(t, "Consume with a bad token", err, client.ErrUnauthorized, http.StatusUnauthorized)

	noPool := e.client(t, client.WithToken("nopool:"+e.Token))
	_, err = noPool.PeekQueue(ctx, "q")
	wantErr(t, "PeekQueue in an unknown pool", err, client.ErrNotFound, http.StatusNotFound)

	scoped := e.client(t, client.WithToken(e.Srv.Token(t, e.NS, "queues=mine&roles=consume")))
	_, err = scoped.Publish(ctx, "mine", []byte("x"))
	wantErr(t, "Publish with a consume-only token", err, client.ErrForbidden, http.StatusForbidden)
	_, err = scoped.Consume(ctx, "other", time.Second, 0)
	wantErr(t, "Consume of another queue", err, client.ErrForbidden, http.StatusForbidden)
	_, err = scoped.Consume(ctx, "mine", time.Second, 0)
	wantErr(t, "Consume of its queue", err, client.ErrNoJob, http.StatusNotFound)
}

func TestRateLimited(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.Admin.AddLimit(ctx, e.NS, e.Token, client.Limit{Write: 1, Interval: time.Minute}); err != nil {
		t.Fatalf("AddLimit: %v", err)
	}
	// Limits reach the server within a second.
	eventually(t, 5*time.Second, "a 429", func() bool {
		_, err := e.C.Publish(ctx, "q", []byte("x"))
		return errors.Is(err, client.ErrRateLimited)
	})
	_, err := e.C.Publish(ctx, "q", []byte("x"))
	wantErr(t, "Publish over the limit", err, client.ErrRateLimited, http.StatusTooManyRequests)
	var apiErr *client.APIError
	if errors.As(err, &apiErr); !apiErr.Temporary() || !strings.Contains(apiErr.Message, "produce reach the limit rate") {
		t.Fatalf("429 error: %+v", apiErr)
	}
	// Reads are not limited.
	if _, err := e.C.QueueSize(ctx, "q"); err != nil {
		t.Fatalf("QueueSize: %v", err)
	}
}

func TestErrorsIs(t *testing.T) {
	sentinels := []error{client.ErrNoJob, client.ErrNotFound, client.ErrUnauthorized, client.ErrForbidden,
		client.ErrRateLimited, client.ErrBadRequest, client.ErrConflict, client.ErrServer}
	tests := []struct {
		status  int
		message string
		want    []error
	}{
		{404, "no job available", []error{client.ErrNoJob}},
		{404, "the queue is empty", []error{client.ErrNoJob}},
		{404, "job not found", []error{client.ErrNotFound}},
		{404, "pool not found", []error{client.ErrNotFound}},
		{401, "invalid token", []error{client.ErrUnauthorized}},
		{403, "token is not allowed to publish queue q", []error{client.ErrForbidden}},
		{429, "token(x) consume reach the limit rate, please retry later", []error{client.ErrRateLimited}},
		{400, "invalid ttr", []error{client.ErrBadRequest}},
		{413, "body too large", []error{client.ErrBadRequest}},
		{409, "throttler token(x) has already exists", []error{client.ErrConflict}},
		{500, "internal error", []error{client.ErrServer}},
		{503, "server is shutting down", []error{client.ErrServer}},
	}
	for _, tc := range tests {
		err := error(&client.APIError{Status: tc.status, Message: tc.message})
		for _, s := range sentinels {
			if got, want := errors.Is(err, s), slices.Contains(tc.want, s); got != want {
				t.Errorf("%d %q: errors.Is(%v) = %v, want %v", tc.status, tc.message, s, got, want)
			}
		}
	}
}
