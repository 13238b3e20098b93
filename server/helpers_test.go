package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/openapitest"
)

// errUnexpected is what a fake returns for a call the test did not set up.
var errUnexpected = errors.New("fake: unexpected call")

// fakeEngine is an engine.Engine built from function fields; a nil field
// answers errUnexpected. Every call is recorded by name.
type fakeEngine struct {
	mu    sync.Mutex
	calls []string

	publish        func(ctx context.Context, req *engine.PublishRequest) (string, error)
	publishBatch   func(ctx context.Context, reqs []*engine.PublishRequest) ([]string, error)
	consume        func(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error)
	del            func(ctx context.Context, ns, q, id string) error
	peekQueue      func(ctx context.Context, ns, q string) (*engine.Job, error)
	peekJob        func(ctx context.Context, ns, q, id string) (*engine.Job, error)
	size           func(ctx context.Context, ns, q string) (int64, error)
	destroy        func(ctx context.Context, ns, q string) (int64, error)
	peekDeadLetter func(ctx context.Context, ns, q string) (engine.DeadLetter, error)
	deadLetterSize func(ctx context.Context, ns, q string) (int64, error)
	respawn        func(ctx context.Context, ns, q string, limit int64, ttl time.Duration) (int64, error)
	deleteDead     func(ctx context.Context, ns, q string, limit int64) (int64, error)
	info           func(ctx context.Context) (map[string][]string, error)

	// The extensions.
	ack            func(ctx context.Context, ns, q, id, receipt string) error
	release        func(ctx context.Context, r *engine.ReleaseRequest) error
	touch          func(ctx context.Context, ns, q, id, receipt string, ttr time.Duration) (time.Time, error)
	cancelKey      func(ctx context.Context, ns, q, key string) (string, error)
	queueConfig    func(ctx context.Context, ns, q string) (engine.QueueConfig, error)
	setQueueConfig func(ctx context.Context, ns, q string, cfg engine.QueueConfig) error
	listDead       func(ctx context.Context, ns, q string, offset, limit int64) ([]*engine.Job, error)
	listDeadPage   func(ctx context.Context, ns, q string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error)
	respawnOne     func(ctx context.Context, ns, q, id string, ttl time.Duration) error
	deleteOne      func(ctx context.Context, ns, q, id string) error
}

var _ engine.Engine = (*fakeEngine)(nil)

// The event loops' forms of the hot operations: engine.Serial's, over the
// function fields above (so a batch records "Publish", "Consume" or
// "Delete" per request).

func (f *fakeEngine) PublishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
	engine.Serial{E: f}.PublishEach(ctx, reqs, ids, errs)
}

func (f *fakeEngine) ConsumeEach(ctx context.Context, reqs []*engine.ConsumeRequest, jobs [][]*engine.Job, errs []error) {
	engine.Serial{E: f}.ConsumeEach(ctx, reqs, jobs, errs)
}

func (f *fakeEngine) DeleteEach(ctx context.Context, refs []engine.JobRef, errs []error) {
	engine.Serial{E: f}.DeleteEach(ctx, refs, errs)
}

func (f *fakeEngine) Together(ctx context.Context, steps ...func(context.Context)) {
	engine.Serial{}.Together(ctx, steps...)
}

func (f *fakeEngine) Watch(ns string, queues []string, fn func()) (stop func(), look, ok bool) {
	return engine.Serial{}.Watch(ns, queues, fn)
}

func (f *fakeEngine) Ack(ctx context.Context, ns, q, id, receipt string) error {
	f.record("Ack")
	if f.ack == nil {
		return errUnexpected
	}
	return f.ack(ctx, ns, q, id, receipt)
}

func (f *fakeEngine) Release(ctx context.Context, r *engine.ReleaseRequest) error {
	f.record("Release")
	if f.release == nil {
		return errUnexpected
	}
	return f.release(ctx, r)
}

func (f *fakeEngine) Touch(ctx context.Context, ns, q, id, receipt string, ttr time.Duration) (time.Time, error) {
	f.record("Touch")
	if f.touch == nil {
		return time.Time{}, errUnexpected
	}
	return f.touch(ctx, ns, q, id, receipt, ttr)
}

