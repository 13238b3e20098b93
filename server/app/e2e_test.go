package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
	"github.com/kairos-dev/kairos/server/openapitest"
)

// These tests run the whole server (app.New → Listen → Run) against a real
// redis-server, through real sockets, the way users run it.

const jsonContentType = "application/json; charset=utf-8"

// lateSlack is how late past its due time an end-to-end test accepts a
// timer-driven delivery (a delay, a TTR): these tests check that the timer
// fired and the job came, not how precisely — the benchmarks measure that
// (`kairos bench latency`, doc/performance.md). CI shares its 2 cores with
// other work; under -race at load average 8 deliveries 0.4–1.7 s late were
// seen. An early delivery is still a failure to the millisecond.
const lateSlack = 2 * time.Second

// kairos is one running app.
type kairos struct {
	App   *app.App
	API   string // http://host:port of the public API
	Admin string // http://host:port of the admin API
	// APIHost and APIPort are the public listener's address, split.
	APIHost string
	APIPort int
	// Store is the Redis section of the default pool, for tests that start
	// another instance on the same data.
	Store config.RedisConf

	cancel context.CancelFunc
	done   chan error
}

// logWriter sends the server's log lines to t.Log while the test runs and
// drops them afterwards (the server may still log while it stops).
type logWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(tb testing.TB) logrus.FieldLogger {
	tb.Helper()
	w := &logWriter{tb: tb}
	tb.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.WarnLevel)
	return l
}

// redisConfig is config.Default with both listeners on free loopback ports
// and the default pool and the admin Redis at addr ("" = embedded, which
// sets [Kairos] Embedded).
func redisConfig(addr string) *config.Config {
	cfg := config.Default()
	cfg.Kairos.Embedded = addr == ""
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.AdminPort = 0
	cfg.AdminRedis = config.RedisConf{Addr: addr}
	cfg.Pool = map[string]config.RedisConf{config.DefaultPoolName: {Addr: addr}}
	return cfg
}

// startKairos builds, binds and runs an app for cfg; it is stopped
// gracefully at cleanup (or earlier with stop).
func startKairos(tb testing.TB, cfg *config.Config) *kairos {
	tb.Helper()
	log := testLogger(tb)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, app.Options{Logger: log})
	if err != nil {
		cancel()
		tb.Fatalf("app.New: %v", err)
	}
	if err := a.Listen(); err != nil {
		cancel()
		tb.Fatalf("Listen: %v", err)
	}
	k := &kairos{
		App:    a,
		API:    "http://" + a.Server.Addr(),
		Admin:  "http://" + a.Server.AdminAddr(),
		Store:  cfg.Pool[config.DefaultPoolName],
		cancel: cancel,
		done:   make(chan error, 1),
	}
	openapiTransport.Register(k.API, openapitest.Public)
	openapiTransport.Register(k.Admin, openapitest.Admin)
	u, _ := url.Parse(k.API)
	k.APIHost = u.Hostname()
	fmt.Sscan(u.Port(), &k.APIPort)
	go func() { k.done <- a.Run(ctx) }()
	tb.Cleanup(func() {
		if err := k.stop(10 * time.Second); err != nil {
			tb.Errorf("Run: %v", err)
		}
		// Its ports are free again: a server started later (a
		// kairos-server process of TestE2EScheduleKill, say) may get one.
		openapiTransport.Unregister(k.API)
		openapiTransport.Unregister(k.Admin)
	})
	return k
}

// stop cancels Run's context and waits for Run to return.
func (k *kairos) stop(wait time.Duration) error {
	k.cancel()
	select {
	case err, ok := <-k.done:
		if ok {
			close(k.done)
		}
		return err
	case <-time.After(wait):
		return fmt.Errorf("Run did not return within %v of its context being cancelled", wait)
	}
}

// newToken creates a token for ns through the admin API and checks the
// exact (indented) response.
func (k *kairos) newToken(tb testing.TB, ns string) string {
	tb.Helper()
	r := doHTTP(tb, http.MethodPost, k.Admin+"/token/"+ns+"?description=e2e", "", nil, nil)
	r.wantStatus(tb, http.StatusCreated)
	var out struct{ Token string }
	r.decode(tb, &out)
	if len(out.Token) != 26 {
		tb.Fatalf("token %q: want a 26-character ULID", out.Token)
	}
	r.wantBody(tb, "{\n    \"token\": \""+out.Token+"\"\n}")
	return out.Token
}

// e2e is a running app on a real Redis with a namespace and its token.
type e2e struct {
	*kairos
	// Redis is the redis-server of the pool and the admin Redis; nil on a
	// Redis Cluster (see onCluster).
	Redis *redistest.Server
	NS    string
	Token string
}

