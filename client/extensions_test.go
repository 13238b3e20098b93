package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

func TestMillisecondParams(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// 1.1 s: exact with milliseconds, 2 s if rounded up to seconds; the
	// bounds leave room for a loaded machine.
	const d, roundedUp = 1100 * time.Millisecond, 1800 * time.Millisecond

	start := time.Now()
	id := publish(t, e.C, "ms", "soon", client.Delay(d))
	job, err := e.C.Consume(ctx, "ms", 30*time.Second, 5*time.Second)
	if took := time.Since(start); err != nil || job.ID != id || took < d-50*time.Millisecond || took > roundedUp {
		t.Fatalf("Delay(1.1s): %v after %v", err, took)
	}

	// TTR 1.1 s: delivered again after 1.1 s, not 2 s.
	publish(t, e.C, "ttr", "x", client.Tries(2))
	start = time.Now()
	first := consume(t, e.C, "ttr", d)
	again, err := e.C.Consume(ctx, "ttr", time.Minute, 5*time.Second)
	if took := time.Since(start); err != nil || again.ID != first.ID || took < d-50*time.Millisecond || took > roundedUp {
		t.Fatalf("TTR 1.1s: %v, redelivered after %v", err, took)
	}

	// A 1.1 s long-poll.
	start = time.Now()
	_, err = e.C.Consume(ctx, "empty", time.Second, d)
	if took := time.Since(start); !errors.Is(err, client.ErrNoJob) || took < d-50*time.Millisecond || took > roundedUp {
		t.Fatalf("timeout 1.1s: %v after %v", err, took)
	}

	// TTL 300 ms.
	id = publish(t, e.C, "ttl", "short", client.TTL(300*time.Millisecond))
	eventually(t, 3*time.Second, "the job expired", func() bool {
		_, err := e.C.PeekJob(ctx, "ttl", id)
		return errors.Is(err, client.ErrNotFound)
	})

	// DueAt.
	due := time.Now().Add(400 * time.Millisecond)
	id = publish(t, e.C, "due", "at", client.DueAt(due))
	peeked, err := e.C.PeekJob(ctx, "due", id)
	if err != nil || peeked.State != "delayed" || peeked.DueAt.Before(due.Add(-5*time.Millisecond)) || peeked.DueAt.After(due.Add(100*time.Millisecond)) {
		t.Fatalf("PeekJob of a DueAt job: %+v, %v; want delayed until %v", peeked, err, due)
	}
	job, err = e.C.Consume(ctx, "due", time.Minute, 3*time.Second)
	if err != nil || job.ID != id || time.Now().Before(due) {
		t.Fatalf("DueAt job: %v, consumed at %v, due %v", err, time.Now(), due)
	}
	_, err = e.C.Publish(ctx, "due", []byte("x"), client.DueAt(due), client.Delay(time.Second))
	wantErr(t, "DueAt with Delay", err, client.ErrBadRequest, 0)
}

// TestDueAtExact: a job published with DueAt is due at exactly that
// instant, rounded up to the millisecond (never before it), for Publish and
// BatchPublish.
func TestDueAtExact(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ms := time.Now().Add(time.Hour).UnixMilli()
	for _, tc := range []struct {
		name string
		due  time.Time
		want time.Time
	}{
		{"whole ms", time.UnixMilli(ms), time.UnixMilli(ms)},
		{"a fraction of a ms", time.UnixMilli(ms).Add(400 * time.Microsecond), time.UnixMilli(ms + 1)},
	} {
		id := publish(t, e.C, "due", "at", client.DueAt(tc.due))
		ids, err := e.C.BatchPublish(ctx, "due", []any{"a", "b"}, client.DueAt(tc.due))
		if err != nil {
			t.Fatalf("%s: BatchPublish: %v", tc.name, err)
		}
		for _, id := range append(ids, id) {
			j, err := e.C.PeekJob(ctx, "due", id)
			if err != nil || !j.DueAt.Equal(tc.want) {
				t.Errorf("%s: job %s due at %v (%v), want %v", tc.name, id, j.DueAt, err, tc.want)
			}
		}
	}
}

