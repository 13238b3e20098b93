package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/evloop"
)

// The fast path: the event loops (package server/evloop) serve the
// requests of loopRoutes (routes.go) — plain publishes, consumes and ACKs —
// straight from their goroutines, in batches, and reach the server through
// loopHost: Take checks a request's parameters as the handler would and
// admits it with admit (admit.go), inline, as gin's guard admits it;
// TakeLater runs admit off the loop when it needs the admin Redis; Answer
// renders the outcome as the handler and failAPI would and records it as
// the middleware would (metrics with served_by="loop", access log). Every
// other request (another route, an unusual header, a parameter out of
// range) goes with its connection to net/http and gin, which answer it
// exactly as before. So the fast path renders the successes, the refusals
// of admission and the engine's errors, and nothing else.

// loopParser reads the requests of loopRoutes.
var loopParser = func() *evloop.Parser {
	p, err := evloop.NewParser(loopRoutes)
	if err != nil {
		panic(err)
	}
	return p
}()

// loopTable is loopRoutes as this server serves them: with tracing on, a
// request carrying a trace context is net/http's, which makes its span
// (doc/tracing.md says why the loops make none); off, the loops read a
// publish's trace context to store it, unless StoreTraceContext is false.
func (s *Server) loopTable() evloop.Table {
	t := loopRoutes
	switch {
	case s.tracer != nil:
		t.TraceContext = false
		t.RefuseHeaders = append(slices.Clone(t.RefuseHeaders), "Traceparent", "Tracestate")
	case !s.storeTrace:
		t.TraceContext = false
	}
	return t
}

// startLoops starts n event loops serving ln's connections; net/http
// must serve the group's Handoff listener.
func (s *Server) startLoops(ln net.Listener, n int) (*evloop.Group, error) {
	parser, err := evloop.NewParser(s.loopTable())
	if err != nil {
		return nil, err
	}
	return evloop.Start(ln, evloop.Config{
		Host:   loopHost{s},
		Parser: parser,
		Loops:  n,
		Timeouts: evloop.Timeouts{
			ReadHeader: s.apiSrv.ReadHeaderTimeout,
			Read:       s.apiSrv.ReadTimeout,
			Write:      s.apiSrv.WriteTimeout,
			Idle:       s.apiSrv.IdleTimeout,
		},
		Context: s.pollCtx,
		Log:     s.log,
	})
}

// loopHost is the server as the event loops see it (evloop.Host).
type loopHost struct{ s *Server }

// fastItem is a request a loop took, with what the server keeps with it:
// its admission. Its Item's Ext points back to it.
type fastItem struct {
	evloop.Item
	adm admission
	// ext: a consume that asked for the Kairos fields (extHeader).
	ext bool
}

// fastPool recycles fastItems.
var fastPool = sync.Pool{New: func() any { return new(fastItem) }}

// fastOf returns the fastItem of a loop's item.
func fastOf(it *evloop.Item) *fastItem { return it.Ext.(*fastItem) }

