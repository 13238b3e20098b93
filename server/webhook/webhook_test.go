package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

func TestNormalize(t *testing.T) {
	ok := Subscription{URL: "https://example.com/hook", Secret: "s"}
	tests := []struct {
		name   string
		mutate func(*Subscription)
		want   string // "" = valid
	}{
		{"defaults", func(*Subscription) {}, ""},
		{"http", func(s *Subscription) { s.URL = "http://127.0.0.1:9/x" }, ""},
		{"no url", func(s *Subscription) { s.URL = "" }, "url is required"},
		{"ftp", func(s *Subscription) { s.URL = "ftp://example.com" }, "absolute http or https"},
		{"relative", func(s *Subscription) { s.URL = "/hook" }, "absolute http or https"},
		{"credentials", func(s *Subscription) { s.URL = "https://u:p@example.com" }, "without credentials"},
		{"long url", func(s *Subscription) { s.URL = "https://example.com/" + strings.Repeat("a", MaxURLLength) }, "longer than"},
		{"no secret", func(s *Subscription) { s.Secret = "" }, "secret is required"},
		{"long secret", func(s *Subscription) { s.Secret = strings.Repeat("s", MaxSecretLength+1) }, "secret is longer"},
		{"concurrency 64", func(s *Subscription) { s.Concurrency = 64 }, ""},
		{"concurrency 65", func(s *Subscription) { s.Concurrency = 65 }, "concurrency must be 1..64"},
		{"negative concurrency", func(s *Subscription) { s.Concurrency = -1 }, "concurrency must be 1..64"},
		{"timeout = ttr", func(s *Subscription) { s.TTRMS, s.TimeoutMS = 1000, 1000 }, "shorter than ttr_ms"},
		{"timeout > ttr", func(s *Subscription) { s.TTRMS, s.TimeoutMS = 1000, 5000 }, "shorter than ttr_ms"},
		{"short ttr gets a shorter default timeout", func(s *Subscription) { s.TTRMS = 500 }, ""},
		{"negative ttr", func(s *Subscription) { s.TTRMS = -1 }, "ttr_ms must be"},
		{"ttr too long", func(s *Subscription) { s.TTRMS = MaxTTR.Milliseconds() + 1 }, "ttr_ms must be"},
		{"ttr 1 ms leaves no room for a timeout", func(s *Subscription) { s.TTRMS = 1 }, "ttr_ms must be 2..86400000"},
		{"ttr 2 ms", func(s *Subscription) { s.TTRMS = 2 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mutate(&s)
			err := s.Normalize()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Normalize: %v", err)
				}
				if s.Concurrency < 1 || s.TTRMS < 1 || s.TimeoutMS < 1 || s.TimeoutMS >= s.TTRMS {
					t.Fatalf("normalized %+v", s)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Normalize = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
	s := ok
	if err := s.Normalize(); err != nil || s.Concurrency != 1 || s.TTRMS != 30000 || s.TimeoutMS != 10000 {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s = Subscription{URL: "http://h", Secret: "x", TTRMS: 500}
	if err := s.Normalize(); err != nil || s.TimeoutMS != 499 {
		t.Fatalf("default timeout under a short ttr: %+v %v", s, err)
	}
}

// TestNormalizeGiven: a setting a request gave explicitly is checked as
// given, 0 included; only the absent ones take their defaults.
func TestNormalizeGiven(t *testing.T) {
	tests := []struct {
		name  string
		sub   Subscription
		given Given
		want  string // "" = valid
	}{
		{"nothing given", Subscription{}, Given{}, ""},
		{"concurrency 0", Subscription{}, Given{Concurrency: true}, "concurrency must be 1..64"},
		{"ttr 0", Subscription{}, Given{TTR: true}, "ttr_ms must be 2..86400000"},
		{"timeout 0", Subscription{}, Given{Timeout: true}, "timeout_ms must be at least 1"},
		{"all given", Subscription{Concurrency: 3, TTRMS: 2000, TimeoutMS: 1000}, Given{true, true, true}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.sub
			s.URL, s.Secret = "https://example.com/hook", "s"
			err := s.NormalizeGiven(tc.given)
			if tc.want == "" {
				if err != nil || s.Concurrency < 1 || s.TTRMS < 2 || s.TimeoutMS < 1 {
					t.Fatalf("NormalizeGiven = %v, %+v", err, s)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NormalizeGiven = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestSign(t *testing.T) {
	// Computed independently: python3 hmac.new(b"s3cret", b"1700000000.hello", sha256).
	const want = "sha256=babfa8b593140ee3160bea38210f8fea6712e1f6e073328eb52c4e965bc0ab8d"
	if got := Sign("s3cret", "1700000000", []byte("hello")); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !Verify("s3cret", "1700000000", []byte("hello"), want) {
		t.Fatal("Verify refused a good signature")
	}
	for _, bad := range []struct{ secret, ts, body, sig string }{
		{"other", "1700000000", "hello", want},
		{"s3cret", "1700000001", "hello", want},
		{"s3cret", "1700000000", "hello!", want},
		{"s3cret", "1700000000", "hello", strings.TrimPrefix(want, "sha256=")},
	} {
		if Verify(bad.secret, bad.ts, []byte(bad.body), bad.sig) {
			t.Errorf("Verify accepted %+v", bad)
		}
	}
}

func newStore(t testing.TB) (*Store, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return NewStore(c), m
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	st, mr := newStore(t)
	if _, err := st.Get(ctx, "default", "ns", "q"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of nothing: %v", err)
	}
	if err := st.Delete(ctx, "default", "ns", "q"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete of nothing: %v", err)
	}
	a := Subscription{Pool: "default", Namespace: "ns", Queue: "q", URL: "http://a", Secret: "x", Concurrency: 2, TTRMS: 1000, TimeoutMS: 500}
	b := Subscription{Pool: "b", Namespace: "ns", Queue: "q", URL: "http://b", Secret: "y", Concurrency: 1, TTRMS: 1000, TimeoutMS: 500}
	for _, s := range []Subscription{a, b} {
		if err := st.Put(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// The stored layout is what doc/keys.md says.
	if v := mr.HGet("webhooks", "default/ns/q"); v != `{"url":"http://a","secret":"x","concurrency":2,"ttr_ms":1000,"timeout_ms":500}` {
		t.Fatalf("stored %s", v)
	}
	if got, err := st.Get(ctx, "default", "ns", "q"); err != nil || got != a {
		t.Fatalf("Get = %+v %v", got, err)
	}
	mr.HSet("webhooks", "broken", "{")
	mr.HSet("webhooks", "x/y/z", "not json")
	list, err := st.List(ctx)
	if err == nil || len(list) != 2 || list[0] != b || list[1] != a {
		t.Fatalf("List = %+v, %v; want b, a and an error about the broken entries", list, err)
	}
	if err := st.Delete(ctx, "default", "ns", "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "default", "ns", "q"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
}

// fakeEngine hands out the jobs sent to its channel and records the ACKs
// and releases.
type fakeEngine struct {
	jobs chan *engine.Job

	mu       sync.Mutex
	acks     []string // id/receipt
	releases []engine.ReleaseRequest
	consumes atomic.Int64
	settled  chan struct{}
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{jobs: make(chan *engine.Job, 100), settled: make(chan struct{}, 100)}
}

func (f *fakeEngine) Consume(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	f.consumes.Add(1)
	if req.Count != 1 || req.Timeout <= 0 {
		return nil, errors.New("unexpected consume request")
	}
	select {
	case j := <-f.jobs:
		return []*engine.Job{j}, nil
	case <-time.After(req.Timeout):
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeEngine) Ack(_ context.Context, _, _, id, receipt string) error {
	f.mu.Lock()
	f.acks = append(f.acks, id+"/"+receipt)
	f.mu.Unlock()
	f.settled <- struct{}{}
	return nil
}

func (f *fakeEngine) Release(_ context.Context, r *engine.ReleaseRequest) error {
	f.mu.Lock()
	f.releases = append(f.releases, *r)
	f.mu.Unlock()
	f.settled <- struct{}{}
	return nil
}

func (f *fakeEngine) waitSettled(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-f.settled:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d deliveries settled", i, n)
		}
	}
}

func (f *fakeEngine) snapshot() ([]string, []engine.ReleaseRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.acks...), append([]engine.ReleaseRequest(nil), f.releases...)
}

type harness struct {
	m    *Manager
	eng  *fakeEngine
	reg  *prometheus.Registry
	stop func()
	done chan error
}

func startManager(t *testing.T, opts Options) *harness {
	t.Helper()
	st, _ := newStore(t)
	h := &harness{eng: newFakeEngine(), reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	opts.Registerer = h.reg
	if opts.ReloadInterval == 0 {
		opts.ReloadInterval = 50 * time.Millisecond
	}
	if opts.PollTimeout == 0 {
		opts.PollTimeout = 50 * time.Millisecond
	}
	m, err := NewManager(st, map[string]Engine{"default": h.eng}, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.done <- m.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-h.done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("Run did not return 5 s after its context was cancelled")
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) subscribe(t *testing.T, s Subscription) {
	t.Helper()
	s.Pool, s.Namespace, s.Queue = "default", "ns", "q"
	if s.Secret == "" {
		s.Secret = "s3cret"
	}
	if _, err := h.m.Put(context.Background(), s); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

func (h *harness) count(result string) float64 {
	var m dto.Metric
	if err := h.m.deliveries.WithLabelValues("default", "ns", "q", result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// observations is the number of delivery durations observed.
func (h *harness) observations() uint64 {
	var m dto.Metric
	if err := h.m.seconds.WithLabelValues("default", "ns", "q").(prometheus.Histogram).Write(&m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func job(id string, deliveries int, body string) *engine.Job {
	return &engine.Job{Namespace: "ns", Queue: "q", ID: id, Body: []byte(body), Receipt: "r-" + id, Deliveries: deliveries}
}

// TestDelivery: the POST carries the body and every documented header with
// a valid signature (X-Kairos-Group for a grouped job); a 2xx is ACKed with
// the delivery's receipt.
func TestDelivery(t *testing.T) {
	now := time.Unix(1700000000, 0)
	type seen struct {
		header http.Header
		body   string
		method string
	}
	got := make(chan seen, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Clone(), string(b), r.Method}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	h := startManager(t, Options{Now: func() time.Time { return now }})
	h.subscribe(t, Subscription{URL: recv.URL + "/hook"})
	j1 := job("J1", 3, "hello")
	j1.Group = "shop-1"
	h.eng.jobs <- j1
	h.eng.waitSettled(t, 1)
	s := <-got
	if s.method != http.MethodPost || s.body != "hello" {
		t.Fatalf("%s %q", s.method, s.body)
	}
	for k, want := range map[string]string{
		"Content-Type":       "application/octet-stream",
		"X-Kairos-Job-Id":    "J1",
		"X-Kairos-Namespace": "ns",
		"X-Kairos-Queue":     "q",
		"X-Kairos-Delivery":  "3",
		"X-Kairos-Group":     "shop-1",
		"X-Kairos-Timestamp": "1700000000",
		"X-Kairos-Signature": "sha256=babfa8b593140ee3160bea38210f8fea6712e1f6e073328eb52c4e965bc0ab8d",
	} {
		if v := s.header.Get(k); v != want {
			t.Errorf("%s: %q, want %q", k, v, want)
		}
	}
	acks, rels := h.eng.snapshot()
	if len(acks) != 1 || acks[0] != "J1/r-J1" || len(rels) != 0 {
		t.Fatalf("acks %v releases %v", acks, rels)
	}
	if h.count(resultOK) != 1 || h.observations() != 1 {
		t.Fatalf("metrics: ok=%v", h.count(resultOK))
	}
}

// TestFailedDeliveries: anything but a 2xx releases the job with the
// queue's policy and the webhook_failed reason, and is counted.
func TestFailedDeliveries(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		closed  bool
		result  string
		errText string // the release's error: exactly, or its start when it ends with "…"
	}{
		{"500", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, "upstream down: "+strings.Repeat("z", 2000))
		}, false, resultHTTPError, "receiver answered 500: upstream down: " + strings.Repeat("z", maxBodyHead-len("upstream down: "))},
		{"404", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(404) }, false, resultHTTPError, "receiver answered 404"},
		{"redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/elsewhere" {
				w.WriteHeader(200)
				return
			}
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}, false, resultHTTPError, "receiver answered 307"},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}, false, resultNetworkError, "Post \"…"},
		{"connection refused", nil, true, resultNetworkError, "Post \"…"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recv := httptest.NewServer(tc.handler)
			t.Cleanup(recv.Close)
			if tc.closed {
				recv.Close()
			}
			h := startManager(t, Options{})
			h.subscribe(t, Subscription{URL: recv.URL, TTRMS: 1000, TimeoutMS: 200})
			h.eng.jobs <- job("J", 1, "x")
			h.eng.waitSettled(t, 1)
			acks, rels := h.eng.snapshot()
			want := engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: "J", Receipt: "r-J", UsePolicy: true, Reason: engine.ReasonWebhookFailed}
			if len(rels) == 1 {
				got := rels[0].Error
				if p, ok := strings.CutSuffix(tc.errText, "…"); ok && strings.HasPrefix(got, p) || got == tc.errText {
					want.Error = got
				} else {
					t.Errorf("error text %q, want %q", got, tc.errText)
				}
			}
			if len(acks) != 0 || len(rels) != 1 || rels[0] != want {
				t.Fatalf("acks %v releases %+v, want one release %+v", acks, rels, want)
			}
			if h.count(tc.result) != 1 || h.count(resultOK) != 0 {
				t.Fatalf("metrics: %s=%v", tc.result, h.count(tc.result))
			}
		})
	}
}

// TestConcurrency: at most Concurrency deliveries are in flight at once.
func TestConcurrency(t *testing.T) {
	var inFlight, peak atomic.Int64
	release := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
	}))
	t.Cleanup(recv.Close)
	h := startManager(t, Options{})
	h.subscribe(t, Subscription{URL: recv.URL, Concurrency: 3})
	for i := range 8 {
		h.eng.jobs <- job(strconv.Itoa(i), 1, "x")
	}
	deadline := time.Now().Add(5 * time.Second)
	for inFlight.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a fourth worker would show up now
	if got := inFlight.Load(); got != 3 {
		t.Fatalf("%d deliveries in flight, want 3", got)
	}
	close(release)
	h.eng.waitSettled(t, 8)
	if peak.Load() != 3 {
		t.Fatalf("peak concurrency %d, want 3", peak.Load())
	}
	recv.CloseClientConnections()
}

// TestStopAndDelete: deleting a subscription stops its workers; stopping
// the manager interrupts a delivery, which is handed back without spending
// its try, and Run returns promptly.
func TestStopAndDelete(t *testing.T) {
	entered := make(chan struct{}, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // so that the server notices the client leaving
		entered <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(recv.Close)
	t.Cleanup(recv.CloseClientConnections)

	h := startManager(t, Options{})
	h.subscribe(t, Subscription{URL: recv.URL, Concurrency: 2})
	waitFor(t, "workers polling", func() bool { return h.eng.consumes.Load() >= 2 })
	if err := h.m.Delete(context.Background(), "default", "ns", "q"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // workers notice within one poll
	n := h.eng.consumes.Load()
	time.Sleep(200 * time.Millisecond)
	if m := h.eng.consumes.Load(); m != n {
		t.Fatalf("workers still polling after the subscription was deleted (%d → %d)", n, m)
	}
	if err := h.m.Delete(context.Background(), "default", "ns", "q"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}

	h.subscribe(t, Subscription{URL: recv.URL, TTRMS: 60000, TimeoutMS: 50000})
	h.eng.jobs <- job("J", 2, "x")
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("delivery not attempted")
	}
	start := time.Now()
	h.stop()
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Run took %v to stop", el)
	}
	h.eng.waitSettled(t, 1)
	_, rels := h.eng.snapshot()
	want := engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: "J", Receipt: "r-J", KeepTry: true}
	if len(rels) != 1 || rels[0] != want {
		t.Fatalf("releases %+v, want %+v", rels, want)
	}
	if h.count(resultNetworkError) != 0 {
		t.Fatal("an interrupted delivery was counted as a failure")
	}
}

// TestReloadFromStore: a subscription written by another instance (straight
// to the store) is picked up within the reload interval, and a change of
// it restarts its workers with the new settings.
func TestReloadFromStore(t *testing.T) {
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(recv.Close)
	fail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(fail.Close)
	h := startManager(t, Options{})
	s := Subscription{Pool: "default", Namespace: "ns", Queue: "q", URL: fail.URL, Secret: "x"}
	if err := s.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := h.m.store.Put(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.eng.jobs <- job("A", 1, "x")
	h.eng.waitSettled(t, 1)
	s.URL = recv.URL
	if err := h.m.store.Put(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload", func() bool {
		h.eng.jobs <- job("B", 1, "x")
		h.eng.waitSettled(t, 1)
		return hits.Load() > 0
	})
	// A subscription of an unknown pool is ignored.
	s.Pool = "nope"
	if err := h.m.store.Put(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Put(context.Background(), s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put for an unknown pool: %v", err)
	}
	time.Sleep(150 * time.Millisecond)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
