package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/tracing"
)

// Engine is what the workers need from a pool's engine (engine.Engine
// offers it).
type Engine interface {
	Consume(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error)
	Ack(ctx context.Context, namespace, queue, jobID, receipt string) error
	Release(ctx context.Context, req *engine.ReleaseRequest) error
}

// Options tune a Manager; zero values take the defaults.
type Options struct {
	// Logger receives delivery failures; nil discards them.
	Logger logrus.FieldLogger
	// Registerer receives the delivery metrics; nil means a private
	// registry.
	Registerer prometheus.Registerer
	// Client posts the deliveries; nil means a client that never follows
	// redirects (a 3xx is a failed delivery) and keeps up to
	// MaxConcurrency idle connections per host.
	Client *http.Client
	// ReloadInterval is how often subscriptions are re-read (2 s).
	ReloadInterval time.Duration
	// PollTimeout is each worker's long-poll wait (1 s).
	PollTimeout time.Duration
	// RetryPause is how long a worker pauses after a failing Consume (1 s).
	RetryPause time.Duration
	// Now is the clock of the signature timestamps; nil means time.Now.
	Now func() time.Time
	// Tracer makes a span of each delivery (tracing.Provider's Tracer);
	// nil means tracing is off. Either way a delivery carries the job's
	// W3C trace context (traceparent, tracestate) when it has one.
	Tracer trace.Tracer
}

// settleTimeout bounds the ACK or release that settles a delivery; it runs
// even when the worker is stopping.
const settleTimeout = 5 * time.Second

// maxDrain is how much of a receiver's answer is read (and discarded) so
// that the connection can be reused.
const maxDrain = 64 << 10

// Results of a delivery, as the metrics label them.
const (
	resultOK           = "ok"
	resultHTTPError    = "http_error"
	resultNetworkError = "network_error"
)

// Manager runs the delivery workers of every subscription and is the
// subscriptions' management API: Put, Get, Delete and List act on the
// Store and make this instance's Run reload at once (other instances
// reload within ReloadInterval).
type Manager struct {
	store   *Store
	engines map[string]Engine
	log     logrus.FieldLogger
	client  *http.Client
	ownsTr  *http.Transport
	reload  time.Duration
	poll    time.Duration
	pause   time.Duration
	tracer  trace.Tracer // nil: tracing off
	now     func() time.Time

	deliveries *prometheus.CounterVec
	seconds    *prometheus.HistogramVec

	kick chan struct{}
}

// NewManager builds a Manager over the Store and the pools' engines. It
// registers its metrics and starts nothing: see Run.
func NewManager(store *Store, engines map[string]Engine, opts Options) (*Manager, error) {
	if store == nil {
		return nil, errors.New("webhook: nil store")
	}
	m := &Manager{
		store:   store,
		engines: engines,
		log:     opts.Logger,
		client:  opts.Client,
		reload:  opts.ReloadInterval,
		poll:    opts.PollTimeout,
		pause:   opts.RetryPause,
		now:     opts.Now,
		tracer:  opts.Tracer,
		kick:    make(chan struct{}, 1),
	}
	if m.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		m.log = l
	}
	if m.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = MaxConcurrency
		m.ownsTr = tr
		m.client = &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if m.reload <= 0 {
		m.reload = 2 * time.Second
	}
	if m.poll <= 0 {
		m.poll = time.Second
	}
	if m.pause <= 0 {
		m.pause = time.Second
	}
	if m.now == nil {
		m.now = time.Now
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kairos_webhook_deliveries_total",
		Help: "Webhook delivery attempts by result: ok (2xx), http_error (any other status), network_error (timeout, refused connection…).",
	}, []string{"pool", "namespace", "queue", "result"})
	m.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kairos_webhook_delivery_seconds",
		Help:    "Duration of webhook delivery attempts, from the POST to the receiver's answer or failure.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"pool", "namespace", "queue"})
	for _, c := range []prometheus.Collector{m.deliveries, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("webhook: register metrics: %w", err)
		}
	}
	return m, nil
}

// Put validates (Normalize) and stores a subscription, and returns it as
// stored.
func (m *Manager) Put(ctx context.Context, s Subscription) (Subscription, error) {
	if err := s.Normalize(); err != nil {
		return s, err
	}
	if _, ok := m.engines[s.Pool]; !ok {
		return s, fmt.Errorf("%w: pool %q has no engine that supports webhooks", ErrInvalid, s.Pool)
	}
	if err := m.store.Put(ctx, s); err != nil {
		return s, err
	}
	m.Changed()
	return s, nil
}

// Get returns a queue's subscription, or ErrNotFound.
func (m *Manager) Get(ctx context.Context, pool, ns, q string) (Subscription, error) {
	return m.store.Get(ctx, pool, ns, q)
}