// Take implements evloop.Host: it checks r's parameters as the handler
// would and admits it (admit, inline: no I/O). It returns false when
// net/http must answer the request (a parameter out of range); nothing has
// happened then.
func (h loopHost) Take(r *evloop.Request, ip string, now time.Time) (*evloop.Item, bool) {
	s := h.s
	ns, q := string(r.Namespace), string(r.Queue)
	f := fastPool.Get().(*fastItem)
	*f = fastItem{}
	it := &f.Item
	*it = evloop.Item{Route: r.Route(), Kind: r.Route().Kind, NS: ns, Q: q, Start: now, IP: ip, Ext: f}
	fail := func() (*evloop.Item, bool) {
		fastPool.Put(f)
		return nil, false
	}
	opts := optsPublish
	switch it.Kind {
	case evloop.Publish:
		delay, ok := r.UintParam("delay", 32, s.def.delay)
		if !ok {
			return fail()
		}
		ttl, ok := r.UintParam("ttl", 32, s.def.ttl)
		if !ok || ttl > 0 && ttl < delay {
			return fail()
		}
		tries, ok := r.UintParam("tries", 16, s.def.tries)
		if !ok || tries == 0 {
			return fail()
		}
		// A group is checked as queryGroup checks it; an invalid one is
		// net/http's 400.
		var group string
		if g, ok := r.Param("group"); ok {
			if group = string(g); !engine.ValidGroup(group) {
				return fail()
			}
		}
		// The body is the loop's to read, once admitted (Host.Take).
		it.Pub = engine.PublishRequest{
			Namespace: ns, Queue: q,
			TTL: secs(ttl), Delay: secs(delay), Tries: uint16(tries),
			Group: group,
		}
		if r.TraceParent != nil {
			// Only read when it is to be stored (loopTable), and checked
			// as requestTrace checks it on net/http.
			if tp := string(r.TraceParent); engine.ValidTraceParent(tp) {
				it.Pub.TraceParent = tp
				if ts := string(r.TraceState); engine.ValidTraceState(ts) {
					it.Pub.TraceState = ts
				}
			}
		}
	case evloop.Consume:
		opts = optsConsume
		ttr, ok := r.UintParam("ttr", 32, s.def.ttr)
		if !ok {
			return fail()
		}
		timeout, ok := r.UintParam("timeout", 32, s.def.timeout)
		if !ok {
			return fail()
		}
		count, ok := r.UintParam("count", 32, 1)
		if !ok || count == 0 || count > engine.MaxBatchConsume {
			return fail()
		}
		// The batch only takes what is ready now; a consume that finds
		// nothing and may wait then waits on its own (Item.Deadline).
		wait := secs(min(timeout, s.def.maxTimeout))
		it.Con = engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: secs(ttr), Count: int(count), Timeout: wait}
		if r.Worker != nil {
			it.Con.Worker = engine.WorkerName(string(r.Worker))
		}
		if wait > 0 {
			it.Deadline = now.Add(wait)
		}
		f.ext = r.Ext != nil && extOn(string(r.Ext))
	case evloop.Ack:
		opts = optsAck
		it.JobID = string(r.JobID)
		if v, ok := r.Param("receipt"); ok {
			// A receipt ACK (ackReceipt); a missing or malformed receipt
			// is net/http's 400.
			if !validReceipt(string(v)) {
				return fail()
			}
			it.Receipt = string(v)
		}
	}
	if s.accessLog.Load() {
		it.Query = string(r.Query)
	}
	f.adm = admission{ns: ns, queue: q, rawToken: string(r.Token), opts: opts}
	f.admitted(s.admit(context.Background(), &f.adm, true))
	return it, true
}

// TakeLater implements evloop.Host: admit, without inline, off the loop.
func (h loopHost) TakeLater(ctx context.Context, it *evloop.Item) {
	f := fastOf(it)
	err := h.s.admit(ctx, &f.adm, false)
	if err != nil && ctx.Err() != nil {
		err = engine.ErrClosed // the server stops: 503, as the engine answers
	}
	f.admitted(err)
}

// admitted records admit's answer.
func (f *fastItem) admitted(err error) {
	f.Eng, f.Later = f.adm.eng, false
	switch {
	case errors.Is(err, errAdmitLater):
		f.Later = true
	case err != nil:
		f.Err, f.Refused = err, true
	}
}

// Drop implements evloop.Host: a request nobody will be answered gives
// back what its admission took.
func (h loopHost) Drop(it *evloop.Item) { h.s.refund(h.s.pollCtx, fastOf(it), nil) }

// Recycle implements evloop.Host.
func (h loopHost) Recycle(it *evloop.Item) {
	f := fastOf(it)
	*f = fastItem{}
	fastPool.Put(f)
}