func TestReceiptsReleaseTouch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id := publish(t, e.C, "q", "work", client.Tries(3))
	d1 := consume(t, e.C, "q", time.Minute)
	if len(d1.Receipt) != 16 || d1.RemainTries != 2 {
		t.Fatalf("consumed job: %+v, want a 16-hex-digit receipt", d1)
	}
	if err := e.C.Release(ctx, d1, client.KeepTry()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	d2 := consume(t, e.C, "q", time.Minute)
	if d2.ID != id || d2.RemainTries != 2 || d2.Receipt == d1.Receipt {
		t.Fatalf("after a KeepTry release: %+v", d2)
	}
	// The first delivery is stale.
	wantErr(t, "Release of a stale delivery", e.C.Release(ctx, d1), client.ErrStaleReceipt, http.StatusConflict)
	wantErr(t, "AckJob of a stale delivery", e.C.AckJob(ctx, d1), client.ErrStaleReceipt, http.StatusConflict)
	_, err := e.C.Touch(ctx, d1, time.Minute)
	wantErr(t, "Touch of a stale delivery", err, client.ErrStaleReceipt, http.StatusConflict)

	// Touch restarts the TTR.
	due, err := e.C.Touch(ctx, d2, 90*time.Second)
	if err != nil || due.Before(time.Now().Add(85*time.Second)) || due.After(time.Now().Add(95*time.Second)) {
		t.Fatalf("Touch: %v, %v", due, err)
	}
	if p, err := e.C.PeekJob(ctx, "q", id); err != nil || p.State != "in_flight" || !p.DueAt.Equal(due) || p.Deliveries != 2 {
		t.Fatalf("PeekJob after Touch: %+v, %v", p, err)
	}

	// A delayed release spends the try.
	if err := e.C.Release(ctx, d2, client.ReleaseDelay(300*time.Millisecond)); err != nil {
		t.Fatalf("Release with delay: %v", err)
	}
	start := time.Now()
	d3, err := e.C.Consume(ctx, "q", time.Minute, 3*time.Second)
	if took := time.Since(start); err != nil || d3.RemainTries != 1 || took < 250*time.Millisecond {
		t.Fatalf("after ReleaseDelay(300ms): %+v, %v after %v", d3, err, took)
	}
	if err := e.C.AckJob(ctx, d3); err != nil {
		t.Fatalf("AckJob: %v", err)
	}
	if err := e.C.AckJob(ctx, d3); err != nil {
		t.Fatalf("AckJob of a gone job: %v, want nil", err)
	}
	wantErr(t, "Release of a gone job", e.C.Release(ctx, d3), client.ErrNotFound, http.StatusNotFound)

	for name, j := range map[string]*client.Job{
		"nil job":    nil,
		"no receipt": {ID: id, Queue: "q"},
		"no queue":   {ID: id, Receipt: d3.Receipt},
	} {
		wantErr(t, "Release of "+name, e.C.Release(ctx, j), client.ErrBadRequest, 0)
		_, err := e.C.Touch(ctx, j, time.Second)
		wantErr(t, "Touch of "+name, err, client.ErrBadRequest, 0)
	}
	// Without a receipt AckJob is a plain ACK.
	id = publish(t, e.C, "q", "plain")
	if err := e.C.AckJob(ctx, &client.Job{ID: id, Queue: "q"}); err != nil {
		t.Fatalf("AckJob without receipt: %v", err)
	}
	if _, err := e.C.PeekJob(ctx, "q", id); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("PeekJob after AckJob: %v", err)
	}
}

