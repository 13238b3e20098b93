//go:build linux

package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/evloop"
)

// eachFake is a fake engine that publishes in batches, as the event loops
// need: it records each batch's bodies and numbers the jobs.
type eachFake struct {
	*fakeEngine
	mu      sync.Mutex
	batches [][]string
	next    int
	fail    error // every publish fails with it when set
}

func (f *eachFake) PublishEach(_ context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var bodies []string
	for i, r := range reqs {
		bodies = append(bodies, string(r.Body))
		if f.fail != nil {
			errs[i] = f.fail
			if errors.Is(f.fail, engine.ErrNotReplicated) { // written, not confirmed
				f.next++
				ids[i] = fmt.Sprintf("job-%06d", f.next)
			}
			continue
		}
		f.next++
		ids[i] = fmt.Sprintf("job-%06d", f.next)
	}
	f.batches = append(f.batches, bodies)
}

// Publish fails with fail when it is set, as PublishEach does, so that
// net/http's answers can be compared with the fast path's.
func (f *eachFake) Publish(ctx context.Context, req *engine.PublishRequest) (string, error) {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		return "", fail
	}
	return f.fakeEngine.Publish(ctx, req)
}

func (f *eachFake) ConsumeEach(ctx context.Context, reqs []*engine.ConsumeRequest, jobs [][]*engine.Job, errs []error) {
	for i, r := range reqs {
		f.record("ConsumeEach")
		if f.consume == nil {
			errs[i] = errUnexpected
			continue
		}
		now := *r
		now.Timeout = 0 // the batch never waits
		jobs[i], errs[i] = f.consume(ctx, &now)
	}
}

func (f *eachFake) DeleteEach(ctx context.Context, refs []engine.JobRef, errs []error) {
	for i, r := range refs {
		f.record("DeleteEach")
		if f.del == nil {
			errs[i] = errUnexpected
			continue
		}
		errs[i] = f.del(ctx, r.Namespace, r.Queue, r.ID)
	}
}

// published returns every body published so far, in order.
func (f *eachFake) published() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []string
	for _, b := range f.batches {
		all = append(all, b...)
	}
	return all
}

// serveLoops serves env's server with event loops on 127.0.0.1 and
// returns the public address; the server stops when the test ends.
func serveLoops(t *testing.T, opts ...envOption) (*testEnv, *eachFake, string) {
	t.Helper()
	fake := &eachFake{fakeEngine: &fakeEngine{}}
	opts = append([]envOption{func(c *config.Config, d *Deps) {
		c.Kairos.EventLoops = 2
		d.Engines["default"] = fake
	}}, opts...)
	env := newEnv(t, opts...)
	if err := env.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitLoops(t, env.srv) // Serve starts the loops: wait until they answer
	return env, fake, env.srv.Addr()
}

// dialLoop connects to addr, closes the connection when the test ends and
// sets its deadline d from now (none when d is 0).
func dialLoop(t *testing.T, addr string, d time.Duration) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if d > 0 {
		_ = conn.SetDeadline(time.Now().Add(d))
	}
	return conn
}

// fastPut is a publish of the fast subset.
func fastPut(body string) string {
	return fmt.Sprintf("PUT /api/ns/q?delay=0&ttl=60 HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n%s", goodToken, len(body), body)
}

// readAnswers reads n responses from br.
func readAnswers(t *testing.T, br *bufio.Reader, n int) []liveResponse {
	t.Helper()
	var out []liveResponse
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		out = append(out, liveResponse{status: resp.StatusCode, body: string(b), header: resp.Header})
	}
	return out
}

// jobIDOf returns the job_id of a JSON answer body, or "".
func jobIDOf(body string) string {
	var out struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal([]byte(body), &out)
	return out.JobID
}