// Answer implements evloop.Host: it renders the request's outcome as its
// handler and failAPI would, and records it as the middleware would
// (metrics, access log, debug log).
func (h loopHost) Answer(it *evloop.Item, date, out []byte) []byte {
	s, f := h.s, fastOf(it)
	ctx := context.Background()
	var reqID [26]byte
	_ = ulid.Make().MarshalTextTo(reqID[:])
	var ae *apiError
	var body []byte
	var scratch [96]byte
	code := 0
	switch {
	case it.Refused:
		if f.adm.authenticated {
			s.countRefused(f.adm.pool, it.NS, it.Err) // the reserve's refusal (admit)
		}
		ae = mapAPIError(ctx, it.Err)
	case it.Kind == evloop.Publish:
		if it.Err == nil && it.ID == "" {
			it.Err = errInternal // an engine that set neither
		}
		if it.Err != nil {
			s.countRefused(f.adm.pool, it.NS, it.Err) // admitted: the namespace is authenticated
			ae = mapAPIError(ctx, publishFailure(it.Err, it.ID))
			break
		}
		code = http.StatusCreated
		body = append(append(append(scratch[:0], `{"job_id":"`...), it.ID...), `","msg":"published"}`...)
		if s.debug {
			s.fastLogger(f, reqID[:]).WithFields(logrus.Fields{
				"new_job_id": it.ID, "delay": uint64(it.Pub.Delay / time.Second),
				"ttl": uint64(it.Pub.TTL / time.Second), "tries": it.Pub.Tries,
			}).Debug("job published")
		}
	case it.Kind == evloop.Consume:
		if len(it.Jobs) == 0 {
			if it.Err == nil || errors.Is(it.Err, engine.ErrClosed) {
				ae = errNoJob
			} else {
				ae = mapAPIError(ctx, it.Err)
			}
			break
		}
		if it.Err != nil {
			s.fastLogger(f, reqID[:]).WithError(it.Err).Warn("consume returned jobs and an error")
		}
		size := 256 * len(it.Jobs)
		for _, j := range it.Jobs {
			size += len(j.Body) * 4 / 3
		}
		var err error
		if body, err = appendConsumed(make([]byte, 0, size), consumedBody(it.Jobs, it.NS, it.Con.Queues, it.Con.Count, f.ext, s.now())); err != nil {
			ae, it.Err = errInternal, err
			break
		}
		code = http.StatusOK
	case it.Kind == evloop.Ack:
		if it.Err != nil {
			ae = mapAPIError(ctx, it.Err)
			break
		}
		code = http.StatusNoContent
	}
	retryAfter := 0
	var traceParent, traceState string
	if ae == nil && it.Kind == evloop.Consume && it.Con.Count == 1 {
		traceParent, traceState = it.Jobs[0].TraceParent, it.Jobs[0].TraceState // setTraceHeaders
	}
	if ae != nil {
		code, body, retryAfter = ae.status, ae.body, ae.retryAfter
		if serverFault(code) {
			s.fastLogger(f, reqID[:]).WithError(it.Err).Error("request failed")
		}
		s.refund(ctx, f, reqID[:])
	}
	out = evloop.AppendResponse(out, code, retryAfter, traceParent, traceState, it.Close, reqID[:], date, body)

	nsLabel := it.NS
	if !f.adm.authenticated {
		nsLabel = "" // a refused token does not choose metric labels
	}
	r := s.metrics.route(routeLabels{f.adm.pool, nsLabel, it.Route.Path, it.Route.Method, code, servedByLoop})
	if r.latency != nil {
		r.latency.Observe(float64(time.Since(it.Start)) / float64(time.Millisecond))
	}
	r.code.Inc()
	r.served.Inc()
	if s.accessLog.Load() {
		path := "/api/" + it.NS + "/" + it.Q
		if it.Kind == evloop.Ack {
			path += "/job/" + it.JobID
		}
		s.logAccess(f.adm.pool, path, it.Query, it.Start, it.IP, it.Route.Method, code, string(reqID[:]), servedByLoop)
	}
	return out
}

// refund gives back the throttle token of a request that did not deliver;
// off the loop when that needs the admin Redis.
func (s *Server) refund(ctx context.Context, f *fastItem, reqID []byte) {
	if !f.adm.throttled {
		return
	}
	a := f.adm
	f.adm.throttled = false
	if s.refundNeedsIO(&a) {
		log := s.fastLogger(f, reqID)
		go func() {
			if err := s.refundAdmission(context.WithoutCancel(ctx), &a); err != nil {
				log.WithError(err).Warn("throttle refund failed")
			}
		}()
		return
	}
	if err := s.refundAdmission(ctx, &a); err != nil {
		s.fastLogger(f, reqID).WithError(err).Warn("throttle refund failed")
	}
}

// fastLogger is reqLogger for a loop's request.
func (s *Server) fastLogger(f *fastItem, reqID []byte) logrus.FieldLogger {
	fields := logrus.Fields{"req_id": string(reqID), "namespace": f.NS, "queue": f.Q}
	if f.Kind == evloop.Ack {
		fields["job_id"] = f.JobID
	}
	return s.log.WithFields(fields)
}