// Delete removes a queue's subscription (ErrNotFound when there is none);
// this instance's workers of it stop at once.
func (m *Manager) Delete(ctx context.Context, pool, ns, q string) error {
	if err := m.store.Delete(ctx, pool, ns, q); err != nil {
		return err
	}
	m.Changed()
	return nil
}

// List returns every subscription.
func (m *Manager) List(ctx context.Context) ([]Subscription, error) {
	return m.store.List(ctx)
}

// Changed makes Run reload the subscriptions now.
func (m *Manager) Changed() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// group is the running workers of one subscription.
type group struct {
	sub    Subscription
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (g *group) stop() {
	g.cancel()
	g.wg.Wait()
}

// Run runs the workers of every subscription until ctx is done, reloading
// the subscriptions every ReloadInterval (and at once after a change made
// through this Manager). It returns nil once every worker has stopped;
// a delivery interrupted by the stop is released without spending a try.
func (m *Manager) Run(ctx context.Context) error {
	running := make(map[string]*group)
	warned := make(map[string]bool)
	defer func() {
		for _, g := range running {
			g.cancel()
		}
		for _, g := range running {
			g.wg.Wait()
		}
		if m.ownsTr != nil {
			m.ownsTr.CloseIdleConnections()
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.kick:
		}
		m.sync(ctx, running, warned)
		t.Reset(m.reload)
	}
}

// sync starts, restarts and stops workers to match the stored
// subscriptions. When the store cannot be read, the running set is kept.
func (m *Manager) sync(ctx context.Context, running map[string]*group, warned map[string]bool) {
	subs, err := m.store.List(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		m.log.WithError(err).Warn("webhook: cannot read every subscription")
		if subs == nil {
			return
		}
	}
	want := make(map[string]Subscription, len(subs))
	for _, s := range subs {
		if _, ok := m.engines[s.Pool]; !ok {
			if !warned[s.key()] {
				warned[s.key()] = true
				m.log.WithField("webhook", s.key()).Warn("webhook: its pool is not configured on this server; not delivering")
			}
			continue
		}
		if err := s.Normalize(); err != nil {
			if !warned[s.key()] {
				warned[s.key()] = true
				m.log.WithError(err).WithField("webhook", s.key()).Warn("webhook: invalid stored subscription; not delivering")
			}
			continue
		}
		delete(warned, s.key())
		want[s.key()] = s
	}
	for k, g := range running {
		if s, ok := want[k]; !ok || s != g.sub {
			g.stop()
			delete(running, k)
		}
	}
	for k, s := range want {
		if _, ok := running[k]; ok {
			continue
		}
		gctx, cancel := context.WithCancel(ctx)
		g := &group{sub: s, cancel: cancel}
		eng := m.engines[s.Pool]
		for range s.Concurrency {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				m.work(gctx, eng, s)
			}()
		}
		running[k] = g
	}
}

// work is one worker: long-poll one job, deliver it, repeat.
func (m *Manager) work(ctx context.Context, eng Engine, s Subscription) {
	req := &engine.ConsumeRequest{
		Namespace: s.Namespace, Queues: []string{s.Queue}, TTR: s.TTR(), Timeout: m.poll, Count: 1,
		Worker: "webhook", // in the jobs' attempt histories
	}
	for ctx.Err() == nil {
		jobs, err := eng.Consume(ctx, req)
		for _, j := range jobs {
			m.deliver(ctx, eng, s, j)
		}
		if err != nil && len(jobs) == 0 && ctx.Err() == nil {
			m.log.WithError(err).WithField("webhook", s.key()).Warn("webhook: consume failed")
			select {
			case <-ctx.Done():
			case <-time.After(m.pause):
			}
		}
	}
}