// TestLoopPublish: a publish through the loops is answered as gin answers
// it, and recorded in the metrics and logs the same way.
func TestLoopPublish(t *testing.T) {
	env, fake, addr := serveLoops(t)
	env.srv.accessLog.Store(true)
	r := liveDo(t, "PUT", "http://"+addr+"/api/ns/q?tries=2", strings.NewReader("hello"), tok(goodToken))
	if r.status != 201 || r.body != `{"job_id":"job-000001","msg":"published"}` {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	if r.header.Get("Content-Type") != jsonContentType || len(r.header.Get("X-Request-Id")) != 26 || r.header.Get("Date") == "" {
		t.Errorf("headers: %v", r.header)
	}
	if got := fake.published(); len(got) != 1 || got[0] != "hello" {
		t.Errorf("published %q", got)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("the one-by-one engine calls were used: %v", calls)
	}
	n := counterValue(t, env.srv.metrics.codes.WithLabelValues("default", "ns", "/api/:namespace/:queue", "PUT", "201"))
	if n != 1 {
		t.Errorf("code metric %v, want 1", n)
	}
	var logged bool
	for _, e := range env.logs.AllEntries() {
		if e.Message == "access" && e.Data["code"] == 201 && e.Data["path"] == "/api/ns/q" &&
			e.Data["query"] == "tries=2" && e.Data["ip"] == "127.0.0.1" && e.Data["req_id"] == r.header.Get("X-Request-Id") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no access log line for the publish: %v", env.logs.AllEntries())
	}
	// The throttle was asked once, for a write.
	if c := env.throttler.Calls(); len(c) != 1 || c[0] != (throttleCall{"allow", "default", "ns", goodToken, true}) {
		t.Errorf("throttle calls %v", c)
	}
}

// TestLoopHandsOver: on one connection, fast publishes are answered by the
// loop and the first other request, and all after it, by net/http, in
// order; what the loop had read is not lost.
func TestLoopHandsOver(t *testing.T) {
	_, fake, addr := serveLoops(t)
	fake.size = func(context.Context, string, string) (int64, error) { return 42, nil }
	conn := dialLoop(t, addr, 10*time.Second)
	// Unused by the fast path: net/http publishes it through Publish.
	fake.publish = func(context.Context, *engine.PublishRequest) (string, error) { return "slow-1", nil }
	raw := fastPut("a") + fastPut("b") + "GET /api/ns/q/size HTTP/1.1\r\nHost: kairos\r\n\r\n" + fastPut("c")
	// Split mid-request, so that the loop has read part of the hand-over.
	cut := len(raw) - 20
	if _, err := io.WriteString(conn, raw[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := io.WriteString(conn, raw[cut:]); err != nil {
		t.Fatal(err)
	}
	got := readAnswers(t, bufio.NewReader(conn), 4)
	want := []string{
		`201 {"job_id":"job-000001","msg":"published"}`,
		`201 {"job_id":"job-000002","msg":"published"}`,
		`200 {"namespace":"ns","queue":"q","size":42}`,
		`201 {"job_id":"slow-1","msg":"published"}`,
	}
	for i, w := range want {
		if g := fmt.Sprintf("%d %s", got[i].status, got[i].body); g != w {
			t.Errorf("answer %d: %s, want %s", i, g, w)
		}
	}
	if p := fake.published(); strings.Join(p, "") != "ab" {
		t.Errorf("the loop published %q", p)
	}
}

// TestLoopRefusesToNetHTTP: requests that fail a check before the engine
// (parameters, handed to net/http; admission, answered by the loop) get
// gin's answers, the same as without loops; nothing is published.
func TestLoopRefusesToNetHTTP(t *testing.T) {
	env, fake, addr := serveLoops(t)
	env.throttler.budget["limited-token"] = 0
	env.tokens.tokens["default/ns/limited-token"] = auth.Scope{}
	cases := []string{
		"PUT /api/ns/q?delay=x HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q?delay=10&ttl=5 HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q?tries=0 HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q?tries=65536 HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: wrong\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: nopool:" + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: " + scopedToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: limited-token\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1048577\r\n\r\nx",
		"PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
		"PUT /api/ns/_q HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
		"PUT /api/ns/q/ HTTP/1.1\r\nHost: k\r\nX-Token: " + goodToken + "\r\nContent-Length: 1\r\n\r\nx",
	}
	// The reference: the same server's handler without loops.
	plain := newEnv(t)
	plain.throttler.budget["limited-token"] = 0
	plain.tokens.tokens["default/ns/limited-token"] = auth.Scope{}
	for _, raw := range cases {
		res := rawExchange(addr, []byte(raw), 5*time.Second)
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			t.Fatal(err)
		}
		req.RemoteAddr = "127.0.0.1:1"
		w := &recorder{header: http.Header{}}
		plain.srv.Handler().ServeHTTP(w, req)
		if res.status != w.status || res.body != w.body.String() {
			t.Errorf("%q:\n loops: %d %s\n gin:   %d %s", raw, res.status, res.body, w.status, w.body.String())
		}
	}
	if p := fake.published(); len(p) != 0 {
		t.Errorf("published %q", p)
	}
}

// recorder is a minimal ResponseWriter.
type recorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(200)
	return r.body.Write(b)
}

// TestLoopEngineErrors: the engine's errors are rendered as failAPI
// renders them, and a failed publish gives its throttle token back.
func TestLoopEngineErrors(t *testing.T) {
	env, fake, addr := serveLoops(t)
	unavailable := `{"error":"redis is unavailable, retry later"}`
	cases := []struct {
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{engine.ErrClosed, 503, `{"error":"server is shutting down"}`, "1"},
		{errors.New("redis: boom"), 500, `{"error":"internal error"}`, ""},
		{fmt.Errorf("publish: %w", engine.ErrInvalid), 400, `{"error":"invalid request"}`, ""},
		{fmt.Errorf("publish: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), 503, unavailable, "1"},
		{fmt.Errorf("publish: %w", redis.ErrPoolTimeout), 503, unavailable, "1"},
		{fmt.Errorf("publish: %w", engine.ErrUnavailable), 503, unavailable, "1"},
		{fmt.Errorf("publish ns/q: 0 of 1 replicas: %w", engine.ErrNotReplicated), 503,
			`{"error":"publish not replicated: the job may exist","job_id":"job-000001"}`, "1"},
	}
	var netHTTP int
	for _, tc := range cases {
		fake.mu.Lock()
		fake.fail = tc.err
		fake.mu.Unlock()
		r := liveDo(t, "PUT", "http://"+addr+"/api/ns/q", strings.NewReader("x"), tok(goodToken))
		if r.status != tc.status || r.body != tc.body || r.header.Get("Retry-After") != tc.retryAfter {
			t.Errorf("%v: %d %s (Retry-After %q), want %d %s (%q)", tc.err, r.status, r.body, r.header.Get("Retry-After"), tc.status, tc.body, tc.retryAfter)
		}
		if errors.Is(tc.err, engine.ErrNotReplicated) {
			continue // the fake numbers its jobs: the ID differs
		}
		// The same request through net/http (Connection: close is outside
		// the fast subset) answers the same: status, body, headers.
		h := tok(goodToken)
		h["Connection"] = "close"
		g := liveDo(t, "PUT", "http://"+addr+"/api/ns/q", strings.NewReader("x"), h)
		netHTTP++
		if g.status != r.status || g.body != r.body || !sameHeaderNames(g.header, r.header) ||
			g.header.Get("Retry-After") != r.header.Get("Retry-After") || g.header.Get("Content-Type") != r.header.Get("Content-Type") {
			t.Errorf("%v: fast path %d %s %v; net/http %d %s %v", tc.err, r.status, r.body, r.header, g.status, g.body, g.header)
		}
	}
	var refunds int
	for _, c := range env.throttler.Calls() {
		if c.op == "refund" {
			refunds++
		}
	}
	if refunds != len(cases)+netHTTP {
		t.Errorf("%d refunds, want %d", refunds, len(cases)+netHTTP)
	}
	var logged bool
	for _, e := range env.logs.AllEntries() {
		if e.Message == "request failed" && e.Data["queue"] == "q" && e.Data["error"] != nil {
			logged = true
		}
	}
	if !logged {
		t.Error("the 500 was not logged")
	}
}

// TestLoopBackpressure: a client that sends thousands of pipelined
// publishes and reads the answers late gets every answer, in order; the
// loop waits for the socket instead of dropping or reordering.
func TestLoopBackpressure(t *testing.T) {
	_, fake, addr := serveLoops(t)
	const n = 20000
	conn := dialLoop(t, addr, 60*time.Second)
	go func() {
		w := bufio.NewWriterSize(conn, 64<<10)
		for i := 0; i < n; i++ {
			_, _ = io.WriteString(w, fastPut(fmt.Sprintf("%06d", i)))
		}
		_ = w.Flush()
	}()
	time.Sleep(300 * time.Millisecond) // let the answers pile up
	br := bufio.NewReader(conn)
	re := regexp.MustCompile(`"job_id":"job-(\d+)"`)
	for i := 1; i <= n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := re.FindStringSubmatch(string(b))
		if resp.StatusCode != 201 || m == nil || m[1] != fmt.Sprintf("%06d", i) {
			t.Fatalf("answer %d: %d %s", i, resp.StatusCode, b)
		}
	}
	p := fake.published()
	for i, body := range p {
		if body != fmt.Sprintf("%06d", i) {
			t.Fatalf("job %d has body %q", i, body)
		}
	}
	fake.mu.Lock()
	batches := len(fake.batches)
	fake.mu.Unlock()
	if len(p) != n || batches >= n {
		t.Errorf("%d jobs in %d batches", len(p), batches)
	}
}

// TestLoopLargeBodyAndHalfClose: a 1 MiB body arriving in many reads is
// published whole, and a client that shuts its side down after sending
// still gets its answer.
func TestLoopLargeBodyAndHalfClose(t *testing.T) {
	_, fake, addr := serveLoops(t)
	big := strings.Repeat("b", engine.MaxBodySize)
	conn := dialLoop(t, addr, 10*time.Second)
	if _, err := io.WriteString(conn, fastPut(big)+fastPut("small")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	got := readAnswers(t, br, 2)
	if got[0].status != 201 || got[1].status != 201 {
		t.Fatalf("answers %v", got)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the answers: %v, want EOF", err)
	}
	p := fake.published()
	if len(p) != 2 || p[0] != big || p[1] != "small" {
		t.Errorf("published %d jobs", len(p))
	}
}

// TestLoopTimeouts: the loops apply net/http's limits: an idle connection
// is closed after IdleTimeout, a head trickling in after
// ReadHeaderTimeout (no answer), and a late body gets net/http's 400 after
// ReadTimeout.
func TestLoopTimeouts(t *testing.T) {
	_, fake, addr := serveLoops(t, withConfig(func(c *config.Config) {
		c.Kairos.IdleTimeoutSecond, c.Kairos.ReadHeaderTimeoutSecond, c.Kairos.ReadTimeoutSecond = 1, 1, 2
	}))
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		conn := dialLoop(t, addr, 0)
		_, _ = io.WriteString(conn, fastPut("x"))
		readAnswers(t, bufio.NewReader(conn), 1)
		if d := closedWithin(t, conn, 5*time.Second); d < 800*time.Millisecond || d > 2500*time.Millisecond {
			t.Errorf("idle connection closed after %v, want about 1 s", d)
		}
	})
	t.Run("head", func(t *testing.T) {
		t.Parallel()
		conn := dialLoop(t, addr, 0)
		_, _ = io.WriteString(conn, "PUT /api/ns/q HTTP/1.1\r\nHost: k\r\n")
		if d := closedWithin(t, conn, 5*time.Second); d < 800*time.Millisecond || d > 2500*time.Millisecond {
			t.Errorf("incomplete head cut off after %v, want about 1 s", d)
		}
	})
	t.Run("body", func(t *testing.T) {
		t.Parallel()
		conn := dialLoop(t, addr, 0)
		start := time.Now()
		raw := fastPut("0123456789")
		_, _ = io.WriteString(conn, raw[:len(raw)-4])
		_ = conn.SetReadDeadline(start.Add(6 * time.Second))
		got := readAnswers(t, bufio.NewReader(conn), 1)
		d := time.Since(start)
		if got[0].status != 400 || got[0].body != `{"error":"failed to read body"}` || d < 1800*time.Millisecond || d > 3500*time.Millisecond {
			t.Errorf("late body: %d %s after %v, want 400 after about 2 s", got[0].status, got[0].body, d)
		}
	})
	t.Cleanup(func() {
		if p := fake.published(); len(p) != 1 {
			t.Errorf("published %q, want the idle test's job only", p)
		}
	})
}

// TestLoopShutdown: stopping the server closes the loops' idle
// connections, and Serve returns.
func TestLoopShutdown(t *testing.T) {
	fake := &eachFake{fakeEngine: &fakeEngine{}}
	env := newEnv(t, func(c *config.Config, d *Deps) {
		c.Kairos.EventLoops = 1
		d.Engines["default"] = fake
	})
	if err := env.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.srv.Serve(ctx) }()
	var conn net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if conn, err = net.Dial("tcp", env.srv.Addr()); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, fastPut("x"))
	if got := readAnswers(t, bufio.NewReader(conn), 1); got[0].status != 201 {
		t.Fatalf("publish: %v", got)
	}
	// A consume waiting on the loop is answered "no job" at shutdown, as
	// net/http's waiting consumes are.
	fake.consume = func(ctx context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		if r.Timeout > 0 {
			<-ctx.Done()
		}
		return nil, nil
	}
	waiting := dialLoop(t, env.srv.Addr(), 10*time.Second)
	_, _ = fmt.Fprintf(waiting, "GET /api/ns/q?timeout=60 HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", goodToken)
	time.Sleep(200 * time.Millisecond)
	cancel()
	start := time.Now()
	if got := readAnswers(t, bufio.NewReader(waiting), 1); got[0].status != 404 {
		t.Errorf("waiting consume at shutdown: %v", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("waiting consume answered %v after shutdown began", d)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if d := closedWithin(t, conn, 2*time.Second); d > time.Second {
		t.Errorf("connection closed %v after Serve returned", d)
	}
}

// TestLoopConsumeAck: consumes and ACKs through the loops are answered as
// gin answers them; a consume that finds nothing and may wait is handed to
// net/http, which waits.
func TestLoopConsumeAck(t *testing.T) {
	env, fake, addr := serveLoops(t)
	plain := newEnv(t)
	id := testJobID(env)
	job := func(n int) *engine.Job {
		return &engine.Job{Namespace: "ns", Queue: "q", ID: id, Body: []byte(fmt.Sprintf("body-%d", n)), TTL: time.Minute, Tries: 2}
	}
	var mu sync.Mutex
	var timeouts []time.Duration
	consume := func(_ context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		mu.Lock()
		timeouts = append(timeouts, r.Timeout)
		mu.Unlock()
		switch r.TTR {
		case 7 * time.Second: // nothing ready
			return nil, nil
		case 8 * time.Second:
			return nil, errors.New("redis: boom")
		}
		var jobs []*engine.Job
		for i := range r.Count {
			jobs = append(jobs, job(i))
		}
		return jobs, nil
	}
	fake.consume, plain.eng.consume = consume, consume
	del := func(_ context.Context, ns, q, id string) error {
		if id == "BAD" {
			return errors.New("redis: boom")
		}
		return nil
	}
	fake.del, plain.eng.del = del, del
	for _, target := range []string{
		"/api/ns/q?ttr=30&timeout=0",
		"/api/ns/q?ttr=30&count=3",
		"/api/ns/q?ttr=7",
		"/api/ns/q?ttr=7&timeout=1",
		"/api/ns/q?ttr=8",
		"/api/ns/q?ttr=30&count=101",
	} {
		got := liveDo(t, "GET", "http://"+addr+target, nil, tok(goodToken))
		httpClient.CloseIdleConnections() // a fresh connection each: a handed-over one stays with net/http
		w := plain.api(t, request{method: "GET", target: target, header: tok(goodToken)})
		if got.status != w.Code || got.body != w.Body.String() {
			t.Errorf("GET %s:\n loops: %d %s\n gin:   %d %s", target, got.status, got.body, w.Code, w.Body.String())
		}
	}
	for _, jobID := range []string{id, "BAD"} {
		target := "/api/ns/q/job/" + jobID
		got := liveDo(t, "DELETE", "http://"+addr+target, nil, tok(goodToken))
		httpClient.CloseIdleConnections()
		w := plain.api(t, request{method: "DELETE", target: target, header: tok(goodToken)})
		if got.status != w.Code || got.body != w.Body.String() {
			t.Errorf("DELETE %s:\n loops: %d %s\n gin:   %d %s", target, got.status, got.body, w.Code, w.Body.String())
		}
		if got.status == 204 && got.header.Get("Content-Type") != "" {
			t.Errorf("204 with Content-Type %q", got.header.Get("Content-Type"))
		}
	}
	calls := strings.Join(fake.Calls(), " ")
	// count=101 is refused before any engine call, by gin.
	if calls != "ConsumeEach ConsumeEach ConsumeEach ConsumeEach Consume ConsumeEach DeleteEach DeleteEach" {
		t.Errorf("engine calls through the loops: %s", calls)
	}
	// The consume that could wait was tried at once in the loop's batch,
	// then waited with what was left of its timeout (gin waits 1 s).
	mu.Lock()
	defer mu.Unlock()
	var waited bool
	for _, d := range timeouts {
		waited = waited || d > time.Second/2 && d < time.Second
	}
	if !waited {
		t.Errorf("timeouts seen %v, want the loop's wait of just under 1 s", timeouts)
	}
}

// TestLoopLongPoll: a consume that finds nothing waits while its
// connection stays with its loop. It is answered when a job comes, when
// its time is up, or at once when the client leaves; what the client sent
// behind it is served after it, in order, still by the loop.
func TestLoopLongPoll(t *testing.T) {
	env, fake, addr := serveLoops(t)
	id := testJobID(env)
	release := make(chan struct{})
	cancelled := make(chan time.Duration, 4)
	var mu sync.Mutex
	var waits []time.Duration
	fake.consume = func(ctx context.Context, r *engine.ConsumeRequest) ([]*engine.Job, error) {
		if r.Timeout == 0 {
			return nil, nil // the batch: nothing ready
		}
		mu.Lock()
		waits = append(waits, r.Timeout)
		mu.Unlock()
		start := time.Now()
		var ready <-chan struct{}
		if r.TTR == 5*time.Second {
			ready = release
		}
		timer := time.NewTimer(r.Timeout)
		defer timer.Stop()
		select {
		case <-ready:
			return []*engine.Job{{Namespace: "ns", Queue: "q", ID: id, Body: []byte("late"), TTL: time.Minute, Tries: 1}}, nil
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			cancelled <- time.Since(start)
			return nil, nil
		}
	}
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		conn := dialLoop(t, addr, 10*time.Second)
		return conn, bufio.NewReader(conn)
	}
	get := func(query string) string {
		return fmt.Sprintf("GET /api/ns/q?%s HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", query, goodToken)
	}

	t.Run("job comes", func(t *testing.T) {
		conn, br := dial()
		_, _ = io.WriteString(conn, get("ttr=5&timeout=3")+fastPut("behind"))
		time.Sleep(200 * time.Millisecond)
		if got := fake.published(); len(got) != 0 {
			t.Fatalf("the publish behind a waiting consume ran before it: %q", got)
		}
		close(release)
		got := readAnswers(t, br, 2)
		if got[0].status != 200 || !strings.Contains(got[0].body, `"data":"bGF0ZQ=="`) || got[1].status != 201 {
			t.Fatalf("answers: %v", got)
		}
		// The connection is still the loop's: its next consume is taken
		// in a batch (ConsumeEach), not by gin (Consume).
		before := len(fake.Calls())
		_, _ = io.WriteString(conn, get("ttr=30&timeout=0"))
		if got := readAnswers(t, br, 1); got[0].status != 404 {
			t.Fatalf("consume after: %v", got)
		}
		if calls := fake.Calls()[before:]; len(calls) != 1 || calls[0] != "ConsumeEach" {
			t.Errorf("after the wait, engine calls %v, want [ConsumeEach]", calls)
		}
		mu.Lock()
		w := waits[len(waits)-1]
		mu.Unlock()
		if w <= 2*time.Second || w > 3*time.Second {
			t.Errorf("waited with timeout %v, want just under 3 s", w)
		}
	})

	t.Run("time up", func(t *testing.T) {
		conn, br := dial()
		start := time.Now()
		_, _ = io.WriteString(conn, get("ttr=6&timeout=1"))
		got := readAnswers(t, br, 1)
		if got[0].status != 404 || got[0].body != `{"msg":"no job available"}` {
			t.Fatalf("answer: %v", got)
		}
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("answered after %v, before the 1 s wait", d)
		}
	})

	t.Run("client half-closes", func(t *testing.T) {
		conn, br := dial()
		_, _ = io.WriteString(conn, get("ttr=6&timeout=30"))
		time.Sleep(100 * time.Millisecond)
		_ = conn.(*net.TCPConn).CloseWrite()
		select {
		case d := <-cancelled:
			if d > 2*time.Second {
				t.Errorf("wait ended %v after the client left", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the wait went on after the client left")
		}
		// As net/http does: the 404, then the connection is closed.
		if got := readAnswers(t, br, 1); got[0].status != 404 {
			t.Fatalf("answer: %v", got)
		}
		if d := closedWithin(t, conn, 2*time.Second); d > time.Second {
			t.Errorf("closed %v after the answer", d)
		}
	})

	t.Run("client closes", func(t *testing.T) {
		conn, _ := dial()
		_, _ = io.WriteString(conn, get("ttr=6&timeout=30"))
		time.Sleep(100 * time.Millisecond)
		conn.Close()
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the wait went on after the client closed")
		}
	})

	// Every wait that did not deliver gave its throttle token back (the
	// last one just after its wait ended).
	var allows, refunds int
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		allows, refunds = 0, 0
		for _, c := range env.throttler.Calls() {
			if !c.write {
				switch c.op {
				case "allow":
					allows++
				case "refund":
					refunds++
				}
			}
		}
		if refunds >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if allows != 5 || refunds != 4 {
		t.Errorf("consume throttle: %d allows, %d refunds; want 5 and 4", allows, refunds)
	}
}