func TestPriorityAndJobKeys(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	publish(t, e.C, "p", "low")
	publish(t, e.C, "p", "mid", client.Priority(5))
	publish(t, e.C, "p", "high", client.Priority(9))
	if p, err := e.C.PeekQueue(ctx, "p"); err != nil || string(p.Body) != "high" || p.Priority != 9 || p.State != "ready" {
		t.Fatalf("PeekQueue: %+v, %v", p, err)
	}
	jobs, err := e.C.BatchConsume(ctx, []string{"p"}, 3, time.Minute, 0)
	if err != nil || len(jobs) != 3 || string(jobs[0].Body) != "high" || string(jobs[1].Body) != "mid" || string(jobs[2].Body) != "low" {
		t.Fatalf("BatchConsume by priority: %v", err)
	}
	_, err = e.C.Publish(ctx, "p", []byte("x"), client.Priority(256))
	wantErr(t, "Priority(256)", err, client.ErrBadRequest, 0)

	first := publish(t, e.C, "k", "once", client.JobKey("order/42"))
	again := publish(t, e.C, "k", "twice", client.JobKey("order/42"))
	if again != first {
		t.Fatalf("a duplicate job key published %s, want the first job %s", again, first)
	}
	if n, _ := e.C.QueueSize(ctx, "k"); n != 1 {
		t.Fatalf("QueueSize: %d, want 1", n)
	}
	if id, err := e.C.CancelJobKey(ctx, "k", "order/42"); err != nil || id != first {
		t.Fatalf("CancelJobKey: %q, %v", id, err)
	}
	_, err = e.C.CancelJobKey(ctx, "k", "order/42")
	wantErr(t, "CancelJobKey twice", err, client.ErrNotFound, http.StatusNotFound)
	if third := publish(t, e.C, "k", "again", client.JobKey("order/42")); third == first {
		t.Fatal("a cancelled key still answers the old job")
	}
	_, err = e.C.BatchPublish(ctx, "k", []any{1}, client.JobKey("x"))
	wantErr(t, "BatchPublish with a job key", err, client.ErrBadRequest, 0)
	_, err = e.C.Publish(ctx, "k", []byte("x"), client.JobKey(strings.Repeat("k", client.MaxJobKey+1)))
	wantErr(t, "a too long job key", err, client.ErrBadRequest, 0)
	_, err = e.C.CancelJobKey(ctx, "k", "")
	wantErr(t, "CancelJobKey without key", err, client.ErrBadRequest, 0)
}

func TestPauseResume(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.C.PauseQueue(ctx, "q"); err != nil {
		t.Fatalf("PauseQueue: %v", err)
	}
	id := publish(t, e.C, "q", "waits")
	_, err := e.C.Consume(ctx, "q", time.Minute, 0)
	wantErr(t, "Consume of a paused queue", err, client.ErrNoJob, http.StatusNotFound)
	cfg, err := e.Admin.QueueConfig(ctx, "", e.NS, "q")
	if err != nil || !cfg.Paused {
		t.Fatalf("QueueConfig of a paused queue: %+v, %v", cfg, err)
	}
	if err := e.C.ResumeQueue(ctx, "q"); err != nil {
		t.Fatalf("ResumeQueue: %v", err)
	}
	if job, err := e.C.Consume(ctx, "q", time.Minute, 2*time.Second); err != nil || job.ID != id {
		t.Fatalf("Consume after resume: %v", err)
	}
}