// startE2E starts an app on a throwaway durable redis-server (default
// pool and admin Redis), with a token of namespace "e2e". Under
// TestE2ECluster (see onCluster) it runs on the test binary's shared Redis
// Cluster instead, flushed first, with both the pool and the admin Redis
// set to Cluster = true: the same test then checks the same answers on a
// cluster.
func startE2E(tb testing.TB) *e2e {
	tb.Helper()
	if onCluster(tb) {
		c := redistest.SharedCluster(tb)
		c.Flush(tb)
		k := startKairos(tb, clusterConfig(c))
		return &e2e{kairos: k, NS: "e2e", Token: k.newToken(tb, "e2e")}
	}
	rs := redistest.StartWith(tb, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	k := startKairos(tb, redisConfig(rs.Addr))
	return &e2e{kairos: k, Redis: rs, NS: "e2e", Token: k.newToken(tb, "e2e")}
}

// clusterSuite is the test that runs the end-to-end tests on a Redis
// Cluster (cluster_e2e_test.go).
const clusterSuite = "TestE2ECluster"

// onCluster reports whether tb runs under clusterSuite, whose subtests are
// end-to-end tests that startE2E then runs on a Redis Cluster.
func onCluster(tb testing.TB) bool { return strings.HasPrefix(tb.Name(), clusterSuite+"/") }

// e2eRedisConfig returns the config maker of a test's servers: under
// TestE2ECluster (onCluster) the shared cluster, flushed first, else a
// Redis of the test's own (append-only, fsync every second).
func e2eRedisConfig(tb testing.TB) func() *config.Config {
	tb.Helper()
	if onCluster(tb) {
		c := redistest.SharedCluster(tb)
		c.Flush(tb)
		return func() *config.Config { return clusterConfig(c) }
	}
	rs := redistest.StartWith(tb, redistest.Options{AppendOnly: true, AppendFsync: "everysec"})
	return func() *config.Config { return redisConfig(rs.Addr) }
}

// clusterConfig is redisConfig with the default pool and the admin Redis
// on the Redis Cluster c: the pool seeded with every node (Addrs), the
// admin Redis with one (Addr), as users may write either.
func clusterConfig(c *redistest.Cluster) *config.Config {
	cfg := redisConfig(c.Addrs[0])
	cfg.Kairos.Embedded = false
	cfg.AdminRedis = config.RedisConf{Cluster: true, Addr: c.Addrs[1]}
	cfg.Pool = map[string]config.RedisConf{config.DefaultPoolName: {Cluster: true, Addrs: c.Addrs}}
	return cfg
}

// url returns the public API URL of path (relative to /api/NS/) with the
// query q.
func (e *e2e) url(path, q string) string {
	u := e.API + "/api/" + e.NS + "/" + path
	if q != "" {
		u += "?" + q
	}
	return u
}

func (e *e2e) do(tb testing.TB, method, path, q string, body []byte, hdr map[string]string) *response {
	tb.Helper()
	return doHTTP(tb, method, e.url(path, q), e.Token, body, hdr)
}

// publish publishes body to queue and returns the job ID.
func (e *e2e) publish(tb testing.TB, queue, q, body string) string {
	tb.Helper()
	r := e.do(tb, http.MethodPut, queue, q, []byte(body), nil)
	r.wantStatus(tb, http.StatusCreated)
	var out struct {
		JobID string `json:"job_id"`
	}
	r.decode(tb, &out)
	r.wantBody(tb, `{"job_id":"`+out.JobID+`","msg":"published"}`)
	return out.JobID
}

// consume consumes one job (count=1) and checks the exact response.
func (e *e2e) consume(tb testing.TB, queues, q string) *jobJSON {
	tb.Helper()
	r := e.do(tb, http.MethodGet, queues, q, nil, nil)
	r.wantStatus(tb, http.StatusOK)
	j := r.job(tb)
	if j.Msg != "new job" {
		tb.Fatalf("consume: msg %q, want \"new job\"", j.Msg)
	}
	return j
}

// wantNoJob consumes and expects lmstfy's exact 404.
func (e *e2e) wantNoJob(tb testing.TB, queues, q string) {
	tb.Helper()
	r := e.do(tb, http.MethodGet, queues, q, nil, nil)
	r.wantStatus(tb, http.StatusNotFound)
	r.wantBody(tb, `{"msg":"no job available"}`)
}

func (e *e2e) ack(tb testing.TB, queue, id string) {
	tb.Helper()
	r := e.do(tb, http.MethodDelete, queue+"/job/"+id, "", nil, nil)
	r.wantStatus(tb, http.StatusNoContent)
	if len(r.Body) != 0 {
		tb.Fatalf("ACK: 204 with body %q", r.Body)
	}
}

// response is one HTTP exchange.
type response struct {
	Method, URL string
	Status      int
	Header      http.Header
	Body        []byte
}

// openapiTransport validates every response of a Kairos started by
// startKairos against doc/openapi.yaml: an exchange the description does
// not allow (a status, header, field or body it does not declare) fails
// the request with an error naming the route and the violation.
var openapiTransport = func() *openapitest.Transport {
	t, err := openapitest.NewTransport(nil)
	if err != nil {
		panic(err)
	}
	return t
}()

// httpClient is the client of the e2e tests: every exchange with a Kairos
// is validated against doc/openapi.yaml.
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: openapiTransport}

