package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// End-to-end tests of the Kairos extensions (GitHub issue #3, doc/API.md
// "Kairos extensions"), over real HTTP against a real redis-server: every
// item of the issue, with exact response bodies where they are known.

const extHeader = "X-Kairos-Extensions"

var extOn = map[string]string{extHeader: "1"}

// xJob is a consumed job with its receipt (keys in the server's order).
type xJob struct {
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	JobID       string            `json:"job_id"`
	Msg         string            `json:"msg"`
	Namespace   string            `json:"namespace"`
	Queue       string            `json:"queue"`
	Receipt     string            `json:"receipt"`
	RemainTries int64             `json:"remain_tries"`
	TTL         int64             `json:"ttl"`
}

// xDetail is a job with the inspection fields (keys in the server's order).
type xDetail struct {
	// Attempts is the attempt history (issue #33), on peek job only.
	Attempts    *[]map[string]any `json:"attempts,omitempty"`
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	DeadAtMS    int64             `json:"dead_at_ms"`
	DeadReason  string            `json:"dead_reason"`
	Deliveries  int               `json:"deliveries"`
	DueAtMS     int64             `json:"due_at_ms"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	JobID       string            `json:"job_id"`
	LastError   string            `json:"last_error,omitempty"`
	Namespace   string            `json:"namespace"`
	Priority    int               `json:"priority"`
	Queue       string            `json:"queue"`
	RemainTries int64             `json:"remain_tries"`
	State       string            `json:"state"`
	TTL         int64             `json:"ttl"`
}

// exact decodes the body into v and checks that re-encoding v gives the
// body byte for byte: same keys, same order, nothing more.
func (r *response) exact(tb testing.TB, v any) {
	tb.Helper()
	r.decode(tb, v)
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	r.wantBody(tb, string(b))
}

// consumeX consumes one job asking for the receipt.
func (e *e2e) consumeX(tb testing.TB, queue, q string) *xJob {
	tb.Helper()
	r := e.do(tb, http.MethodGet, queue, q, nil, extOn)
	r.wantStatus(tb, http.StatusOK)
	var j xJob
	r.exact(tb, &j)
	if len(j.Receipt) != 16 || strings.Trim(j.Receipt, "0123456789abcdef") != "" || j.Msg != "new job" {
		tb.Fatalf("consumed %s: want a 16-hex-digit receipt", r.Body)
	}
	return &j
}

// inspect peeks a job with the inspection fields.
func (e *e2e) inspect(tb testing.TB, queue, id string) *xDetail {
	tb.Helper()
	r := e.do(tb, http.MethodGet, queue+"/job/"+id, "", nil, extOn)
	r.wantStatus(tb, http.StatusOK)
	var d xDetail
	r.exact(tb, &d)
	return &d
}

// admin calls the admin API.
func (e *e2e) admin(tb testing.TB, method, path, body string) *response {
	tb.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return doHTTP(tb, method, e.Admin+path, "", b, nil)
}

func (e *e2e) setQueueConfig(tb testing.TB, queue, body, want string) {
	tb.Helper()
	r := e.admin(tb, http.MethodPut, "/queue/"+e.NS+"/"+queue+"/config", body)
	r.wantStatus(tb, http.StatusOK)
	r.wantBody(tb, want)
}

// want checks a response's status and exact body.
func want(tb testing.TB, r *response, status int, body string) {
	tb.Helper()
	r.wantStatus(tb, status)
	r.wantBody(tb, body)
}

// consumeWithin long-polls one job (with its receipt) and returns it and
// how long it took to come.
func (e *e2e) consumeWithin(tb testing.TB, queue string, wait time.Duration, q string) (*xJob, time.Duration) {
	tb.Helper()
	start := time.Now()
	if q != "" {
		q = "&" + q
	}
	j := e.consumeX(tb, queue, fmt.Sprintf("timeout_ms=%d%s", wait.Milliseconds(), q))
	return j, time.Since(start)
}

// TestE2EExtRelease (issue item 1): receipts, release now or later,
// spending a try or not, and no release or ACK by a stale delivery.
func TestE2EExtRelease(t *testing.T) {
	e := startE2E(t)
	const q = "nack"
	id := e.publish(t, q, "tries=3", "work")

	// The receipt is only there when asked for: lmstfy's body otherwise.
	first := e.consumeX(t, q, "ttr=30")
	if first.JobID != id || first.RemainTries != 2 || string(first.Data) != "work" {
		t.Fatalf("consumed %+v", first)
	}
	// Release at once, keeping the try.
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+first.Receipt+"&keep_try=true", nil, nil), http.StatusNoContent, "")
	// The receipt is spent.
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+first.Receipt, nil, nil), http.StatusConflict, `{"error":"stale receipt"}`)
	second := e.consume(t, q, "ttr=30") // lmstfy's consume, exact lmstfy body
	if second.JobID != id || second.RemainTries != 2 {
		t.Fatalf("after a keep_try release: %s, want remain_tries 2 again", second.render())
	}
	third := e.inspect(t, q, id)
	if third.State != "in_flight" || third.Deliveries != 2 || third.RemainTries != 2 {
		t.Fatalf("inspected %+v", third)
	}
	// The stale delivery can neither ACK nor touch the new one.
	want(t, e.do(t, http.MethodDelete, q+"/job/"+id, "receipt="+first.Receipt, nil, nil), http.StatusConflict, `{"error":"stale receipt"}`)
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/touch", "receipt="+first.Receipt+"&ttr=60", nil, nil), http.StatusConflict, `{"error":"stale receipt"}`)
	// lmstfy's ACK by ID stays unconditional.
	e.ack(t, q, id)
	want(t, e.do(t, http.MethodDelete, q+"/job/"+id, "receipt="+first.Receipt, nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+first.Receipt, nil, nil), http.StatusNotFound, `{"error":"job not found"}`)

	// After a TTR expiry and a redelivery, the first receipt is stale.
	id = e.publish(t, q, "tries=3", "slow")
	d1 := e.consumeX(t, q, "ttr_ms=100")
	d2, _ := e.consumeWithin(t, q, 3*time.Second, "ttr=30")
	if d2.JobID != id || d2.Receipt == d1.Receipt || d2.RemainTries != 1 {
		t.Fatalf("redelivery %+v after %+v", d2, d1)
	}
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+d1.Receipt, nil, nil), http.StatusConflict, `{"error":"stale receipt"}`)
	// Released with a delay, spending the try.
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+d2.Receipt+"&delay_ms=600", nil, nil), http.StatusNoContent, "")
	if d := e.inspect(t, q, id); d.State != "delayed" || d.RemainTries != 1 || d.DueAtMS < time.Now().UnixMilli() {
		t.Fatalf("released job %+v, want delayed with 1 try", d)
	}
	d3, took := e.consumeWithin(t, q, 3*time.Second, "ttr=30")
	if d3.JobID != id || d3.RemainTries != 0 || took < 400*time.Millisecond {
		t.Fatalf("after release delay_ms=600: %+v after %v", d3, took)
	}
	// ACK with the current receipt.
	want(t, e.do(t, http.MethodDelete, q+"/job/"+id, "receipt="+d3.Receipt, nil, nil), http.StatusNoContent, "")
	want(t, e.do(t, http.MethodDelete, q+"/job/"+id, "receipt="+d3.Receipt, nil, nil), http.StatusNotFound, `{"error":"job not found"}`)

	// A nack of the last try sends the job to the dead letter at once.
	id = e.publish(t, q, "tries=1", "last")
	d := e.consumeX(t, q, "ttr=30")
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+d.Receipt+"&delay=0", nil, nil), http.StatusNoContent, "")
	if dj := e.inspect(t, q, id); dj.State != "dead" || dj.DeadReason != "nacked" || dj.DeadAtMS == 0 {
		t.Fatalf("nacked last try: %+v", dj)
	}

	// Bad input.
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "", nil, nil), http.StatusBadRequest, `{"error":"missing receipt"}`)
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt=nothex", nil, nil), http.StatusBadRequest, `{"error":"invalid receipt"}`)
	want(t, e.do(t, http.MethodPut, q+"/job/"+id+"/release", "receipt="+d.Receipt+"&keep_try=perhaps", nil, nil), http.StatusBadRequest, `{"error":"invalid keep_try"}`)
}

// TestE2EExtBackoff (item 2): a ladder applied on TTR expiry and on a nack
// without a delay; the default stays lmstfy's (back right after the TTR).
func TestE2EExtBackoff(t *testing.T) {
	e := startE2E(t)
	r := e.admin(t, http.MethodGet, "/queue/e2e/ladder/config", "")
	want(t, r, http.StatusOK, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`)
	e.setQueueConfig(t, "ladder", `{"backoff":"400ms,800ms"}`, `{"backoff":"400ms,800ms","dead_ttl_ms":0,"paused":false,"shards":1}`)
	want(t, e.admin(t, http.MethodPut, "/queue/e2e/ladder/config", `{"backoff":"10s,soon"}`), http.StatusBadRequest,
		`{"error":"invalid backoff \"10s,soon\": a ladder is a comma-separated list of durations such as 10s,30s,1m"}`)

	id := e.publish(t, "ladder", "tries=3", "b")
	e.consumeX(t, "ladder", "ttr_ms=100") // not ACKed: back after 100 ms + 400 ms
	start := time.Now()
	j, _ := e.consumeWithin(t, "ladder", 3*time.Second, "ttr=30")
	if took := time.Since(start); j.JobID != id || took < 400*time.Millisecond || took > 1500*time.Millisecond {
		t.Fatalf("retry after a TTR expiry came after %v, want ≈ 100 ms TTR + 400 ms backoff", took)
	}
	// A nack without a delay follows the policy: the second step.
	want(t, e.do(t, http.MethodPut, "ladder/job/"+id+"/release", "receipt="+j.Receipt, nil, nil), http.StatusNoContent, "")
	j, took := e.consumeWithin(t, "ladder", 3*time.Second, "ttr=30")
	if j.JobID != id || took < 700*time.Millisecond || took > 2*time.Second {
		t.Fatalf("retry after a nack came after %v, want ≈ 800 ms", took)
	}
	e.ack(t, "ladder", id)

	// Without a policy: right after the TTR.
	id = e.publish(t, "plain", "tries=2", "p")
	e.consumeX(t, "plain", "ttr_ms=100")
	start = time.Now()
	j, _ = e.consumeWithin(t, "plain", 3*time.Second, "ttr=30")
	if took := time.Since(start); j.JobID != id || took > 400*time.Millisecond {
		t.Fatalf("without a policy the retry came after %v, want right after the 100 ms TTR", took)
	}

	// Exponential and fixed policies are accepted and shown in text form.
	e.setQueueConfig(t, "plain", `{"backoff":"exponential:1s,factor=2,max=1m,jitter=0.1"}`,
		`{"backoff":"exponential:1s,factor=2,max=1m,jitter=0.1","dead_ttl_ms":0,"paused":false,"shards":1}`)
	e.setQueueConfig(t, "plain", `{"backoff":"fixed:30s"}`, `{"backoff":"fixed:30s","dead_ttl_ms":0,"paused":false,"shards":1}`)
}