func (f *fakeEngine) CancelKey(ctx context.Context, ns, q, key string) (string, error) {
	f.record("CancelKey")
	if f.cancelKey == nil {
		return "", errUnexpected
	}
	return f.cancelKey(ctx, ns, q, key)
}

func (f *fakeEngine) QueueConfig(ctx context.Context, ns, q string) (engine.QueueConfig, error) {
	f.record("QueueConfig")
	if f.queueConfig == nil {
		return engine.QueueConfig{}, errUnexpected
	}
	return f.queueConfig(ctx, ns, q)
}

func (f *fakeEngine) SetQueueConfig(ctx context.Context, ns, q string, cfg engine.QueueConfig) error {
	f.record("SetQueueConfig")
	if f.setQueueConfig == nil {
		return errUnexpected
	}
	return f.setQueueConfig(ctx, ns, q, cfg)
}

func (f *fakeEngine) ListDeadLetter(ctx context.Context, ns, q string, offset, limit int64) ([]*engine.Job, error) {
	f.record("ListDeadLetter")
	if f.listDead == nil {
		return nil, errUnexpected
	}
	return f.listDead(ctx, ns, q, offset, limit)
}

// ListDeadLetterPage is listDeadPage, or, for the tests written before
// it, the oldest-first page that listDead and deadLetterSize describe.
func (f *fakeEngine) ListDeadLetterPage(ctx context.Context, ns, q string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
	f.record("ListDeadLetterPage")
	if f.listDeadPage != nil {
		return f.listDeadPage(ctx, ns, q, dq)
	}
	if f.listDead == nil || f.deadLetterSize == nil || dq.Newest || dq.Reason != "" {
		return engine.DeadLetterPage{}, errUnexpected
	}
	jobs, err := f.listDead(ctx, ns, q, dq.Offset, dq.Limit)
	if err != nil {
		return engine.DeadLetterPage{}, err
	}
	size, err := f.deadLetterSize(ctx, ns, q)
	if err != nil {
		return engine.DeadLetterPage{}, err
	}
	p := engine.DeadLetterPage{Jobs: jobs, Next: -1, Size: size}
	if dq.Offset+dq.Limit < size {
		p.Next = dq.Offset + dq.Limit
	}
	return p, nil
}

func (f *fakeEngine) RespawnDeadJob(ctx context.Context, ns, q, id string, ttl time.Duration) error {
	f.record("RespawnDeadJob")
	if f.respawnOne == nil {
		return errUnexpected
	}
	return f.respawnOne(ctx, ns, q, id, ttl)
}

func (f *fakeEngine) DeleteDeadJob(ctx context.Context, ns, q, id string) error {
	f.record("DeleteDeadJob")
	if f.deleteOne == nil {
		return errUnexpected
	}
	return f.deleteOne(ctx, ns, q, id)
}

func (f *fakeEngine) record(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
}

// Calls returns the names of the calls so far.
func (f *fakeEngine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeEngine) Publish(ctx context.Context, req *engine.PublishRequest) (string, error) {
	f.record("Publish")
	if f.publish == nil {
		return "", errUnexpected
	}
	return f.publish(ctx, req)
}

func (f *fakeEngine) PublishBatch(ctx context.Context, reqs []*engine.PublishRequest) ([]string, error) {
	f.record("PublishBatch")
	if f.publishBatch == nil {
		return nil, errUnexpected
	}
	return f.publishBatch(ctx, reqs)
}

func (f *fakeEngine) Consume(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	f.record("Consume")
	if f.consume == nil {
		return nil, errUnexpected
	}
	return f.consume(ctx, req)
}

func (f *fakeEngine) Delete(ctx context.Context, ns, q, id string) error {
	f.record("Delete")
	if f.del == nil {
		return errUnexpected
	}
	return f.del(ctx, ns, q, id)
}

func (f *fakeEngine) PeekQueue(ctx context.Context, ns, q string) (*engine.Job, error) {
	f.record("PeekQueue")
	if f.peekQueue == nil {
		return nil, errUnexpected
	}
	return f.peekQueue(ctx, ns, q)
}

func (f *fakeEngine) PeekJob(ctx context.Context, ns, q, id string) (*engine.Job, error) {
	f.record("PeekJob")
	if f.peekJob == nil {
		return nil, errUnexpected
	}
	return f.peekJob(ctx, ns, q, id)
}

