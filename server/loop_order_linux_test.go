//go:build linux

package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// Regression tests for answers and requests of one connection getting out
// of step on the event loops (issue #21); TestLoopDifferential finds them
// all among random sequences.

// fastGet is a consume of the fast subset.
func fastGet(q string, timeout int) string {
	return fmt.Sprintf("GET /api/ns/%s?timeout=%d HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", q, timeout, goodToken)
}

// fastAck is an ACK of the fast subset.
func fastAck(q, id string) string {
	return fmt.Sprintf("DELETE /api/ns/%s/job/%s HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", q, id, goodToken)
}

// readyJobs makes fake's consumes of queue q return one job each.
func readyJobs(fake *eachFake) {
	n := 0
	fake.consume = func(_ context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		n++
		return []*engine.Job{{Namespace: r.Namespace, Queue: r.Queues[0], ID: fmt.Sprintf("ready-%d", n), Body: []byte("x"), TTL: time.Minute}}, nil
	}
	fake.del = func(context.Context, string, string, string) error { return nil }
}

// TestLoopPipelinedBehindConsume: requests that come in one write behind a
// consume answered at once are answered (they used to wait for the
// client's next bytes, forever), also when the client then sends EOF.
func TestLoopPipelinedBehindConsume(t *testing.T) {
	_, fake, addr := serveLoops(t)
	readyJobs(fake)
	for _, eof := range []bool{false, true} {
		t.Run(fmt.Sprintf("eof=%v", eof), func(t *testing.T) {
			conn := dialLoop(t, addr, 5*time.Second)
			br := bufio.NewReader(conn)
			_, _ = io.WriteString(conn, fastGet("q", 0)+fastPut("behind")+fastGet("q", 0)+fastAck("q", "ready1"))
			if eof {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			a := readAnswers(t, br, 4)
			if a[0].status != 200 || a[1].status != 201 || a[2].status != 200 || a[3].status != 204 {
				t.Fatalf("answers: %+v", a)
			}
			if eof {
				if _, err := br.ReadByte(); err != io.EOF {
					t.Errorf("after the answers: %v, want EOF", err)
				}
			}
		})
	}
}

// TestLoopPipelinedThroughput: wrk's pipelining script (a consume, a
// publish and an ACK per write, each write when the last answers are in)
// gets every answer at once.
func TestLoopPipelinedThroughput(t *testing.T) {
	_, fake, addr := serveLoops(t)
	readyJobs(fake)
	conn := dialLoop(t, addr, 20*time.Second)
	br := bufio.NewReader(conn)
	start := time.Now()
	const rounds = 500
	for i := range rounds {
		_, _ = io.WriteString(conn, fastGet("q", 0)+fastPut("x")+fastAck("q", "ready1"))
		a := readAnswers(t, br, 3)
		if a[0].status != 200 || a[1].status != 201 || a[2].status != 204 {
			t.Fatalf("round %d: %+v", i, a)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%d pipelined rounds took %v", rounds, d)
	}
}

// TestLoopConsumesInOrder: two consumes of one connection never share a
// batch, so the one that waits is answered before the one behind it that
// finds a job at once (the answers used to swap: each got the other's).
func TestLoopConsumesInOrder(t *testing.T) {
	srv := startDiffServer(t, "loops", 1)
	ctx := context.Background()
	pub := func(q, body string) string {
		t.Helper()
		id, err := srv.eng.Publish(ctx, &engine.PublishRequest{Namespace: "ns", Queue: q, Body: []byte(body), Tries: 1})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ready := pub("ready", "ready-job")
	conn := dialLoop(t, srv.addr, 10*time.Second)
	br := bufio.NewReader(conn)
	// The first consume waits; the loop holds the two behind it.
	_, _ = io.WriteString(conn, fastGet("first", 3)+fastGet("empty", 1)+fastGet("ready", 0))
	time.Sleep(200 * time.Millisecond)
	// More bytes while it waits: when it is answered, the loop reads them
	// in the same pass as it parses what it held.
	_, _ = io.WriteString(conn, fastPut("later"))
	time.Sleep(100 * time.Millisecond)
	first := pub("first", "first-job")
	a := readAnswers(t, br, 4)
	if a[0].status != 200 || jobIDOf(a[0].body) != first {
		t.Errorf("answer 1 (waits for a job): %d %s", a[0].status, a[0].body)
	}
	if a[1].status != 404 || a[1].body != `{"msg":"no job available"}` {
		t.Errorf("answer 2 (waits for nothing): %d %s", a[1].status, a[1].body)
	}
	if a[2].status != 200 || jobIDOf(a[2].body) != ready {
		t.Errorf("answer 3 (a job ready): %d %s", a[2].status, a[2].body)
	}
	if a[3].status != 201 {
		t.Errorf("answer 4 (publish): %d %s", a[3].status, a[3].body)
	}
}

// TestLoopAckThenConsume: a consume sees what the ACKs before it on its
// connection did, in the same pass, although the pass sends its ACKs and
// its consumes to Redis together (engine.Pipeliner) and the ACKs of two
// queues take two calls (the consume used to run between them and get the
// job just ACKed).
func TestLoopAckThenConsume(t *testing.T) {
	srv := startDiffServer(t, "loops", 1)
	conn := dialLoop(t, srv.addr, 10*time.Second)
	br := bufio.NewReader(conn)
	for i := range 20 {
		id, err := srv.eng.Publish(context.Background(), &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, fastAck("other", bogusJobID)+fastAck("q", id)+fastGet("q", 0))
		a := readAnswers(t, br, 3)
		if a[0].status != 204 || a[1].status != 204 || a[2].status != 404 {
			t.Fatalf("round %d: ACK, ACK, consume after the ACK: %d, %d, %d %s", i, a[0].status, a[1].status, a[2].status, a[2].body)
		}
	}
}

// TestLoopEOFMidRequest: a client that sends EOF in the middle of a request
// is treated as net/http treats it: a 400 for a request begun, silence for
// fewer than 4 bytes after an answered request.
func TestLoopEOFMidRequest(t *testing.T) {
	_, fake, addr := serveLoops(t)
	readyJobs(fake)
	for _, tc := range []struct {
		name, send string
		want       []int
	}{
		{"part of a first request", fastPut("body")[:30], []int{400}},
		{"part of a head", fastPut("a") + fastPut("body")[:30], []int{201, 400}},
		{"part of a body", fastPut("a") + strings.TrimSuffix(fastPut("body"), "dy"), []int{201, 400}},
		{"3 bytes", fastPut("a") + "PUT", []int{201}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialLoop(t, addr, 5*time.Second)
			br := bufio.NewReader(conn)
			_, _ = io.WriteString(conn, tc.send)
			_ = conn.(*net.TCPConn).CloseWrite()
			a := readAnswers(t, br, len(tc.want))
			for i, w := range tc.want {
				if a[i].status != w {
					t.Errorf("answer %d: %d %s, want %d", i, a[i].status, a[i].body, w)
				}
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the answers: %v, want EOF", err)
			}
		})
	}
}

// diffServer is a server on its own miniredis, with the Redis engine
// (whose passes pipeline, engine.Pipeliner) and fake tokens; loops < 0
// turns the event loops off. TestLoopDifferential compares two.
type diffServer struct {
	name string
	eng  *rdb.Engine
	addr string
	env  *testEnv
}

func startDiffServer(t *testing.T, name string, loops int) *diffServer {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := rdb.New(ctx, client, rdb.Options{})
	if err != nil {
		cancel()
		t.Fatalf("rdb.New: %v", err)
	}
	engDone := make(chan struct{})
	go func() { defer close(engDone); _ = eng.Run(ctx) }()
	env := newEnv(t, withoutThrottler(), func(c *config.Config, d *Deps) {
		c.Kairos.EventLoops = loops
		d.Engines["default"] = eng
	})
	if err := env.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- env.srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Serve: %v", name, err)
		}
		<-engDone
	})
	if loops > 0 {
		waitLoops(t, env.srv)
	}
	return &diffServer{name: name, eng: eng, addr: env.srv.Addr(), env: env}
}