func TestDeadLetterBrowsing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var ids []string
	for _, b := range []string{"a", "b", "c", "d"} {
		ids = append(ids, publish(t, e.C, "q", b))
	}
	jobs, err := e.C.BatchConsume(ctx, []string{"q"}, 4, time.Minute, 0)
	if err != nil || len(jobs) != 4 {
		t.Fatalf("BatchConsume: %v", err)
	}
	for _, j := range jobs {
		if err := e.C.Release(ctx, j); err != nil { // out of tries: dead at once
			t.Fatalf("Release: %v", err)
		}
	}
	page, next, err := e.C.ListDeadLetter(ctx, "q", 0, 3)
	if err != nil || len(page) != 3 || next != 3 {
		t.Fatalf("ListDeadLetter page 1: %d jobs, next %d, %v", len(page), next, err)
	}
	if j := page[0]; j.ID != ids[0] || string(j.Body) != "a" || j.State != "dead" || j.DeadReason == "" || j.DeadAt.IsZero() {
		t.Fatalf("dead job: %+v", j)
	}
	page, next, err = e.C.ListDeadLetter(ctx, "q", 3, 3)
	if err != nil || len(page) != 1 || next != -1 || page[0].ID != ids[3] {
		t.Fatalf("ListDeadLetter page 2: %v, next %d, %v", page, next, err)
	}
	_, _, err = e.C.ListDeadLetter(ctx, "q", 0, 101)
	wantErr(t, "ListDeadLetter limit 101", err, client.ErrBadRequest, 0)
	p, err := e.C.ListDeadLetterPage(ctx, "q", client.DeadLetterQuery{Limit: 3, Newest: true, Reason: client.ReasonNacked})
	if err != nil || len(p.Jobs) != 3 || p.NextOffset != 3 || p.Total != 4 || p.Jobs[0].ID != ids[3] || p.Jobs[2].ID != ids[1] {
		t.Fatalf("ListDeadLetterPage newest: %+v, %v", p, err)
	}
	if p, err = e.C.ListDeadLetterPage(ctx, "q", client.DeadLetterQuery{Offset: 3, Newest: true}); err != nil || len(p.Jobs) != 1 || p.NextOffset != -1 || p.Jobs[0].ID != ids[0] {
		t.Fatalf("ListDeadLetterPage newest, last page: %+v, %v", p, err)
	}
	if p, err = e.C.ListDeadLetterPage(ctx, "q", client.DeadLetterQuery{Reason: client.ReasonTTRExpired}); err != nil || len(p.Jobs) != 0 || p.NextOffset != -1 || p.Total != 4 {
		t.Fatalf("ListDeadLetterPage ttr_expired: %+v, %v", p, err)
	}
	_, err = e.C.ListDeadLetterPage(ctx, "q", client.DeadLetterQuery{Reason: "bored"})
	wantErr(t, "ListDeadLetterPage reason bored", err, client.ErrBadRequest, http.StatusBadRequest)

	if err := e.C.RespawnDeadJob(ctx, "q", ids[1], time.Hour); err != nil {
		t.Fatalf("RespawnDeadJob: %v", err)
	}
	if j, err := e.C.PeekQueue(ctx, "q"); err != nil || j.ID != ids[1] {
		t.Fatalf("after RespawnDeadJob: %+v, %v", j, err)
	}
	if err := e.C.DeleteDeadJob(ctx, "q", ids[2]); err != nil {
		t.Fatalf("DeleteDeadJob: %v", err)
	}
	wantErr(t, "DeleteDeadJob of a job not dead", e.C.DeleteDeadJob(ctx, "q", ids[1]), client.ErrNotFound, http.StatusNotFound)
	wantErr(t, "RespawnDeadJob of a job not dead", e.C.RespawnDeadJob(ctx, "q", ids[2], 0), client.ErrNotFound, http.StatusNotFound)
	if n, err := e.C.RespawnDeadLetter(ctx, "q", client.AllDead, 0); err != nil || n != 2 {
		t.Fatalf("RespawnDeadLetter(AllDead): %d, %v; want 2", n, err)
	}
	if n, _ := e.C.DeadLetterSize(ctx, "q"); n != 0 {
		t.Fatalf("DeadLetterSize: %d", n)
	}
}