func (f *fakeEngine) Size(ctx context.Context, ns, q string) (int64, error) {
	f.record("Size")
	if f.size == nil {
		return 0, errUnexpected
	}
	return f.size(ctx, ns, q)
}

func (f *fakeEngine) Destroy(ctx context.Context, ns, q string) (int64, error) {
	f.record("Destroy")
	if f.destroy == nil {
		return 0, errUnexpected
	}
	return f.destroy(ctx, ns, q)
}

func (f *fakeEngine) PeekDeadLetter(ctx context.Context, ns, q string) (engine.DeadLetter, error) {
	f.record("PeekDeadLetter")
	if f.peekDeadLetter == nil {
		return engine.DeadLetter{}, errUnexpected
	}
	return f.peekDeadLetter(ctx, ns, q)
}

func (f *fakeEngine) DeadLetterSize(ctx context.Context, ns, q string) (int64, error) {
	f.record("DeadLetterSize")
	if f.deadLetterSize == nil {
		return 0, errUnexpected
	}
	return f.deadLetterSize(ctx, ns, q)
}

func (f *fakeEngine) RespawnDeadLetter(ctx context.Context, ns, q string, limit int64, ttl time.Duration) (int64, error) {
	f.record("RespawnDeadLetter")
	if f.respawn == nil {
		return 0, errUnexpected
	}
	return f.respawn(ctx, ns, q, limit, ttl)
}

func (f *fakeEngine) DeleteDeadLetter(ctx context.Context, ns, q string, limit int64) (int64, error) {
	f.record("DeleteDeadLetter")
	if f.deleteDead == nil {
		return 0, errUnexpected
	}
	return f.deleteDead(ctx, ns, q, limit)
}

func (f *fakeEngine) Info(ctx context.Context) (map[string][]string, error) {
	f.record("Info")
	if f.info == nil {
		return nil, errUnexpected
	}
	return f.info(ctx)
}

// fakeTokens is a TokenStore: tokens maps "pool/ns/token" to a scope.
type fakeTokens struct {
	mu     sync.Mutex
	pools  []string
	tokens map[string]auth.Scope
	err    error // returned by Verify when set
	// hold, when set, runs at the start of Verify (not VerifyCached),
	// outside the lock: a test can make the admin Redis slow or hang.
	hold func(token string)
	// uncached tokens are not in the cache: VerifyCached answers
	// auth.ErrNotCached for them.
	uncached map[string]bool

	create func(ctx context.Context, pool, ns, desc, token string, scope auth.Scope) (string, error)
	list   func(ctx context.Context, pool, ns string, prefix bool) (map[string]string, error)
	del    func(ctx context.Context, pool, ns, token string) error
}

func (f *fakeTokens) HasPool(pool string) bool {
	for _, p := range f.pools {
		if p == pool {
			return true
		}
	}
	return false
}

func (f *fakeTokens) Verify(_ context.Context, pool, ns, token string) (auth.Scope, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		hold(token)
	}
	return f.verify(pool, ns, token)
}

func (f *fakeTokens) verify(pool, ns, token string) (auth.Scope, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return auth.Scope{}, f.err
	}
	scope, ok := f.tokens[pool+"/"+ns+"/"+token]
	if !ok {
		return auth.Scope{}, auth.ErrInvalidToken
	}
	return scope, nil
}

// VerifyCached answers as Verify: the fake keeps everything in memory.
func (f *fakeTokens) VerifyCached(pool, ns, token string) (auth.Scope, error) {
	f.mu.Lock()
	uncached := f.uncached[token]
	f.mu.Unlock()
	if uncached {
		return auth.Scope{}, auth.ErrNotCached
	}
	return f.verify(pool, ns, token)
}

func (f *fakeTokens) Create(ctx context.Context, pool, ns, desc, token string, scope auth.Scope) (string, error) {
	if f.create == nil {
		return "", errUnexpected
	}
	return f.create(ctx, pool, ns, desc, token, scope)
}

func (f *fakeTokens) List(ctx context.Context, pool, ns string, prefix bool) (map[string]string, error) {
	if f.list == nil {
		return nil, errUnexpected
	}
	return f.list(ctx, pool, ns, prefix)
}

func (f *fakeTokens) Delete(ctx context.Context, pool, ns, token string) error {
	if f.del == nil {
		return errUnexpected
	}
	return f.del(ctx, pool, ns, token)
}