func doHTTP(tb testing.TB, method, u, token string, body []byte, hdr map[string]string) *response {
	tb.Helper()
	r, err := tryHTTP(context.Background(), httpClient, method, u, token, body, hdr)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, u, err)
	}
	return r
}

func tryHTTP(ctx context.Context, c *http.Client, method, u, token string, body []byte, hdr map[string]string) (*response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("X-Token", token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{Method: method, URL: u, Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func (r *response) String() string {
	return fmt.Sprintf("%s %s → %d %s", r.Method, r.URL, r.Status, r.Body)
}

func (r *response) wantStatus(tb testing.TB, status int) {
	tb.Helper()
	if r.Status != status {
		tb.Fatalf("%v: want status %d", r, status)
	}
	if id := r.Header.Get("X-Request-ID"); len(id) != 26 {
		tb.Fatalf("%v: X-Request-ID %q, want a ULID", r, id)
	}
	if status != http.StatusNoContent {
		if ct := r.Header.Get("Content-Type"); ct != jsonContentType {
			tb.Fatalf("%v: Content-Type %q, want %q", r, ct, jsonContentType)
		}
	}
}

// wantBody checks the body byte for byte (so key order matters).
func (r *response) wantBody(tb testing.TB, want string) {
	tb.Helper()
	if string(r.Body) != want {
		tb.Fatalf("%s %s: body\n got %s\nwant %s", r.Method, r.URL, r.Body, want)
	}
}

func (r *response) decode(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		tb.Fatalf("%v: decode: %v", r, err)
	}
}

// jobJSON is a job as the API renders it.
type jobJSON struct {
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	JobID       string            `json:"job_id"`
	Msg         string            `json:"msg"`
	Namespace   string            `json:"namespace"`
	Queue       string            `json:"queue"`
	RemainTries int64             `json:"remain_tries"`
	TTL         int64             `json:"ttl"`
}

// render is the exact JSON lmstfy produces for j: keys sorted, "msg" only
// for consumed jobs.
func (j *jobJSON) render() string {
	str := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{"attributes":%s,"data":%s,"elapsed_ms":%d,"job_id":%s,`,
		str(j.Attributes), str(j.Data), j.ElapsedMS, str(j.JobID))
	if j.Msg != "" {
		fmt.Fprintf(&b, `"msg":%s,`, str(j.Msg))
	}
	fmt.Fprintf(&b, `"namespace":%s,"queue":%s,"remain_tries":%d,"ttl":%d}`,
		str(j.Namespace), str(j.Queue), j.RemainTries, j.TTL)
	return b.String()
}

// job decodes a single job and checks that the body is exactly lmstfy's
// rendering of it (key order, null attributes, base64 data).
func (r *response) job(tb testing.TB) *jobJSON {
	tb.Helper()
	var j jobJSON
	r.decode(tb, &j)
	r.wantBody(tb, j.render())
	return &j
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestE2EWalkthrough is the README's curl walk-through as HTTP calls:
// token → publish → consume → ACK → consume with ttr=1 and no ACK → dead
// letter → respawn → consume → ACK, with exact response bodies.
func TestE2EWalkthrough(t *testing.T) {
	e := startE2E(t)
	const q = "walk"

	// Publish and consume.
	id := e.publish(t, q, "", "hello")
	if info, err := engine.ParseJobID(id); err != nil || info.Version != 0 || info.Delay != 0 || len(id) != 26 || !strings.HasSuffix(id, "000000") {
		t.Fatalf("job id %q (%+v, %v): want a 26-character v0 ULID ending in 000000 (delay 0)", id, info, err)
	}
	r := e.do(t, http.MethodGet, q+"/size", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, `{"namespace":"e2e","queue":"walk","size":1}`)

	j := e.consume(t, q, "ttr=30")
	want := jobJSON{Attributes: nil, Data: []byte("hello"), ElapsedMS: j.ElapsedMS, JobID: id, Msg: "new job",
		Namespace: "e2e", Queue: q, RemainTries: 0, TTL: 86400}
	if j.render() != want.render() {
		t.Fatalf("consumed %s\nwant %s", j.render(), want.render())
	}
	if j.ElapsedMS < 0 || j.ElapsedMS > 5000 {
		t.Fatalf("elapsed_ms %d: want the few milliseconds since publish", j.ElapsedMS)
	}
	if !strings.Contains(j.render(), `"data":"`+b64("hello")+`"`) {
		t.Fatalf("data is not base64 of the body: %s", j.render())
	}
	e.ack(t, q, id)
	e.wantNoJob(t, q, "")
	// The job is gone for good: peek by ID is lmstfy's 404.
	r = e.do(t, http.MethodGet, q+"/job/"+id, "", nil, nil)
	r.wantStatus(t, http.StatusNotFound)
	r.wantBody(t, `{"error":"job not found"}`)

	// Consume with ttr=1 and no ACK: with one try the job goes to the dead
	// letter about 1 s later.
	id = e.publish(t, q, "tries=1", "dead soon")
	consumed := time.Now() // before the consume: its TTR cannot start earlier
	j = e.consume(t, q, "ttr=1")
	if j.JobID != id || j.RemainTries != 0 {
		t.Fatalf("consumed %+v, want job %s with remain_tries 0", j, id)
	}
	r = e.do(t, http.MethodGet, q+"/deadletter", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, `{"deadletter_head":"","deadletter_size":0,"namespace":"e2e","queue":"walk"}`)
	deadline := consumed.Add(3 * time.Second)
	for {
		r = e.do(t, http.MethodGet, q+"/deadletter", "", nil, nil)
		r.wantStatus(t, http.StatusOK)
		if string(r.Body) != `{"deadletter_head":"","deadletter_size":0,"namespace":"e2e","queue":"walk"}` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not in the dead letter 3 s after a ttr=1 consume")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if el := time.Since(consumed); el < 900*time.Millisecond {
		t.Fatalf("job reached the dead letter %v after consume, before its 1 s TTR", el)
	}
	r.wantBody(t, `{"deadletter_head":"`+id+`","deadletter_size":1,"namespace":"e2e","queue":"walk"}`)
	r = e.do(t, http.MethodGet, q+"/deadletter/size", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, `{"namespace":"e2e","queue":"walk","size":1}`)
	// Dead jobs lose their TTL (peek job shows ttl 0).
	r = e.do(t, http.MethodGet, q+"/job/"+id, "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	pj := r.job(t)
	if string(pj.Data) != "dead soon" || pj.TTL != 0 || pj.Msg != "" {
		t.Fatalf("peek of a dead job: %s, want its body with ttl 0 and no msg", pj.render())
	}
	e.wantNoJob(t, q, "")

	// Respawn, consume, ACK.
	r = e.do(t, http.MethodPut, q+"/deadletter", "limit=2&ttl=120", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, `{"count":1,"msg":"respawned"}`)
	r = e.do(t, http.MethodGet, q+"/deadletter", "", nil, nil)
	r.wantBody(t, `{"deadletter_head":"","deadletter_size":0,"namespace":"e2e","queue":"walk"}`)
	j = e.consume(t, q, "ttr=30&timeout=2")
	if j.JobID != id || string(j.Data) != "dead soon" || j.RemainTries != 0 || j.TTL < 119 || j.TTL > 120 {
		t.Fatalf("after respawn consumed %s, want job %s, body \"dead soon\", remain_tries 0, ttl ≈ 120", j.render(), id)
	}
	e.ack(t, q, id)
	e.wantNoJob(t, q, "")
	r = e.do(t, http.MethodGet, q+"/size", "", nil, nil)
	r.wantBody(t, `{"namespace":"e2e","queue":"walk","size":0}`)
}

// TestE2EErrors checks a few exact error bodies and their precedence.
func TestE2EErrors(t *testing.T) {
	e := startE2E(t)
	tests := []struct {
		name, method, url, token string
		body                     string
		status                   int
		want                     string
	}{
		{"no token", http.MethodPut, e.url("q", ""), "", "x", 401, `{"error":"token not found"}`},
		{"bad token", http.MethodPut, e.url("q", ""), "nope", "x", 401, `{"error":"invalid token"}`},
		{"token of another namespace", http.MethodGet, e.API + "/api/other/q", e.Token, "", 401, `{"error":"invalid token"}`},
		{"unknown pool", http.MethodGet, e.url("q", ""), "nopool:" + e.Token, "", 404, `{"error":"pool not found"}`},
		{"bad queue name", http.MethodPut, e.url("_q", ""), e.Token, "x", 400, `{"error":"queue name contains forbidden characters"}`},
		{"bad delay", http.MethodPut, e.url("q", "delay=-1"), e.Token, "x", 400, `{"error":"invalid delay"}`},
		{"ttl shorter than delay", http.MethodPut, e.url("q", "delay=5&ttl=2"), e.Token, "x", 400, `{"error":"ttl is shorter than delay"}`},
		{"zero tries", http.MethodPut, e.url("q", "tries=0"), e.Token, "x", 400, `{"error":"tries shouldn't be zero"}`},
		{"bad count", http.MethodGet, e.url("q", "count=101"), e.Token, "", 400, `{"error":"invalid count"}`},
		{"bulk not an array", http.MethodPut, e.url("q/bulk", ""), e.Token, `{"a":1}`, 400, `{"error":"request body should be an array of objects"}`},
		{"bulk empty", http.MethodPut, e.url("q/bulk", ""), e.Token, `[]`, 400, `{"error":"no jobs"}`},
		{"body too large", http.MethodPut, e.url("q", ""), e.Token, strings.Repeat("x", 1<<20+1), 413, `{"error":"body too large"}`},
		{"peek empty queue", http.MethodGet, e.url("empty/peek", ""), e.Token, "", 404, `{"error":"the queue is empty"}`},
		{"no route", http.MethodPost, e.url("q", ""), e.Token, "", 404, `{"error":"api not found"}`},
		{"size needs no token", http.MethodGet, e.url("q/size", ""), "", "", 200, `{"namespace":"e2e","queue":"q","size":0}`},
		{"ack of an unknown job", http.MethodDelete, e.url("q/job/01ARZ3NDEKTSV4RRFFQ69G5FAV", ""), e.Token, "", 204, ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := doHTTP(t, tc.method, tc.url, tc.token, body, nil)
			r.wantStatus(t, tc.status)
			r.wantBody(t, tc.want)
		})
	}
}

// TestE2EBulkPublish: each consumed body is the raw JSON text of its array
// element (spec 3.4), in order.
func TestE2EBulkPublish(t *testing.T) {
	e := startE2E(t)
	const q = "bulk"
	elems := []string{`"hello msg"`, `123456`, `{"msg":"success"}`, `["foo","bar"]`, `true`}
	r := e.do(t, http.MethodPut, q+"/bulk", "", []byte("["+strings.Join(elems, ",")+"]"), nil)
	r.wantStatus(t, http.StatusCreated)
	var out struct {
		JobIDs []string `json:"job_ids"`
	}
	r.decode(t, &out)
	if len(out.JobIDs) != len(elems) {
		t.Fatalf("%v: want %d job IDs", r, len(elems))
	}
	r.wantBody(t, `{"job_ids":["`+strings.Join(out.JobIDs, `","`)+`"],"msg":"published"}`)
	for i, el := range elems {
		j := e.consume(t, q, "ttr=30")
		if j.JobID != out.JobIDs[i] || string(j.Data) != el {
			t.Fatalf("job %d: got %s %q, want %s %q", i, j.JobID, j.Data, out.JobIDs[i], el)
		}
		e.ack(t, q, j.JobID)
	}
	e.wantNoJob(t, q, "")

	// Whitespace inside an element is kept byte for byte; null is "null".
	r = e.do(t, http.MethodPut, q+"/bulk", "", []byte(`[ {"a": [1, 2]} ,null]`), nil)
	r.wantStatus(t, http.StatusCreated)
	for _, want := range []string{`{"a": [1, 2]}`, `null`} {
		if j := e.consume(t, q, "ttr=30"); string(j.Data) != want {
			t.Fatalf("body %q, want %q", j.Data, want)
		}
	}
}

// TestE2EAttributes: Enable-Job-Version: YES gives a v1 ID and attributes
// (keys lower-cased and cut to 32 bytes, values cut to 128); without it
// attributes are ignored.
func TestE2EAttributes(t *testing.T) {
	e := startE2E(t)
	const q = "attrs"
	longKey, longVal := strings.Repeat("K", 300), strings.Repeat("v", 300)
	r := e.do(t, http.MethodPut, q, "", []byte("with attrs"), map[string]string{
		"Enable-Job-Version":  "YES",
		"Job-Attr-Hello":      "world",
		"job-attr-foo":        "bar",
		"Job-Attr-" + longKey: longVal,
		"Job-Attr-Empty":      "",
	})
	r.wantStatus(t, http.StatusCreated)
	var out struct {
		JobID string `json:"job_id"`
	}
	r.decode(t, &out)
	if info, err := engine.ParseJobID(out.JobID); err != nil || info.Version != 1 || len(out.JobID) != 27 || out.JobID[0] != '1' {
		t.Fatalf("job id %q (%+v, %v): want a 27-character v1 ID", out.JobID, info, err)
	}
	j := e.consume(t, q, "ttr=30")
	want := map[string]string{"hello": "world", "foo": "bar", strings.Repeat("k", 32): strings.Repeat("v", 128)}
	if fmt.Sprint(j.Attributes) != fmt.Sprint(want) || string(j.Data) != "with attrs" || j.JobID != out.JobID {
		t.Fatalf("consumed %s, want attributes %v", j.render(), want)
	}
	// The JSON attributes object has sorted keys too.
	if !strings.Contains(string(e.do(t, http.MethodGet, q+"/job/"+j.JobID, "", nil, nil).Body),
		`"attributes":{"foo":"bar","hello":"world","`+strings.Repeat("k", 32)+`":"`+strings.Repeat("v", 128)+`"}`) {
		t.Fatalf("peek job: attributes not rendered as a sorted JSON object")
	}
	e.ack(t, q, j.JobID)

	for _, v := range []string{"yes", "NO", ""} {
		hdr := map[string]string{"Job-Attr-Hello": "world"}
		if v != "" {
			hdr["Enable-Job-Version"] = v
		}
		r = e.do(t, http.MethodPut, q, "", []byte("x"), hdr)
		r.wantStatus(t, http.StatusCreated)
		j := e.consume(t, q, "ttr=30")
		if v == "yes" {
			if len(j.JobID) != 27 || j.Attributes["hello"] != "world" {
				t.Fatalf("Enable-Job-Version: %s → %s, want v1 with attributes (case-insensitive YES)", v, j.render())
			}
		} else if len(j.JobID) != 26 || j.Attributes != nil || !strings.HasPrefix(j.render(), `{"attributes":null,`) {
			t.Fatalf("Enable-Job-Version: %q → %s, want a v0 job with null attributes", v, j.render())
		}
		e.ack(t, q, j.JobID)
	}

	hdr := map[string]string{"Enable-Job-Version": "YES"}
	for i := range 17 {
		hdr[fmt.Sprintf("Job-Attr-A%d", i)] = "x"
	}
	r = e.do(t, http.MethodPut, q, "", []byte("x"), hdr)
	r.wantStatus(t, http.StatusBadRequest)
	r.wantBody(t, `{"error":"too many attributes, cannot exceed 16"}`)
	delete(hdr, "Job-Attr-A16")
	e.do(t, http.MethodPut, q, "", []byte("x"), hdr).wantStatus(t, http.StatusCreated)
	if j := e.consume(t, q, "ttr=30"); len(j.Attributes) != 16 {
		t.Fatalf("16 attributes published, %d consumed", len(j.Attributes))
	}
}

// TestE2EMultiQueuePriority: in GET /api/ns/q1,q2,q3 the order is the
// priority, and "queue" names the queue the job came from.
func TestE2EMultiQueuePriority(t *testing.T) {
	e := startE2E(t)
	low := e.publish(t, "p3", "", "low")
	mid := e.publish(t, "p2", "", "mid")
	high := e.publish(t, "p1", "", "high")
	for _, want := range []struct{ id, queue string }{{high, "p1"}, {mid, "p2"}, {low, "p3"}} {
		j := e.consume(t, "p1,p2,p3", "ttr=30")
		if j.JobID != want.id || j.Queue != want.queue || j.Namespace != "e2e" {
			t.Fatalf("consumed %s from %s, want %s from %s", j.JobID, j.Queue, want.id, want.queue)
		}
	}
	e.wantNoJob(t, "p1,p2,p3", "")

	// count > 1 drains higher priorities first and answers an array.
	var ids []string
	for _, q := range []string{"p3", "p2", "p3", "p1"} {
		ids = append(ids, e.publish(t, q, "", q))
	}
	r := e.do(t, http.MethodGet, "p1,p2,p3", "count=3&ttr=30", nil, nil)
	r.wantStatus(t, http.StatusOK)
	var jobs []jobJSON
	r.decode(t, &jobs)
	var rendered []string
	for _, j := range jobs {
		rendered = append(rendered, j.render())
	}
	r.wantBody(t, "["+strings.Join(rendered, ",")+"]")
	if len(jobs) != 3 || jobs[0].JobID != ids[3] || jobs[1].JobID != ids[1] || jobs[2].JobID != ids[0] {
		t.Fatalf("count=3 over p1,p2,p3: %s; want %s, %s, %s", r.Body, ids[3], ids[1], ids[0])
	}
	r = e.do(t, http.MethodGet, "p1,p2,p3", "count=3&ttr=30", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.decode(t, &jobs)
	if len(jobs) != 1 || jobs[0].JobID != ids[2] || !strings.HasPrefix(string(r.Body), "[") {
		t.Fatalf("second count=3: %s; want an array of the one job left (%s)", r.Body, ids[2])
	}
}

// TestE2ELongPollWakeup: a waiting consumer gets a job published to its
// queue at once, woken by the publish: within 500 ms here, half the
// waiters' 1 s sweep (a loaded -race run took 144 ms where a quiet one
// takes 2). The wake-up itself is tested with the sweep off in
// engine/rdb (TestInstancesSharePool, TestClusterWakeups), and its latency is a benchmark's.
func TestE2ELongPollWakeup(t *testing.T) {
	e := startE2E(t)
	for i := range 3 {
		got := make(chan *response, 1)
		go func() {
			r, err := tryHTTP(context.Background(), httpClient, http.MethodGet, e.url("wake", "ttr=30&timeout=10"), e.Token, nil, nil)
			if err != nil {
				t.Errorf("consume: %v", err)
			}
			got <- r
		}()
		time.Sleep(300 * time.Millisecond) // let the consumer start waiting
		start := time.Now()
		id := e.publish(t, "wake", "", fmt.Sprint("wake ", i))
		r := <-got
		lat := time.Since(start)
		if r == nil {
			t.FailNow()
		}
		r.wantStatus(t, http.StatusOK)
		if j := r.job(t); j.JobID != id {
			t.Fatalf("woken consumer got %s, want %s", j.JobID, id)
		}
		t.Logf("publish → waiting consumer: %v", lat)
		if lat > 500*time.Millisecond {
			t.Fatalf("waiting consumer got the job %v after the publish started, want ≤ 500 ms", lat)
		}
	}
}

// TestE2EDelay: delayed jobs are delivered on time, to the millisecond:
// delay=1 (the API's unit is the second) and a 300 ms delay published
// through the app's engine; both consumed by a long-poll over HTTP.
func TestE2EDelay(t *testing.T) {
	e := startE2E(t)
	check := func(t *testing.T, queue string, delay time.Duration, publish func() string) {
		got := make(chan *response, 1)
		var start time.Time
		go func() {
			r, err := tryHTTP(context.Background(), httpClient, http.MethodGet, e.url(queue, "ttr=30&timeout=5"), e.Token, nil, nil)
			if err != nil {
				t.Errorf("consume: %v", err)
			}
			got <- r
		}()
		time.Sleep(100 * time.Millisecond)
		start = time.Now()
		id := publish()
		r := <-got
		lat := time.Since(start)
		if r == nil {
			t.FailNow()
		}
		r.wantStatus(t, http.StatusOK)
		if j := r.job(t); j.JobID != id {
			t.Fatalf("got %s, want %s", j.JobID, id)
		}
		t.Logf("delay %v delivered after %v", delay, lat)
		if lat < delay || lat > delay+lateSlack {
			t.Fatalf("delay %v: delivered after %v, want within [%v, %v]", delay, lat, delay, delay+lateSlack)
		}
	}
	t.Run("delay=1 over HTTP", func(t *testing.T) {
		check(t, "delay1s", time.Second, func() string {
			id := e.publish(t, "delay1s", "delay=1", "one second")
			if info, err := engine.ParseJobID(id); err != nil || info.Delay != time.Second {
				t.Fatalf("job id %s: delay %v (%v), want 1s embedded", id, info.Delay, err)
			}
			return id
		})
	})
	t.Run("300ms via the engine", func(t *testing.T) {
		check(t, "delay300ms", 300*time.Millisecond, func() string {
			id, err := e.App.Engines[config.DefaultPoolName].Publish(context.Background(), &engine.PublishRequest{
				Namespace: e.NS, Queue: "delay300ms", Body: []byte("300 ms"), TTL: time.Hour,
				Delay: 300 * time.Millisecond, Tries: 1,
			})
			if err != nil {
				t.Fatalf("Publish: %v", err)
			}
			return id
		})
	})
}

// TestE2EGracefulShutdown: stopping the server answers a waiting consumer
// with lmstfy's 404 at once, and Run returns.
func TestE2EGracefulShutdown(t *testing.T) {
	e := startE2E(t)
	got := make(chan *response, 1)
	go func() {
		r, err := tryHTTP(context.Background(), httpClient, http.MethodGet, e.url("bye", "ttr=30&timeout=60"), e.Token, nil, nil)
		if err != nil {
			t.Errorf("consume: %v", err)
		}
		got <- r
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- e.stop(10 * time.Second) }()
	var r *response
	select {
	case r = <-got:
	case <-time.After(2 * time.Second):
		t.Fatalf("waiting consumer not answered 2 s after shutdown began")
	}
	if r == nil {
		t.FailNow()
	}
	t.Logf("waiting consumer answered %v after shutdown began", time.Since(start))
	if lat := time.Since(start); lat > 500*time.Millisecond {
		t.Fatalf("waiting consumer answered %v after shutdown began, want at once", lat)
	}
	r.wantStatus(t, http.StatusNotFound)
	r.wantBody(t, `{"msg":"no job available"}`)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := tryHTTP(context.Background(), httpClient, http.MethodGet, e.url("bye/size", ""), "", nil, nil); err == nil {
		t.Fatalf("server still answers after Run returned")
	}
}

// TestE2EEmbedded: with no Redis address the server embeds an in-memory
// Redis and serves a whole round trip.
func TestE2EEmbedded(t *testing.T) {
	k := startKairos(t, redisConfig(""))
	e := &e2e{kairos: k, NS: "emb", Token: k.newToken(t, "emb")}
	id := e.publish(t, "q", "", "in memory")
	j := e.consume(t, "q", "ttr=30&timeout=1")
	if j.JobID != id || string(j.Data) != "in memory" {
		t.Fatalf("consumed %s, want %s", j.render(), id)
	}
	e.ack(t, "q", id)
	e.wantNoJob(t, "q", "")
	id = e.publish(t, "q", "delay=1", "later")
	if j := e.consume(t, "q", "ttr=30&timeout=3"); j.JobID != id {
		t.Fatalf("delayed job on the embedded store: got %s, want %s", j.JobID, id)
	}
}

// TestE2EPools: a token's "pool:" prefix routes its namespace to that
// pool's Redis; the same namespace in another pool is another world.
func TestE2EPools(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	cfg := redisConfig(rs.Addr)
	cfg.Pool["b"] = config.RedisConf{Addr: rs.Addr, DB: 1}
	k := startKairos(t, cfg)
	def := &e2e{kairos: k, Redis: rs, NS: "pools", Token: k.newToken(t, "pools")}

	r := doHTTP(t, http.MethodPost, k.Admin+"/token/pools?pool=b&description=in-b", "", nil, nil)
	r.wantStatus(t, http.StatusCreated)
	var out struct{ Token string }
	r.decode(t, &out)
	if !strings.HasPrefix(out.Token, "b:") || len(out.Token) != 28 {
		t.Fatalf("token in pool b: %q, want \"b:\" + a ULID", out.Token)
	}
	inB := &e2e{kairos: k, Redis: rs, NS: "pools", Token: out.Token}
	r = doHTTP(t, http.MethodGet, k.Admin+"/token/pools?pool=b", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, "{\n    \"tokens\": {\n        \""+out.Token+"\": \"in-b\"\n    }\n}")
	r = doHTTP(t, http.MethodGet, k.Admin+"/pools", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.wantBody(t, "[\n    \"b\",\n    \"default\"\n]")

	id := inB.publish(t, "q", "", "in pool b")
	def.wantNoJob(t, "q", "")
	if j := inB.consume(t, "q", "ttr=30"); j.JobID != id || string(j.Data) != "in pool b" {
		t.Fatalf("consumed %s from pool b, want %s", j.render(), id)
	}
	// The default pool's token is not valid in pool b, nor b's in default.
	r = doHTTP(t, http.MethodGet, def.url("q", ""), "b:"+def.Token, nil, nil)
	r.wantStatus(t, http.StatusUnauthorized)
	r.wantBody(t, `{"error":"invalid token"}`)
	r = doHTTP(t, http.MethodGet, def.url("q", ""), strings.TrimPrefix(out.Token, "b:"), nil, nil)
	r.wantStatus(t, http.StatusUnauthorized)
	r = doHTTP(t, http.MethodGet, def.url("q", ""), "default:"+def.Token, nil, nil)
	r.wantStatus(t, http.StatusNotFound)
	r.wantBody(t, `{"msg":"no job available"}`)
}

// TestE2EDurabilityCheck: with RequireDurableRedis the app refuses a Redis
// that can lose jobs (spec 11: appendonly no, an evicting policy); without
// it the app starts and warns.
func TestE2EDurabilityCheck(t *testing.T) {
	tests := []struct {
		name string
		opts redistest.Options
		ok   bool
	}{
		{"appendonly no", redistest.Options{}, false},
		{"allkeys-lru", redistest.Options{AppendOnly: true, Extra: []string{"maxmemory-policy allkeys-lru"}}, false},
		{"durable", redistest.Options{AppendOnly: true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.StartWith(t, tc.opts)
			cfg := redisConfig(rs.Addr)
			cfg.Kairos.RequireDurableRedis = true
			a, err := app.New(context.Background(), cfg, app.Options{Logger: testLogger(t)})
			if tc.ok {
				if err != nil {
					t.Fatalf("app.New on a durable Redis: %v", err)
				}
				// Run closes what New opened.
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if err := a.Run(ctx); err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if !errors.Is(err, app.ErrNotDurable) {
				t.Fatalf("app.New with RequireDurableRedis on a %s Redis: %v, want ErrNotDurable", tc.name, err)
			}
			// Without RequireDurableRedis it only warns.
			k := startKairos(t, redisConfig(rs.Addr))
			k.newToken(t, "warned")
		})
	}
}