func TestAdminQueueConfigAndWebhooks(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg, err := e.Admin.QueueConfig(ctx, "", e.NS, "q")
	if err != nil || !reflect.DeepEqual(cfg, client.QueueConfig{Backoff: "none", Shards: 1}) {
		t.Fatalf("QueueConfig: %+v, %v", cfg, err)
	}
	ladder, ttl := "400ms,800ms", time.Hour
	cfg, err = e.Admin.SetQueueConfig(ctx, "", e.NS, "q", client.QueueConfigPatch{Backoff: &ladder, DeadTTL: &ttl})
	if err != nil || !reflect.DeepEqual(cfg, client.QueueConfig{Backoff: ladder, DeadTTL: time.Hour, Shards: 1}) {
		t.Fatalf("SetQueueConfig: %+v, %v", cfg, err)
	}
	paused := true
	if cfg, err = e.Admin.SetQueueConfig(ctx, "", e.NS, "q", client.QueueConfigPatch{Paused: &paused}); err != nil || !cfg.Paused || cfg.Backoff != ladder {
		t.Fatalf("SetQueueConfig paused: %+v, %v", cfg, err)
	}
	shards := 4
	if cfg, err = e.Admin.SetQueueConfig(ctx, "", e.NS, "q", client.QueueConfigPatch{Shards: &shards}); err != nil || cfg.Shards != 4 || !cfg.Paused || cfg.Backoff != ladder {
		t.Fatalf("SetQueueConfig shards: %+v, %v", cfg, err)
	}
	if cfg, err = e.Admin.QueueConfig(ctx, "", e.NS, "q"); err != nil || cfg.Shards != 4 {
		t.Fatalf("QueueConfig after shards 4: %+v, %v", cfg, err)
	}
	shards = 65
	_, err = e.Admin.SetQueueConfig(ctx, "", e.NS, "q", client.QueueConfigPatch{Shards: &shards})
	wantErr(t, "SetQueueConfig with 65 shards", err, client.ErrBadRequest, 0)
	bad := "sometimes"
	_, err = e.Admin.SetQueueConfig(ctx, "", e.NS, "q", client.QueueConfigPatch{Backoff: &bad})
	wantErr(t, "SetQueueConfig with a bad backoff", err, client.ErrBadRequest, http.StatusBadRequest)
	_, err = e.Admin.QueueConfig(ctx, "nope", e.NS, "q")
	wantErr(t, "QueueConfig of an unknown pool", err, client.ErrBadRequest, http.StatusBadRequest)

	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(hook.Close)
	w, err := e.Admin.SetWebhook(ctx, client.Webhook{
		Namespace: e.NS, Queue: "hooked", URL: hook.URL, Secret: "s3cret", Concurrency: 2,
		TTR: 30 * time.Second, Timeout: 5 * time.Second,
	})
	if err != nil || w.URL != hook.URL || w.Secret != "REDACTED" || w.Concurrency != 2 || w.TTR != 30*time.Second || w.Pool != "default" {
		t.Fatalf("SetWebhook: %+v, %v", w, err)
	}
	if got, err := e.Admin.GetWebhook(ctx, "", e.NS, "hooked"); err != nil || got != w {
		t.Fatalf("GetWebhook: %+v, %v; want %+v", got, err, w)
	}
	if all, err := e.Admin.Webhooks(ctx); err != nil || len(all) != 1 || all[0] != w {
		t.Fatalf("Webhooks: %+v, %v", all, err)
	}
	// Zero fields take the server's defaults; a TTR under a whole ms is
	// rounded up, not cut to an invalid one.
	if w, err := e.Admin.SetWebhook(ctx, client.Webhook{Namespace: e.NS, Queue: "defaults", URL: hook.URL, Secret: "s"}); err != nil ||
		w.Concurrency != 1 || w.TTR != 30*time.Second || w.Timeout != 10*time.Second {
		t.Fatalf("SetWebhook with zero settings: %+v, %v; want the defaults", w, err)
	}
	if w, err := e.Admin.SetWebhook(ctx, client.Webhook{Namespace: e.NS, Queue: "defaults", URL: hook.URL, Secret: "s", TTR: 1500 * time.Microsecond}); err != nil ||
		w.TTR != 2*time.Millisecond || w.Timeout != time.Millisecond {
		t.Fatalf("SetWebhook with a TTR of 1.5 ms: %+v, %v; want 2 ms and a 1 ms timeout", w, err)
	}
	if err := e.Admin.DeleteWebhook(ctx, "", e.NS, "defaults"); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	if err := e.Admin.DeleteWebhook(ctx, "", e.NS, "hooked"); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	_, err = e.Admin.GetWebhook(ctx, "", e.NS, "hooked")
	wantErr(t, "GetWebhook after delete", err, client.ErrNotFound, http.StatusNotFound)
	wantErr(t, "DeleteWebhook twice", e.Admin.DeleteWebhook(ctx, "", e.NS, "hooked"), client.ErrNotFound, http.StatusNotFound)
}