// deliver POSTs one job and settles it: ACK on 2xx, release with the
// queue's backoff policy otherwise. A delivery cut short by the worker's
// stop is released at once without spending the try.
func (m *Manager) deliver(ctx context.Context, eng Engine, s Subscription, j *engine.Job) {
	log := m.log.WithFields(logrus.Fields{"webhook": s.key(), "job_id": j.ID})
	var result string
	var status int
	var err error
	if m.tracer != nil {
		// The delivery is a child of the job's trace context: the
		// receiver continues the producer's trace from it.
		var span trace.Span
		ctx, span = m.tracer.Start(tracing.ContextOf(ctx, j.TraceParent, j.TraceState), tracing.SpanWebhook,
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(append(tracing.Job(s.Namespace, s.Queue, j.ID), tracing.AttrPool.String(s.Pool),
				attribute.Int("kairos.webhook.delivery", j.Deliveries))...))
		defer func() {
			span.SetAttributes(attribute.String("kairos.webhook.result", result))
			if status != 0 {
				span.SetAttributes(attribute.Int("http.response.status_code", status))
			}
			if result != resultOK {
				msg := result
				if err != nil {
					msg = err.Error()
				}
				span.SetStatus(codes.Error, msg)
			}
			span.End()
		}()
	}
	if ctx.Err() == nil {
		start := time.Now()
		result, status, err = m.post(ctx, s, j)
		if result != resultNetworkError || ctx.Err() == nil {
			m.seconds.WithLabelValues(s.Pool, s.Namespace, s.Queue).Observe(time.Since(start).Seconds())
			m.deliveries.WithLabelValues(s.Pool, s.Namespace, s.Queue, result).Inc()
		}
	}
	// Interrupted: not posted, or cut short by our own stop (not the
	// receiver's fault).
	interrupted := result == "" || (result == resultNetworkError && ctx.Err() != nil)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	switch {
	case result == resultOK:
		if err := eng.Ack(sctx, s.Namespace, s.Queue, j.ID, j.Receipt); err != nil {
			// The TTR ran out during the delivery (the job was delivered
			// again) or the job is gone: nothing left to settle.
			log.WithError(err).Warn("webhook: delivered, but the ACK failed")
		}
		return
	case interrupted:
		err = eng.Release(sctx, &engine.ReleaseRequest{
			Namespace: s.Namespace, Queue: s.Queue, ID: j.ID, Receipt: j.Receipt, KeepTry: true,
		})
		if err != nil {
			log.WithError(err).Warn("webhook: cannot hand back a job at shutdown; it returns after its TTR")
		}
		return
	}
	log.WithError(err).WithFields(logrus.Fields{"status": status, "result": result, "deliveries": j.Deliveries}).
		Info("webhook: delivery failed")
	err = eng.Release(sctx, &engine.ReleaseRequest{
		Namespace: s.Namespace, Queue: s.Queue, ID: j.ID, Receipt: j.Receipt,
		UsePolicy: true, Reason: engine.ReasonWebhookFailed, Error: failureText(err),
	})
	if err != nil {
		log.WithError(err).Warn("webhook: cannot release a failed delivery; it returns after its TTR")
	}
}

// post sends one delivery and classifies its outcome.
func (m *Manager) post(ctx context.Context, s Subscription, j *engine.Job) (result string, status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(j.Body))
	if err != nil {
		return resultNetworkError, 0, err
	}
	ts := strconv.FormatInt(m.now().Unix(), 10)
	h := req.Header
	h.Set("Content-Type", "application/octet-stream")
	h.Set("User-Agent", "Kairos-Webhook/1")
	h.Set("X-Kairos-Job-Id", j.ID)
	h.Set("X-Kairos-Namespace", s.Namespace)
	h.Set("X-Kairos-Queue", s.Queue)
	h.Set("X-Kairos-Delivery", strconv.Itoa(j.Deliveries))
	if j.Group != "" {
		h.Set("X-Kairos-Group", j.Group) // issue #32: absent for the default group
	}
	h.Set("X-Kairos-Timestamp", ts)
	h.Set("X-Kairos-Signature", Sign(s.Secret, ts, j.Body))
	tp, tstate := j.TraceParent, j.TraceState
	if sc := trace.SpanContextFromContext(ctx); m.tracer != nil && sc.IsValid() {
		tp, tstate = tracing.Format(sc) // the delivery span's
	}
	if tp != "" {
		h.Set("Traceparent", tp)
		if tstate != "" {
			h.Set("Tracestate", tstate)
		}
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return resultNetworkError, 0, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		_ = resp.Body.Close()
		return resultOK, resp.StatusCode, nil
	}
	// The start of a refusal's body goes into the job's history: it is
	// what the receiver said went wrong.
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyHead))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	return resultHTTPError, resp.StatusCode, &statusError{status: resp.StatusCode, head: head}
}

// maxBodyHead is how much of a failed delivery's answer the job's history
// keeps.
const maxBodyHead = 512

// statusError is a receiver's answer other than 2xx: its status and the
// start of its body.
type statusError struct {
	status int
	head   []byte
}

func (e *statusError) Error() string {
	if len(bytes.TrimSpace(e.head)) == 0 {
		return fmt.Sprintf("receiver answered %d", e.status)
	}
	return fmt.Sprintf("receiver answered %d: %s", e.status, strings.ToValidUTF8(string(e.head), "\ufffd"))
}

// failureText is what the job's history records of a failed delivery:
// "receiver answered 503: <start of the body>", or the network error
// ("Post \"…\": dial tcp …: connection refused", a timeout).
func failureText(err error) string {
	if err == nil {
		return ""
	}
	t, _ := engine.ErrorText(err.Error())
	return t
}