// TestLoopPassLive sends an ACK, a publish and a consume pipelined on one
// connection, so that one loop pass runs them, on the Redis engine (whose
// pass sends them to Redis together, engine.Pipeliner): each is answered,
// in order, and the consume gets the job published before it in the pass.
func TestLoopPassLive(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t)})
			token := l.token(t, "ns", auth.Scope{})
			conn := dialLoop(t, l.srv.Addr(), 10*time.Second)
			br := bufio.NewReader(conn)
			jobID := func(a liveResponse) string { return jobIDOf(a.body) }
			put := func(body string) string {
				return fmt.Sprintf("PUT /api/ns/q?delay=0 HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n%s", token, len(body), body)
			}
			get := fmt.Sprintf("GET /api/ns/q?timeout=0 HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", token)
			_, _ = io.WriteString(conn, put("first")+get)
			a := readAnswers(t, br, 2)
			first := jobID(a[1])
			if a[0].status != 201 || a[1].status != 200 || first == "" || first != jobID(a[0]) {
				t.Fatalf("publish, consume: %+v", a)
			}
			for round := 0; round < 3; round++ {
				body := fmt.Sprintf("job-%d", round)
				_, _ = io.WriteString(conn, fmt.Sprintf("DELETE /api/ns/q/job/%s HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", first, token)+put(body)+get)
				a = readAnswers(t, br, 3)
				if a[0].status != 204 || a[1].status != 201 || a[2].status != 200 {
					t.Fatalf("round %d: ACK, publish, consume: %+v", round, a)
				}
				if id := jobID(a[2]); id != jobID(a[1]) || !strings.Contains(a[2].body, base64.StdEncoding.EncodeToString([]byte(body))) {
					t.Fatalf("round %d: consumed %s, want the job published before it (%s)", round, a[2].body, a[1].body)
				}
				if r := liveDo(t, "GET", l.api+"/api/ns/q/job/"+first, nil, tok(token)); r.status != 404 {
					t.Fatalf("round %d: job %s after its ACK: %d %s", round, first, r.status, r.body)
				}
				first = jobID(a[2])
			}
		})
	}
}