// TestE2EExtTouch (item 3): touch extends the TTR of the current delivery.
func TestE2EExtTouch(t *testing.T) {
	e := startE2E(t)
	id := e.publish(t, "touch", "tries=2", "long work")
	j := e.consumeX(t, "touch", "ttr_ms=800")
	before := time.Now()
	r := e.do(t, http.MethodPut, "touch/job/"+id+"/touch", "receipt="+j.Receipt+"&ttr_ms=1500", nil, nil)
	r.wantStatus(t, http.StatusOK)
	var out struct {
		DueAtMS int64  `json:"due_at_ms"`
		JobID   string `json:"job_id"`
	}
	r.exact(t, &out)
	if out.JobID != id || out.DueAtMS < before.Add(1500*time.Millisecond).UnixMilli()-5 || out.DueAtMS > time.Now().Add(1600*time.Millisecond).UnixMilli() {
		t.Fatalf("touch answered %s", r.Body)
	}
	if d := e.inspect(t, "touch", id); d.State != "in_flight" || d.DueAtMS != out.DueAtMS {
		t.Fatalf("inspected %+v, want in flight due at %d", d, out.DueAtMS)
	}
	time.Sleep(1000 * time.Millisecond) // past the original 800 ms TTR
	e.wantNoJob(t, "touch", "")
	want(t, e.do(t, http.MethodDelete, "touch/job/"+id, "receipt="+j.Receipt, nil, nil), http.StatusNoContent, "")
	want(t, e.do(t, http.MethodPut, "touch/job/"+id+"/touch", "receipt="+j.Receipt+"&ttr=5", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
	want(t, e.do(t, http.MethodPut, "touch/job/"+id+"/touch", "receipt="+j.Receipt+"&ttr_ms=x", nil, nil), http.StatusBadRequest, `{"error":"invalid ttr_ms"}`)
}

// TestE2EExtMillis (item 4): delay_ms, ttl_ms, ttr_ms, timeout_ms, due_at.
func TestE2EExtMillis(t *testing.T) {
	e := startE2E(t)
	start := time.Now()
	id := e.publish(t, "ms", "delay_ms=250", "quarter second")
	j, _ := e.consumeWithin(t, "ms", 2*time.Second, "")
	if took := time.Since(start); j.JobID != id || took < 250*time.Millisecond || took > time.Second {
		t.Fatalf("delay_ms=250 delivered after %v", took)
	}
	e.ack(t, "ms", id)

	id = e.publish(t, "ms", "ttl_ms=800", "short-lived")
	if d := e.inspect(t, "ms", id); d.TTL != 1 || d.State != "ready" {
		t.Fatalf("ttl_ms=800: %+v, want ttl 1 (rounded)", d)
	}
	time.Sleep(950 * time.Millisecond)
	want(t, e.do(t, http.MethodGet, "ms/job/"+id, "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)

	// timeout_ms: the wait ends after 300 ms.
	start = time.Now()
	want(t, e.do(t, http.MethodGet, "ms", "timeout_ms=300", nil, nil), http.StatusNotFound, `{"msg":"no job available"}`)
	if took := time.Since(start); took < 300*time.Millisecond || took > time.Second {
		t.Fatalf("timeout_ms=300 waited %v", took)
	}

	// due_at as RFC 3339 and as Unix milliseconds.
	due := time.Now().Add(600 * time.Millisecond)
	id = e.publish(t, "ms", "due_at="+due.UTC().Format(time.RFC3339Nano), "at an instant")
	if d := e.inspect(t, "ms", id); d.State != "delayed" || d.DueAtMS < due.UnixMilli() || d.DueAtMS > due.UnixMilli()+50 {
		t.Fatalf("due_at: %+v, want delayed until %d", d, due.UnixMilli())
	}
	j, _ = e.consumeWithin(t, "ms", 3*time.Second, "")
	if j.JobID != id || time.Now().Before(due) {
		t.Fatalf("due_at job delivered before its instant")
	}
	due = time.Now().Add(300 * time.Millisecond)
	id = e.publish(t, "ms", "due_at="+strconv.FormatInt(due.UnixMilli(), 10), "unix ms")
	j, _ = e.consumeWithin(t, "ms", 3*time.Second, "")
	if j.JobID != id || time.Now().Before(due) {
		t.Fatalf("due_at (Unix ms) job delivered before its instant")
	}
	// In the past: now.
	id = e.publish(t, "ms", "due_at=2001-01-01T00:00:00Z", "overdue")
	if j := e.consumeX(t, "ms", ""); j.JobID != id {
		t.Fatalf("got %s", j.JobID)
	}
	want(t, e.do(t, http.MethodPut, "ms", "due_at=2001-01-01T00:00:00Z&delay=1", []byte("x"), nil), http.StatusBadRequest, `{"error":"due_at conflicts with delay"}`)
	want(t, e.do(t, http.MethodPut, "ms", "delay_ms=500&ttl_ms=100", []byte("x"), nil), http.StatusBadRequest, `{"error":"ttl is shorter than delay"}`)
	want(t, e.do(t, http.MethodPut, "ms", "due_at=soon", []byte("x"), nil), http.StatusBadRequest, `{"error":"invalid due_at"}`)
}

// TestE2EExtPriority (item 5): higher first, FIFO among equals, delayed
// jobs keep their priority; queues without priorities are untouched.
func TestE2EExtPriority(t *testing.T) {
	e := startE2E(t)
	const q = "prio"
	a := e.publish(t, q, "", "a")
	b := e.publish(t, q, "priority=5", "b")
	c := e.publish(t, q, "priority=5", "c")
	d := e.publish(t, q, "priority=9", "d")
	f := e.publish(t, q, "priority=7&delay_ms=200", "f")
	r := e.do(t, http.MethodGet, q+"/peek", "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	if p := r.job(t); p.JobID != d {
		t.Fatalf("peek %s, want the priority 9 job", p.JobID)
	}
	if x := e.inspect(t, q, b); x.Priority != 5 {
		t.Fatalf("inspected priority %d", x.Priority)
	}
	want(t, e.do(t, http.MethodGet, q+"/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"prio","size":4}`)
	time.Sleep(300 * time.Millisecond)
	for _, id := range []string{d, f, b, c, a} {
		if j := e.consume(t, q, "ttr=30"); j.JobID != id {
			t.Fatalf("consumed %s (%q), want %s", j.JobID, j.Data, id)
		}
	}
	want(t, e.do(t, http.MethodPut, q, "priority=256", []byte("x"), nil), http.StatusBadRequest, `{"error":"invalid priority"}`)
}

// TestE2EExtIdempotency (item 6): a job key makes a publish idempotent
// while the job lives; cancel by key.
func TestE2EExtIdempotency(t *testing.T) {
	e := startE2E(t)
	const q = "uniq"
	first := e.publish(t, q, "job_key=order-42", "once")
	want(t, e.do(t, http.MethodPut, q, "job_key=order-42", []byte("twice"), nil), http.StatusOK, `{"job_id":"`+first+`","msg":"duplicate job_key"}`)
	want(t, e.do(t, http.MethodPut, q, "", []byte("thrice"), map[string]string{"Idempotency-Key": "order-42"}), http.StatusOK,
		`{"job_id":"`+first+`","msg":"duplicate job_key"}`)
	want(t, e.do(t, http.MethodGet, q+"/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"uniq","size":1}`)
	want(t, e.do(t, http.MethodDelete, q+"/job_key/order-42", "", nil, nil), http.StatusOK, `{"job_id":"`+first+`","msg":"cancelled"}`)
	want(t, e.do(t, http.MethodDelete, q+"/job_key/order-42", "", nil, nil), http.StatusNotFound, `{"error":"job key not found"}`)
	e.wantNoJob(t, q, "")
	second := e.publish(t, q, "job_key=order-42", "again")
	if second == first {
		t.Fatal("a cancelled key still answered the old job")
	}
	// A key with a slash, cancelled with %2F.
	id := e.publish(t, q, "job_key=tenant%2F7", "slashed")
	want(t, e.do(t, http.MethodDelete, q+"/job_key/tenant%2F7", "", nil, nil), http.StatusOK, `{"job_id":"`+id+`","msg":"cancelled"}`)
	// The key lives as long as its job's TTL.
	e.publish(t, q, "job_key=short&ttl_ms=200", "short")
	time.Sleep(350 * time.Millisecond)
	e.publish(t, q, "job_key=short", "later")
	want(t, e.do(t, http.MethodPut, q+"/bulk", "job_key=k", []byte(`[1]`), nil), http.StatusBadRequest, `{"error":"job_key is not allowed in bulk publish"}`)
}

// webhookReceiver is an httptest server that checks each delivery's
// signature and answers failFirst failures before succeeding (-1: always
// fail).
type webhookReceiver struct {
	*httptest.Server
	secret    string
	failFirst int

	mu       sync.Mutex
	attempts []webhookAttempt
	problems []string
}

type webhookAttempt struct {
	at       time.Time
	delivery string
	body     string
	jobID    string
}

func newReceiver(t *testing.T, secret string, failFirst int) *webhookReceiver {
	w := &webhookReceiver{secret: secret, failFirst: failFirst}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get("X-Kairos-Timestamp")
		mac := hmac.New(sha256.New, []byte(w.secret))
		mac.Write([]byte(ts + "." + string(body)))
		sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		w.mu.Lock()
		defer w.mu.Unlock()
		if got := r.Header.Get("X-Kairos-Signature"); !hmac.Equal([]byte(got), []byte(sig)) {
			w.problems = append(w.problems, "bad signature "+got)
		}
		if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Second {
			w.problems = append(w.problems, "bad timestamp "+ts)
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/octet-stream" ||
			r.Header.Get("X-Kairos-Namespace") != "e2e" || r.Header.Get("X-Kairos-Queue") == "" {
			w.problems = append(w.problems, fmt.Sprintf("bad request %s %v", r.Method, r.Header))
		}
		w.attempts = append(w.attempts, webhookAttempt{time.Now(), r.Header.Get("X-Kairos-Delivery"), string(body), r.Header.Get("X-Kairos-Job-Id")})
		if w.failFirst < 0 || len(w.attempts) <= w.failFirst {
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.Close)
	return w
}

func (w *webhookReceiver) snapshot() ([]webhookAttempt, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]webhookAttempt(nil), w.attempts...), append([]string(nil), w.problems...)
}

// waitAttempts waits until the receiver saw n attempts.
func (w *webhookReceiver) waitAttempts(t *testing.T, n int) []webhookAttempt {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, problems := w.snapshot()
		if len(problems) > 0 {
			t.Fatalf("receiver: %v", problems)
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver saw %d attempts, want %d", len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue reads one series of the admin /metrics.
func (e *e2e) metricValue(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	r := e.admin(t, http.MethodGet, "/metrics", "")
	for _, line := range strings.Split(string(r.Body), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if match {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q", line)
			}
			return v
		}
	}
	return 0
}

// TestE2EExtWebhook (item 7): a push subscription POSTs each job, signed;
// failures are retried with the queue's backoff, then succeed; a receiver
// that always fails sends the job to the dead letter as webhook_failed.
func TestE2EExtWebhook(t *testing.T) {
	e := startE2E(t)
	flaky := newReceiver(t, "s3cret", 2)
	e.setQueueConfig(t, "hook", `{"backoff":"200ms,400ms"}`, `{"backoff":"200ms,400ms","dead_ttl_ms":0,"paused":false,"shards":1}`)
	r := e.admin(t, http.MethodPut, "/webhook/e2e/hook", `{"url":"`+flaky.URL+`/in","secret":"s3cret","concurrency":2,"ttr_ms":5000,"timeout_ms":2000}`)
	want(t, r, http.StatusOK, `{"concurrency":2,"namespace":"e2e","pool":"default","queue":"hook","secret":"REDACTED","timeout_ms":2000,"ttr_ms":5000,"url":"`+flaky.URL+`/in"}`)
	want(t, e.admin(t, http.MethodGet, "/webhook/e2e/hook", ""), http.StatusOK, string(r.Body))

	id := e.publish(t, "hook", "tries=3", "push me")
	got := flaky.waitAttempts(t, 3)
	for i, a := range got[:3] {
		if a.jobID != id || a.body != "push me" || a.delivery != strconv.Itoa(i+1) {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
	}
	if gap := got[1].at.Sub(got[0].at); gap < 200*time.Millisecond || gap > 2*time.Second {
		t.Fatalf("second attempt %v after the first, want the 200 ms backoff", gap)
	}
	if gap := got[2].at.Sub(got[1].at); gap < 400*time.Millisecond || gap > 2*time.Second {
		t.Fatalf("third attempt %v after the second, want the 400 ms backoff", gap)
	}
	// The 2xx was the ACK.
	deadline := time.Now().Add(5 * time.Second)
	for e.do(t, http.MethodGet, "hook/job/"+id, "", nil, nil).Status != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatal("job still there after a 2xx delivery")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.metricValue(t, "kairos_webhook_deliveries_total", `queue="hook"`, `result="http_error"`); got != 2 {
		t.Fatalf("http_error deliveries %v, want 2", got)
	}
	if got := e.metricValue(t, "kairos_webhook_deliveries_total", `queue="hook"`, `result="ok"`); got != 1 {
		t.Fatalf("ok deliveries %v, want 1", got)
	}
	if got := e.metricValue(t, "kairos_webhook_delivery_seconds_count", `queue="hook"`); got != 3 {
		t.Fatalf("delivery durations observed %v, want 3", got)
	}

	// A receiver that always fails: tries run out, the job is dead.
	broken := newReceiver(t, "other", -1)
	e.setQueueConfig(t, "doomed", `{"backoff":"fixed:100ms"}`, `{"backoff":"fixed:100ms","dead_ttl_ms":0,"paused":false,"shards":1}`)
	want(t, e.admin(t, http.MethodPut, "/webhook/e2e/doomed", `{"url":"`+broken.URL+`","secret":"other"}`), http.StatusOK,
		`{"concurrency":1,"namespace":"e2e","pool":"default","queue":"doomed","secret":"REDACTED","timeout_ms":10000,"ttr_ms":30000,"url":"`+broken.URL+`"}`)
	id = e.publish(t, "doomed", "tries=2", "never")
	broken.waitAttempts(t, 2)
	var page struct {
		Jobs       []xDetail `json:"jobs"`
		NextOffset int64     `json:"next_offset"`
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		r = e.do(t, http.MethodGet, "doomed/deadletter/jobs", "", nil, nil)
		r.wantStatus(t, http.StatusOK)
		r.exact(t, &page)
		if len(page.Jobs) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].JobID != id || page.Jobs[0].DeadReason != "webhook_failed" ||
		page.Jobs[0].Deliveries != 2 || string(page.Jobs[0].Data) != "never" || page.NextOffset != -1 {
		t.Fatalf("dead letter %s, want the job dead as webhook_failed after 2 deliveries", r.Body)
	}
	if got := e.metricValue(t, "kairos_webhook_deliveries_total", `queue="doomed"`, `result="http_error"`); got != 2 {
		t.Fatalf("doomed http_error deliveries %v, want 2", got)
	}

	// Listing and deleting subscriptions; a deleted one delivers no more.
	r = e.admin(t, http.MethodGet, "/webhooks", "")
	r.wantStatus(t, http.StatusOK)
	var subs []map[string]any
	r.decode(t, &subs)
	if len(subs) != 2 || subs[0]["queue"] != "doomed" || subs[1]["queue"] != "hook" {
		t.Fatalf("GET /webhooks: %s", r.Body)
	}
	want(t, e.admin(t, http.MethodDelete, "/webhook/e2e/hook", ""), http.StatusNoContent, "")
	want(t, e.admin(t, http.MethodDelete, "/webhook/e2e/hook", ""), http.StatusNotFound, `{"error":"webhook not found"}`)
	time.Sleep(1500 * time.Millisecond) // a worker's long poll ends within a second
	n := len(must(flaky.snapshot()))
	id = e.publish(t, "hook", "", "pull me")
	time.Sleep(300 * time.Millisecond)
	if m := len(must(flaky.snapshot())); m != n {
		t.Fatalf("a deleted subscription still delivered (%d → %d attempts)", n, m)
	}
	if j := e.consume(t, "hook", "ttr=30"); j.JobID != id {
		t.Fatalf("pull consumer got %s", j.JobID)
	}
	want(t, e.admin(t, http.MethodPut, "/webhook/e2e/hook", `{"url":"ftp://x","secret":"s"}`), http.StatusBadRequest,
		`{"error":"invalid webhook: url must be an absolute http or https URL without credentials"}`)
}

func must[T any](v T, _ []string) T { return v }

// killNacked publishes a job with one try, consumes it and nacks it: dead
// at once with the reason "nacked".
func (e *e2e) killNacked(t *testing.T, q, body string, hdr map[string]string) string {
	t.Helper()
	r := e.do(t, http.MethodPut, q, "tries=1", []byte(body), hdr)
	r.wantStatus(t, http.StatusCreated)
	var out struct {
		JobID string `json:"job_id"`
	}
	r.decode(t, &out)
	j := e.consumeX(t, q, "ttr=30")
	if j.JobID != out.JobID {
		t.Fatalf("consumed %s, want %s", j.JobID, out.JobID)
	}
	want(t, e.do(t, http.MethodPut, q+"/job/"+j.JobID+"/release", "receipt="+j.Receipt, nil, nil), http.StatusNoContent, "")
	return out.JobID
}

// TestE2EExtDeadLetter (item 8): browse dead jobs page by page with their
// bodies, attributes, reasons and times; respawn or delete one, or all;
// the dead TTL.
func TestE2EExtDeadLetter(t *testing.T) {
	e := startE2E(t)
	const q = "graveyard"
	ids := []string{
		e.killNacked(t, q, "zero", map[string]string{"Enable-Job-Version": "YES", "Job-Attr-Trace": "t0"}),
		e.killNacked(t, q, "one", nil),
	}
	// One more dies of its TTR.
	ttrID := e.publish(t, q, "tries=1", "two")
	e.consumeX(t, q, "ttr_ms=50")
	deadline := time.Now().Add(3 * time.Second)
	for e.inspect(t, q, ttrID).State != "dead" {
		if time.Now().After(deadline) {
			t.Fatal("TTR-expired job not dead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ids = append(ids, ttrID)

	var page struct {
		Jobs       []xDetail `json:"jobs"`
		NextOffset int64     `json:"next_offset"`
	}
	r := e.do(t, http.MethodGet, q+"/deadletter/jobs", "limit=2", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.exact(t, &page)
	if len(page.Jobs) != 2 || page.NextOffset != 2 || page.Jobs[0].JobID != ids[0] || page.Jobs[1].JobID != ids[1] {
		t.Fatalf("page 1: %s", r.Body)
	}
	j0 := page.Jobs[0]
	if string(j0.Data) != "zero" || j0.Attributes["trace"] != "t0" || j0.State != "dead" || j0.DeadReason != "nacked" ||
		j0.DeadAtMS <= 0 || j0.DeadAtMS > time.Now().UnixMilli() || j0.Deliveries != 1 || j0.TTL != 0 {
		t.Fatalf("dead job %+v", j0)
	}
	r = e.do(t, http.MethodGet, q+"/deadletter/jobs", "offset=2&limit=2", nil, nil)
	r.wantStatus(t, http.StatusOK)
	r.exact(t, &page)
	if len(page.Jobs) != 1 || page.NextOffset != -1 || page.Jobs[0].JobID != ttrID || page.Jobs[0].DeadReason != "ttr_expired" {
		t.Fatalf("page 2: %s", r.Body)
	}
	want(t, e.do(t, http.MethodGet, q+"/deadletter/jobs", "limit=101", nil, nil), http.StatusBadRequest, `{"error":"invalid limit"}`)

	// Respawn one by ID; it is no longer dead.
	want(t, e.do(t, http.MethodPut, q+"/deadletter/job/"+ids[1], "ttl=60", nil, nil), http.StatusNoContent, "")
	want(t, e.do(t, http.MethodPut, q+"/deadletter/job/"+ids[1], "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
	if j := e.consume(t, q, "ttr=30"); j.JobID != ids[1] || j.TTL > 60 || j.TTL < 59 {
		t.Fatalf("respawned %s", j.render())
	}
	e.ack(t, q, ids[1])
	// Delete one by ID.
	want(t, e.do(t, http.MethodDelete, q+"/deadletter/job/"+ids[0], "", nil, nil), http.StatusNoContent, "")
	want(t, e.do(t, http.MethodDelete, q+"/deadletter/job/"+ids[0], "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
	want(t, e.do(t, http.MethodGet, q+"/deadletter", "", nil, nil), http.StatusOK,
		`{"deadletter_head":"`+ttrID+`","deadletter_size":1,"namespace":"e2e","queue":"graveyard"}`)

	// All: respawn everything, kill again, delete everything.
	more := []string{e.killNacked(t, q, "a", nil), e.killNacked(t, q, "b", nil)}
	want(t, e.do(t, http.MethodPut, q+"/deadletter", "limit=all", nil, nil), http.StatusOK, `{"count":3,"msg":"respawned"}`)
	for range 3 {
		j := e.consumeX(t, q, "ttr=30")
		want(t, e.do(t, http.MethodPut, q+"/job/"+j.JobID+"/release", "receipt="+j.Receipt, nil, nil), http.StatusNoContent, "")
	}
	want(t, e.do(t, http.MethodGet, q+"/deadletter/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"graveyard","size":3}`)
	want(t, e.do(t, http.MethodDelete, q+"/deadletter", "limit=all", nil, nil), http.StatusNoContent, "")
	want(t, e.do(t, http.MethodGet, q+"/deadletter/size", "", nil, nil), http.StatusOK, `{"namespace":"e2e","queue":"graveyard","size":0}`)
	for _, id := range append(more, ttrID) {
		want(t, e.do(t, http.MethodGet, q+"/job/"+id, "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
	}

	// A dead TTL: dead jobs expire.
	e.setQueueConfig(t, "brief", `{"dead_ttl_ms":800}`, `{"backoff":"none","dead_ttl_ms":800,"paused":false,"shards":1}`)
	id := e.killNacked(t, "brief", "fleeting", nil)
	if d := e.inspect(t, "brief", id); d.State != "dead" || d.TTL != 1 {
		t.Fatalf("dead job with an 800 ms dead TTL: %+v", d)
	}
	time.Sleep(950 * time.Millisecond)
	want(t, e.do(t, http.MethodGet, "brief/job/"+id, "", nil, nil), http.StatusNotFound, `{"error":"job not found"}`)
	want(t, e.do(t, http.MethodGet, "brief/deadletter/jobs", "", nil, nil), http.StatusOK, `{"jobs":[],"next_offset":-1}`)
}

// TestE2EExtPause (item 9): a paused queue hands out nothing and accepts
// publishes; resuming serves waiting consumers at once.
func TestE2EExtPause(t *testing.T) {
	e := startE2E(t)
	want(t, e.do(t, http.MethodPut, "paws/pause", "", nil, nil), http.StatusNoContent, "")
	want(t, e.admin(t, http.MethodGet, "/queue/e2e/paws/config", ""), http.StatusOK, `{"backoff":"none","dead_ttl_ms":0,"paused":true,"shards":1}`)
	id := e.publish(t, "paws", "", "waiting")
	e.wantNoJob(t, "paws", "")
	got := make(chan *response, 1)
	go func() {
		r, err := tryHTTP(context.Background(), httpClient, http.MethodGet, e.url("paws", "ttr=30&timeout=5"), e.Token, nil, nil)
		if err != nil {
			t.Errorf("consume: %v", err)
		}
		got <- r
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	want(t, e.do(t, http.MethodPut, "paws/resume", "", nil, nil), http.StatusNoContent, "")
	r := <-got
	if r == nil {
		t.FailNow()
	}
	r.wantStatus(t, http.StatusOK)
	if j := r.job(t); j.JobID != id {
		t.Fatalf("after resume got %s", j.JobID)
	}
	if lat := time.Since(start); lat > 500*time.Millisecond {
		t.Fatalf("waiting consumer served %v after resume", lat)
	}
	want(t, e.admin(t, http.MethodGet, "/queue/e2e/paws/config", ""), http.StatusOK, `{"backoff":"none","dead_ttl_ms":0,"paused":false,"shards":1}`)
}

// TestE2EExtInspection (item 10): GET …/job/:id with X-Kairos-Extensions
// reports the state, remaining tries and due time through a job's life.
func TestE2EExtInspection(t *testing.T) {
	e := startE2E(t)
	const q = "look"
	t0 := time.Now()
	id := e.publish(t, q, "delay_ms=600&tries=2&ttl=600", "inspect me")
	t1 := time.Now()
	d := e.inspect(t, q, id)
	wantD := xDetail{Attempts: &[]map[string]any{}, Data: []byte("inspect me"), DueAtMS: d.DueAtMS, ElapsedMS: d.ElapsedMS, JobID: id, Namespace: "e2e",
		Queue: q, RemainTries: 2, State: "delayed", TTL: 600}
	if d.TTL == 599 { // a second boundary passed since publish
		wantD.TTL = 599
	}
	if !reflect.DeepEqual(*d, wantD) {
		t.Fatalf("delayed: %+v\nwant %+v", *d, wantD)
	}
	if due := time.UnixMilli(d.DueAtMS); due.Before(t0.Add(599*time.Millisecond)) || due.After(t1.Add(601*time.Millisecond)) {
		t.Fatalf("due_at_ms %d is not the publish time + 600 ms", d.DueAtMS)
	}
	time.Sleep(time.Until(time.UnixMilli(d.DueAtMS)) + 50*time.Millisecond)
	if d = e.inspect(t, q, id); d.State != "ready" || d.DueAtMS != 0 || d.RemainTries != 2 || d.Deliveries != 0 {
		t.Fatalf("ready: %+v", d)
	}
	e.consumeX(t, q, "ttr_ms=600")
	if d = e.inspect(t, q, id); d.State != "in_flight" || d.RemainTries != 1 || d.Deliveries != 1 || d.DueAtMS < time.Now().UnixMilli() {
		t.Fatalf("in flight: %+v", d)
	}
	// lmstfy's peek job (no header) is unchanged, and reports the real
	// remaining tries (lmstfy says 0).
	r := e.do(t, http.MethodGet, q+"/job/"+id, "", nil, nil)
	r.wantStatus(t, http.StatusOK)
	if j := r.job(t); j.RemainTries != 1 {
		t.Fatalf("lmstfy peek: %s", j.render())
	}
	// Redelivered after the TTR, then dead after the last try.
	j, _ := e.consumeWithin(t, q, 3*time.Second, "ttr_ms=100")
	if j.JobID != id || j.RemainTries != 0 {
		t.Fatalf("redelivered %+v", j)
	}
	deadline := time.Now().Add(3 * time.Second)
	for d = e.inspect(t, q, id); d.State != "dead"; d = e.inspect(t, q, id) {
		if time.Now().After(deadline) {
			t.Fatalf("not dead: %+v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.DeadReason != "ttr_expired" || d.DeadAtMS == 0 || d.Deliveries != 2 || d.RemainTries != 0 || d.DueAtMS != 0 || d.TTL != 0 {
		t.Fatalf("dead: %+v", d)
	}
	// Both deliveries ran out their TTR, newest first (issue #33).
	if d.Attempts == nil || len(*d.Attempts) != 2 || (*d.Attempts)[0]["outcome"] != "ttr_expired" || (*d.Attempts)[1]["outcome"] != "ttr_expired" {
		t.Fatalf("dead job's attempts: %+v", d.Attempts)
	}
	want(t, e.do(t, http.MethodGet, q+"/job/nope", "", nil, extOn), http.StatusNotFound, `{"error":"job not found"}`)
}