// throttleCall is one Allow or Refund call.
type throttleCall struct {
	op              string
	pool, ns, token string
	write           bool
}

// fakeThrottler allows up to budget[token] requests (unlimited when the
// token is absent) and records Allow and Refund calls.
type fakeThrottler struct {
	mu     sync.Mutex
	budget map[string]int
	calls  []throttleCall
	err    error
	// hold, when set, runs at the start of Allow, outside the lock.
	hold func(token string)

	get  func(ctx context.Context, pool, ns, token string) (auth.Limit, bool, error)
	add  func(ctx context.Context, pool, ns, token string, l auth.Limit) error
	set  func(ctx context.Context, pool, ns, token string, l auth.Limit) error
	del  func(ctx context.Context, pool, ns, token string) error
	list func(ctx context.Context, force bool) ([]auth.LimitEntry, error)
}

func (f *fakeThrottler) Allow(_ context.Context, pool, ns, token string, write bool) (bool, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		hold(token)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, throttleCall{"allow", pool, ns, token, write})
	if f.err != nil {
		return false, f.err
	}
	n, limited := f.budget[token]
	if !limited {
		return true, nil
	}
	if n <= 0 {
		return false, nil
	}
	f.budget[token] = n - 1
	return true, nil
}

// Unlimited reports whether token has no budget (Allow then always
// admits it).
func (f *fakeThrottler) Unlimited(_, _, token string, _ bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, limited := f.budget[token]
	return !limited && f.err == nil
}

func (f *fakeThrottler) Refund(_ context.Context, pool, ns, token string, write bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, throttleCall{"refund", pool, ns, token, write})
	if _, limited := f.budget[token]; limited {
		f.budget[token]++
	}
	return nil
}

func (f *fakeThrottler) Calls() []throttleCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]throttleCall(nil), f.calls...)
}

func (f *fakeThrottler) Get(ctx context.Context, pool, ns, token string) (auth.Limit, bool, error) {
	if f.get == nil {
		return auth.Limit{}, false, errUnexpected
	}
	return f.get(ctx, pool, ns, token)
}

func (f *fakeThrottler) Add(ctx context.Context, pool, ns, token string, l auth.Limit) error {
	if f.add == nil {
		return errUnexpected
	}
	return f.add(ctx, pool, ns, token, l)
}

func (f *fakeThrottler) Set(ctx context.Context, pool, ns, token string, l auth.Limit) error {
	if f.set == nil {
		return errUnexpected
	}
	return f.set(ctx, pool, ns, token, l)
}

func (f *fakeThrottler) Delete(ctx context.Context, pool, ns, token string) error {
	if f.del == nil {
		return errUnexpected
	}
	return f.del(ctx, pool, ns, token)
}

func (f *fakeThrottler) List(ctx context.Context, force bool) ([]auth.LimitEntry, error) {
	if f.list == nil {
		return nil, errUnexpected
	}
	return f.list(ctx, force)
}

// Test tokens: goodToken is valid for namespace "ns" in the default pool,
// poolBToken ("b:" + secret) for "ns" in pool b.
const (
	goodToken  = "good-token-0123456789"
	bToken     = "b-token-0123456789abc"
	poolBToken = "b:" + bToken
)

// testConfig is a complete config literal with lmstfy's defaults.
func testConfig() *config.Config {
	return &config.Config{
		Host:          "127.0.0.1",
		Port:          0,
		AdminHost:     "127.0.0.1",
		AdminPort:     0,
		TTLSecond:     86400,
		DelaySecond:   0,
		TriesNum:      1,
		TTRSecond:     120,
		TimeoutSecond: 0,
		Kairos: config.Kairos{
			MaxTimeoutSecond:      600,
			ReadTimeoutSecond:     30,
			WriteTimeoutSecond:    30,
			IdleTimeoutSecond:     120,
			ShutdownTimeoutSecond: 5,
		},
	}
}

// testEnv is a server with fakes.
type testEnv struct {
	srv       *Server
	eng       *fakeEngine // pool "default"
	engB      *fakeEngine // pool "b"
	tokens    *fakeTokens
	throttler *fakeThrottler
	reg       *prometheus.Registry
	logs      *logtest.Hook
	now       time.Time
}

type envOption func(*config.Config, *Deps)