// TestLoopLongPollLive: long-polls on the loops with the Redis engine (its
// watches, no goroutine per waiting consumer), on miniredis and on a real
// redis-server: waiting consumers get the jobs published later at once,
// one each; a consumer that leaves gives its turn to the next; a wait ends
// at its timeout with 404; a waiting consumer is answered at shutdown.
func TestLoopLongPollLive(t *testing.T) {
	for name, backend := range liveBackends {
		t.Run(name, func(t *testing.T) {
			l := startLive(t, liveOptions{client: backend(t)})
			token := l.token(t, "ns", auth.Scope{})
			addr := l.srv.Addr()
			dial := func() (net.Conn, *bufio.Reader) {
				t.Helper()
				conn := dialLoop(t, addr, 20*time.Second)
				return conn, bufio.NewReader(conn)
			}
			get := func(conn net.Conn, q string, timeout int) {
				_, _ = fmt.Fprintf(conn, "GET /api/ns/%s?timeout=%d HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", q, timeout, token)
			}
			publish := func(q, body string) string {
				t.Helper()
				r := liveDo(t, "PUT", l.api+"/api/ns/"+q+"?delay=0", strings.NewReader(body), tok(token))
				if r.status != 201 {
					t.Fatalf("publish: %d %s", r.status, r.body)
				}
				return jobIDOf(r.body)
			}

			// 20 consumers wait (two rounds, so the second waits with the
			// queue known empty); each job reaches one of them at once.
			const n = 20
			conns := make([]net.Conn, n)
			readers := make([]*bufio.Reader, n)
			for i := range conns {
				conns[i], readers[i] = dial()
			}
			for round := 0; round < 2; round++ {
				for i := range conns {
					get(conns[i], "q", 10)
				}
				time.Sleep(300 * time.Millisecond)
				start := time.Now()
				want := map[string]bool{}
				for i := 0; i < n; i++ {
					want[publish("q", fmt.Sprintf("job-%d-%d", round, i))] = true
				}
				for i := range conns {
					got := readAnswers(t, readers[i], 1)[0]
					id := jobIDOf(got.body) // "" when not JSON with a job_id: never wanted
					if got.status != 200 || !want[id] {
						t.Fatalf("round %d consumer %d: %d %s", round, i, got.status, got.body)
					}
					delete(want, id)
					_, _ = fmt.Fprintf(conns[i], "DELETE /api/ns/q/job/%s HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", id, token)
					if ack := readAnswers(t, readers[i], 1)[0]; ack.status != 204 {
						t.Fatalf("ACK: %d %s", ack.status, ack.body)
					}
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Errorf("round %d: %d jobs to %d waiting consumers took %v", round, n, n, d)
				}
			}

			// A consumer that leaves while waiting gives its turn: the job
			// goes to the one behind it at once (not at the 1 s sweep).
			gone, _ := dial()
			get(gone, "q2", 10)
			time.Sleep(200 * time.Millisecond)
			gone.Close()
			time.Sleep(200 * time.Millisecond)
			stays, br := dial()
			get(stays, "q2", 10)
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			id := publish("q2", "turn")
			if got := readAnswers(t, br, 1)[0]; got.status != 200 || !strings.Contains(got.body, id) {
				t.Fatalf("consumer behind the one that left: %d %s", got.status, got.body)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("delivered %v after the publish", d)
			}

			// The wait ends at its timeout.
			c, br := dial()
			start = time.Now()
			get(c, "q3", 1)
			if got := readAnswers(t, br, 1)[0]; got.status != 404 || got.body != `{"msg":"no job available"}` {
				t.Fatalf("timeout: %d %s", got.status, got.body)
			}
			if d := time.Since(start); d < 900*time.Millisecond || d > 2500*time.Millisecond {
				t.Errorf("a 1 s wait answered after %v", d)
			}

			// A consumer waiting at shutdown is answered 404 at once.
			c, br = dial()
			get(c, "q3", 30)
			time.Sleep(200 * time.Millisecond)
			go func() { _ = l.srv.Close() }()
			start = time.Now()
			if got := readAnswers(t, br, 1)[0]; got.status != 404 {
				t.Fatalf("at shutdown: %d %s", got.status, got.body)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("answered %v after shutdown began", d)
			}
		})
	}
}