// bogusJobID is a well-formed job ID no server has.
var bogusJobID = engine.NewJobID(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 0, false)

// deafWatcher is an eachFake whose watches never fire, as a watch whose
// subscription Redis has not confirmed yet.
type deafWatcher struct{ *eachFake }

func (deafWatcher) Watch(string, []string, func()) (func(), bool, bool) {
	return func() {}, false, true
}

// TestLoopLastLookAtDeadline: a parked consume whose watch never fired
// looks once more at its deadline, as the goroutine wait (engine.Consume)
// does when it could not be sure to hear of a job, and gets the job
// published meanwhile instead of "no job" (seen by TestLoopDifferential
// on a loaded machine: 1 sequence in 12,000).
func TestLoopLastLookAtDeadline(t *testing.T) {
	fake := &eachFake{fakeEngine: &fakeEngine{}}
	var published atomic.Bool
	fake.consume = func(_ context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		if !published.Load() {
			return nil, nil
		}
		return []*engine.Job{{Namespace: r.Namespace, Queue: r.Queues[0], ID: "late", Body: []byte("x"), TTL: time.Minute}}, nil
	}
	_, _, addr := serveLoops(t, func(_ *config.Config, d *Deps) { d.Engines["default"] = deafWatcher{fake} })
	conn := dialLoop(t, addr, 5*time.Second)
	_, _ = io.WriteString(conn, fastGet("q", 1))
	time.Sleep(200 * time.Millisecond) // parked, watched
	published.Store(true)
	start := time.Now()
	a := readAnswers(t, bufio.NewReader(conn), 1)
	if a[0].status != 200 || jobIDOf(a[0].body) != "late" {
		t.Fatalf("at the deadline: %d %s, want the job", a[0].status, a[0].body)
	}
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Errorf("answered after %v, before the deadline", d)
	}
}
