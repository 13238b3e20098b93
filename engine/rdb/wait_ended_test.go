package rdb

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestWaitEndedByError: a WAIT that Redis ends with an error reply after
// the publish script ran (UNBLOCKED: CLIENT UNBLOCK … ERROR, or the master
// demoted to a replica mid-WAIT, as in a failover) makes the publish fail
// with ErrNotReplicated and the IDs of its jobs, which the server answers
// 503 "the job may exist" with the IDs; it answered 500 before. The pool
// has no replica, so every WAIT blocks for its whole timeout (a minute)
// unless something ends it.
func TestWaitEndedByError(t *testing.T) {
	const timeout = time.Minute
	// ended runs publish, waits until its WAIT blocks, ends it with end
	// (waits times in all: a keyed retry waits twice), and returns what
	// publish returned.
	ended := func(t *testing.T, admin *redis.Client, waits int, end func(clientID string), publish func() ([]string, error)) ([]string, error) {
		t.Helper()
		type result struct {
			ids []string
			err error
		}
		done := make(chan result, 1)
		go func() {
			ids, err := publish()
			done <- result{ids, err}
		}()
		var start time.Time
		for range waits {
			id := blockedInWait(t, admin, done)
			start = time.Now()
			end(id)
		}
		select {
		case r := <-done:
			if d := time.Since(start); d > timeout/2 {
				t.Fatalf("publish returned %v after its WAIT was ended: the WAIT timed out instead", d)
			}
			return r.ids, r.err
		case <-time.After(timeout / 2):
			t.Fatalf("publish did not return within %v of its WAIT being ended", timeout/2)
		}
		return nil, nil
	}
	wantMayExistBy := func(t *testing.T, what, cause string, ids []string, err error) {
		t.Helper()
		if !errors.Is(err, engine.ErrNotReplicated) || len(ids) == 0 || slicesHasEmpty(ids) {
			t.Fatalf("%s: ids %q, err %v; want the jobs' IDs and ErrNotReplicated", what, ids, err)
		}
		if !strings.Contains(err.Error(), cause) {
			t.Errorf("%s: %v does not name what ended the WAIT (%s)", what, err, cause)
		}
	}
	wantMayExist := func(t *testing.T, what string, ids []string, err error) {
		t.Helper()
		wantMayExistBy(t, what, "UNBLOCKED", ids, err)
	}

	t.Run("client unblock error", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := srv.Client()
		e, err := New(bg, waitClient(t, srv), Options{WaitReplicas: 1, WaitTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		unblock := func(id string) {
			if n, err := admin.Do(bg, "CLIENT", "UNBLOCK", id, "ERROR").Int(); err != nil || n != 1 {
				t.Fatalf("CLIENT UNBLOCK %s ERROR = %d, %v", id, n, err)
			}
		}
		keyed := &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Key: "k"}
		ids, err := ended(t, admin, 1, unblock, func() ([]string, error) {
			id, err := e.Publish(bg, keyed)
			return []string{id}, err
		})
		wantMayExist(t, "publish", ids, err)
		first := ids[0]
		if n, err := admin.Exists(bg, jobKey("ns", "q", first)).Result(); err != nil || n != 1 {
			t.Fatalf("job %s not on the master after an ended WAIT: %d, %v", first, n, err)
		}
		// The retry with the key finds the job and waits again
		// (confirmReplicated): ended the same way, the same answer.
		ids, err = ended(t, admin, 2, unblock, func() ([]string, error) {
			id, err := e.Publish(bg, keyed)
			return []string{id}, err
		})
		wantMayExist(t, "keyed retry", ids, err)
		if ids[0] != first {
			t.Fatalf("keyed retry named %s, want the first job %s", ids[0], first)
		}
		// The event loops' batched publishes (publishManyScript).
		reqs := []*engine.PublishRequest{{Namespace: "ns", Queue: "q", Tries: 1}, {Namespace: "ns", Queue: "r", Tries: 1}}
		ids, err = ended(t, admin, 1, unblock, func() ([]string, error) {
			ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
			e.PublishEach(bg, reqs, ids, errs)
			return ids, errors.Join(errs...)
		})
		wantMayExist(t, "PublishEach", ids, err)
	})

	t.Run("master demoted", func(t *testing.T) {
		srv := redistest.Start(t)
		other := redistest.Start(t)
		admin := srv.Client()
		e, err := New(bg, waitClient(t, srv), Options{WaitReplicas: 1, WaitTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		demote := func(string) {
			if err := admin.Do(bg, "REPLICAOF", "127.0.0.1", fmt.Sprint(other.Port)).Err(); err != nil {
				t.Fatalf("REPLICAOF: %v", err)
			}
		}
		ids, err := ended(t, admin, 1, demote, func() ([]string, error) {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
			return []string{id}, err
		})
		wantMayExist(t, "publish", ids, err)
	})
}

// TestWaitConnectionKilled: a connection closed while its WAIT blocks
// (CLIENT KILL; a demoted or dying master closes them too) after the
// script ran is a lost reply: the publish's jobs may exist, and the
// publish says so with their IDs. The client does not retry by itself
// here (MaxRetries -1), as go-redis's own retries may end the same way.
func TestWaitConnectionKilled(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	e, err := New(bg, c, Options{WaitReplicas: 1, WaitTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		publish func() ([]string, error)
	}{
		{"publish", func() ([]string, error) {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
			return []string{id}, err
		}},
		{"PublishEach", func() ([]string, error) {
			reqs := []*engine.PublishRequest{{Namespace: "ns", Queue: "q", Tries: 1}, {Namespace: "ns", Queue: "r", Tries: 1}}
			ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
			e.PublishEach(bg, reqs, ids, errs)
			return ids, errors.Join(errs...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				ids []string
				err error
			}
			done := make(chan result, 1)
			go func() {
				ids, err := tc.publish()
				done <- result{ids, err}
			}()
			id := blockedInWait(t, admin, done)
			if err := admin.Do(bg, "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatalf("CLIENT KILL ID %s: %v", id, err)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("publish did not return within 30s of its connection being killed")
			}
			if !errors.Is(r.err, engine.ErrNotReplicated) || slicesHasEmpty(r.ids) {
				t.Fatalf("ids %q, err %v; want the jobs' IDs and ErrNotReplicated", r.ids, r.err)
			}
			for _, id := range r.ids {
				found := false
				for _, q := range []string{"q", "r"} {
					n, _ := admin.Exists(bg, jobKey("ns", q, id)).Result()
					found = found || n == 1
				}
				if !found {
					t.Errorf("job %s named as may exist is not on the master", id)
				}
			}
		})
	}
}

// waitClient is a client of srv whose reads outlast the test's WAIT
// timeout (go-redis's default is 3 s, after which it would end the WAIT
// itself, and send it again).
func waitClient(t *testing.T, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func slicesHasEmpty(ids []string) bool {
	for _, id := range ids {
		if id == "" {
			return true
		}
	}
	return false
}

var clientIDField = regexp.MustCompile(`(?:^| )id=(\d+) `)

// blockedInWait waits until a client of admin's Redis is blocked in WAIT
// and returns its ID (CLIENT LIST), failing t if done delivers first (the
// publish returned without blocking) or after 20 s.
func blockedInWait[T any](t *testing.T, admin *redis.Client, done chan T) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := admin.ClientList(bg).Result()
		if err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " cmd=wait ") && strings.Contains(line, " flags=b") {
				if m := clientIDField.FindStringSubmatch(line); m != nil {
					return m[1]
				}
			}
		}
		select {
		case r := <-done:
			t.Fatalf("the publish returned %+v before its WAIT blocked", r)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no client blocked in WAIT within 20s: %s", list)
		}
	}
}