// sameHeaderNames reports whether a and b have the same header names,
// apart from Connection (net/http answers "close" to a request that asked).
func sameHeaderNames(a, b http.Header) bool {
	names := func(h http.Header) []string {
		var out []string
		for k := range h {
			if k != "Connection" {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(names(a), names(b))
}

// waitLoops waits up to 5 s for Serve to have started srv's event loops.
func waitLoops(t testing.TB, srv *Server) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		srv.mu.Lock()
		started := srv.loops != nil
		srv.mu.Unlock()
		if started {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the event loops did not start")
		}
	}
}

// TestLoopServedBy: the metrics (kairos_http_responses's served_by) and the
// access log (served_by) say which path answered: the loop for the fast
// publishes, net/http for the rest of the connection once handed over.
func TestLoopServedBy(t *testing.T) {
	env, fake, addr := serveLoops(t)
	env.srv.accessLog.Store(true)
	fake.size = func(context.Context, string, string) (int64, error) { return 42, nil }
	fake.publish = func(context.Context, *engine.PublishRequest) (string, error) { return "slow-1", nil }
	conn := dialLoop(t, addr, 10*time.Second)
	raw := fastPut("a") + fastPut("b") + "GET /api/ns/q/size HTTP/1.1\r\nHost: kairos\r\n\r\n" + fastPut("c")
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	got := readAnswers(t, bufio.NewReader(conn), 4)
	for i, code := range []int{201, 201, 200, 201} {
		if got[i].status != code {
			t.Fatalf("answer %d: %d %s, want %d", i, got[i].status, got[i].body, code)
		}
	}
	served := env.srv.metrics.served
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"default", "/api/:namespace/:queue", "PUT", "201", "loop"}, 2},
		{[]string{"default", "/api/:namespace/:queue", "PUT", "201", "http"}, 1},
		{[]string{"default", "/api/:namespace/:queue/size", "GET", "200", "http"}, 1},
		{[]string{"default", "/api/:namespace/:queue/size", "GET", "200", "loop"}, 0},
	} {
		if n := counterValue(t, served.WithLabelValues(c.labels...)); n != c.want {
			t.Errorf("kairos_http_responses%v = %v, want %v", c.labels, n, c.want)
		}
	}
	byID := map[string]any{}
	for _, e := range env.logs.AllEntries() {
		if e.Message == "access" {
			id, _ := e.Data["req_id"].(string)
			byID[id] = e.Data["served_by"]
		}
	}
	for i, want := range []string{"loop", "loop", "http", "http"} {
		id := got[i].header.Get("X-Request-Id")
		if byID[id] != want {
			t.Errorf("answer %d (%s): access log served_by %v, want %s", i, id, byID[id], want)
		}
	}
}

// TestLoopRoutesAreGinRoutes: every route the loops may serve (loopRoutes)
// is a route of apiRoutes with the handler of its kind, so that a request
// the loops hand over meets the same route.
func TestLoopRoutesAreGinRoutes(t *testing.T) {
	env := newEnv(t)
	handler := map[evloop.Kind]string{evloop.Publish: ".publish-fm", evloop.Consume: ".consume-fm", evloop.Ack: ".ack-fm"}
	routes := env.srv.apiRoutes().Routes()
	for _, lr := range loopRoutes.Routes {
		i := slices.IndexFunc(routes, func(r gin.RouteInfo) bool { return r.Method == lr.Method && r.Path == lr.Path })
		if i < 0 {
			t.Errorf("loopRoutes has %s %s, apiRoutes has not", lr.Method, lr.Path)
			continue
		}
		if h := routes[i].Handler; !strings.HasSuffix(h, handler[lr.Kind]) {
			t.Errorf("%s %s: gin's handler %s, the loops' kind %d", lr.Method, lr.Path, h, lr.Kind)
		}
	}
}