func withSkipVerify() envOption { return func(_ *config.Config, d *Deps) { d.SkipVerify = true } }

func withConfig(fn func(*config.Config)) envOption {
	return func(c *config.Config, _ *Deps) { fn(c) }
}

func withoutThrottler() envOption { return func(_ *config.Config, d *Deps) { d.Throttler = nil } }

func newEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	env := &testEnv{
		eng:  &fakeEngine{},
		engB: &fakeEngine{},
		tokens: &fakeTokens{
			pools: []string{"default", "b"},
			tokens: map[string]auth.Scope{
				"default/ns/" + goodToken: {},
				"b/ns/" + bToken:          {},
				"default/ns/" + scopedToken: {
					Queues: []string{"q", "q2"},
					Roles:  []auth.Role{auth.RoleConsume},
				},
			},
		},
		throttler: &fakeThrottler{budget: map[string]int{}},
		reg:       prometheus.NewRegistry(),
		logs:      hook,
		now:       time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	cfg := testConfig()
	deps := Deps{
		Engines:    map[string]engine.Engine{"default": env.eng, "b": env.engB},
		Tokens:     env.tokens,
		Throttler:  env.throttler,
		Logger:     logger,
		Registerer: env.reg,
		Gatherer:   env.reg,
		Version:    VersionInfo{Version: "v1.2.3"},
		Now:        func() time.Time { return env.now },
	}
	for _, o := range opts {
		o(cfg, &deps)
	}
	srv, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	env.srv = srv
	return env
}

// scopedToken may only consume (and read) queues q and q2 of ns.
const scopedToken = "scoped-token-0123456789"

// request describes one HTTP request of a table test.
type request struct {
	method string
	target string
	body   string
	header map[string]string
}

func (r request) build(t testing.TB) *http.Request {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req := httptest.NewRequest(r.method, r.target, body)
	req.Host = "localhost" // a name the admin listener answers (admin_door.go)
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	return req
}

// tok returns a header map with X-Token.
func tok(token string) map[string]string { return map[string]string{"X-Token": token} }

// do runs r against h and returns the recorded response.
func do(t testing.TB, h http.Handler, r request) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.build(t))
	return w
}

// api runs r against the public API; the response must match
// doc/openapi.yaml.
func (e *testEnv) api(t testing.TB, r request) *httptest.ResponseRecorder {
	t.Helper()
	return doDescribed(t, e.srv.Handler(), openapitest.Public, r)
}

// admin runs r against the admin API; the response must match
// doc/openapi.yaml.
func (e *testEnv) admin(t testing.TB, r request) *httptest.ResponseRecorder {
	t.Helper()
	return doDescribed(t, e.srv.AdminHandler(), openapitest.Admin, r)
}

// openapiValidator checks the responses of api and admin (with any job
// ID: the fakes make up IDs such as "J").
var openapiValidator = func() *openapitest.Validator {
	v, err := openapitest.NewValidatorAnyJobID()
	if err != nil {
		panic(err)
	}
	return v
}()

// doDescribed runs r against h, the handler of listener, and checks the
// response against doc/openapi.yaml. A 499 is not checked: it is only
// logged, its client went away before the answer.
func doDescribed(t testing.TB, h http.Handler, listener string, r request) *httptest.ResponseRecorder {
	t.Helper()
	req := r.build(t)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != errClientGone.status {
		if err := openapiValidator.Check(listener, req, w.Code, w.Header(), w.Body.Bytes()); err != nil {
			t.Error(err)
		}
	}
	return w
}

// expect checks the status and the exact body of a response.
func expect(t testing.TB, w *httptest.ResponseRecorder, status int, body string) {
	t.Helper()
	if w.Code != status || w.Body.String() != body {
		t.Errorf("got %d %q, want %d %q", w.Code, w.Body.String(), status, body)
	}
	if w.Header().Get("X-Request-ID") == "" {
		t.Errorf("response has no X-Request-ID")
	}
	if body != "" && w.Header().Get("Content-Type") != jsonContentType {
		t.Errorf("Content-Type %q, want %q", w.Header().Get("Content-Type"), jsonContentType)
	}
}

// testJobID is a v0 job ID published 1.5 s before env.now.
func testJobID(env *testEnv) string {
	return engine.NewJobID(env.now.Add(-1500*time.Millisecond), 0, false)
}
