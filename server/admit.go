package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

// Admission: the one place that decides whether a request of the public
// API may reach its handler, for gin's routes (guard) and for the event
// loops' fast path (loopHost.Take and TakeLater, fastpath.go) alike, in
// lmstfy's order: names (400) → pool (404) → token (401) → scope (403) →
// rate limit (429); a publish that the engine refuses for the pool's
// memory reserve (507) is refused between the scope and the rate limit. A
// request that took a rate-limit token and then did not deliver gives it
// back (refundAdmission).
//
// The event loops call admit with inline set: it then never waits on I/O.
// When a check needs the admin Redis (a token not in the store's cache, a
// token with a rate limit), it returns errAdmitLater having done nothing,
// and the loop runs admit again, without inline, off the loop
// (loopHost.TakeLater, run by evloop/admit_linux.go).

// Route options of the routes the fast path serves too: the fast path and
// gin's routes must admit them alike.
var (
	optsPublish = routeOpts{role: auth.RolePublish, throttle: throttleProduce, jobs: 1}
	optsConsume = routeOpts{multi: true, role: auth.RoleConsume, throttle: throttleConsume}
	// optsBulk: a bulk publish is admitted on its first job, before its
	// body is read; the rest of its jobs are charged once it is
	// (publishBulk).
	optsBulk = routeOpts{role: auth.RolePublish, throttle: throttleProduce, jobs: 1}
	optsAck  = routeOpts{role: auth.RoleConsume}
)

// errAdmitLater is admit's answer, with inline set, when deciding needs a
// round trip to the admin Redis.
var errAdmitLater = errors.New("server: admission needs the admin Redis")

// localTokens is a TokenStore that can answer from memory; auth.Store is
// one. Without it, the event loops verify every token off the loop.
type localTokens interface {
	// VerifyCached is Verify without I/O: auth.ErrNotCached when only the
	// admin Redis can tell.
	VerifyCached(pool, namespace, token string) (auth.Scope, error)
}

// jobThrottler is a Throttler that also limits the jobs a token publishes
// (auth.Limit.WriteJobs: a bulk of n takes n); auth.Throttler is one.
// Every publish takes one job at admission, before its body is read, and
// is refused there (429) when the limit has none left; a bulk is then
// charged the rest of its jobs once its body is read (chargeJobs), which
// may put the limit in debt: the next publishes are refused at admission
// until it refills. So a refused publish never costs the reading of its
// body. Without a jobThrottler, jobs are not limited.
type jobThrottler interface {
	AllowJobs(ctx context.Context, pool, namespace, token string, n int) (bool, error)
	// ChargeJobs takes n whatever the bucket holds (into debt).
	ChargeJobs(ctx context.Context, pool, namespace, token string, n int) error
	RefundJobs(ctx context.Context, pool, namespace, token string, n int) error
	// UnlimitedJobs reports, without I/O, that the token has no jobs
	// limit: AllowJobs and RefundJobs then do no I/O.
	UnlimitedJobs(pool, namespace, token string) bool
	// JobsShort reports, without I/O, that the token's jobs limit is
	// known to hold no job now (a recent refusal said how long it
	// takes to refill): the publish is refused at once.
	JobsShort(pool, namespace, token string) bool
}

// localThrottler is a Throttler that can tell without I/O that a token has
// no limit in one direction (Allow and Refund then do no I/O either);
// auth.Throttler is one. Without it, the event loops run every throttled
// request's Allow off the loop.
type localThrottler interface {
	Unlimited(pool, namespace, token string, write bool) bool
}

// admission is one request's admission: what the request asks for (set
// by the caller) and what admit found.
type admission struct {
	ns, queue string // path segments; queue is "q1,q2,…" on a multi route
	rawToken  string // "[pool:]secret" from X-Token, else ?token=
	opts      routeOpts

	// queues are the queues of a multi route's "q1,q2,…", split; nil
	// when there is one queue, queue.
	queues      []string
	pool, token string        // the token's pool (once it exists) and secret
	eng         engine.Engine // the pool's engine
	// authenticated is set once the token and scope passed (the namespace
	// may then label metrics).
	authenticated bool
	// throttled is set once a rate-limit token was taken: refund it if the
	// request does not deliver.
	throttled bool
	// jobs are the jobs taken from the token's jobs limit (jobThrottler):
	// given back too if the request does not deliver.
	jobs int
}

// admit decides a's admission; nil means the request may go on. With
// inline set it does no I/O: errAdmitLater means nothing was decided and
// admit must run again without inline. Errors are the API's renderings
// (apiError), or a token store or throttler failure, which mapAPIError
// renders.
func (s *Server) admit(ctx context.Context, a *admission, inline bool) error {
	o := a.opts
	var err error
	if o.multi {
		err = validateMulti(a.ns, a.queue)
	} else {
		err = validateNames(a.ns, a.queue)
	}
	if err != nil {
		return err
	}
	if o.multi && strings.Contains(a.queue, ",") {
		a.queues = splitQueues(a.queue)
	}

	pool, token := auth.ParseToken(a.rawToken)
	eng, ok := s.engines[pool]
	if !ok {
		return errPoolNotFound
	}
	a.pool, a.token, a.eng = pool, token, eng

	if !o.public {
		if !s.skipVerify {
			if err := s.verify(ctx, pool, a.ns, token, a.queue, a.queues, o.role, inline); err != nil {
				return err
			}
		}
		a.authenticated = true
	}

	if o.throttle == throttleProduce {
		// A publish the engine would refuse for the pool's memory reserve
		// whatever its body: refused before the rate limit (no round trip
		// to the admin Redis) and before its body is read, with the
		// engine's own 507 (engine.PublishRefuser). The reserve refuses the
		// heaviest namespaces as fast as they publish into a full pool;
		// this keeps that refusal cheap for the others' CPU.
		if r, ok := eng.(engine.PublishRefuser); ok {
			if err := r.RefusesPublish(a.ns, a.queue); err != nil {
				return err
			}
		}
	}
	if o.throttle == throttleNone || s.throttler == nil {
		return nil
	}
	write := o.throttle == throttleProduce
	if jt, ok := s.throttler.(jobThrottler); ok && o.jobs > 0 && jt.JobsShort(pool, a.ns, token) {
		// The jobs limit refused this token a moment ago and has not
		// refilled since: refused without a round trip to the admin
		// Redis, before the request limit (whose token would go back).
		s.metrics.rateLimit.WithLabelValues(pool, a.ns, s.tokenLabel(token), o.throttle.String()).Inc()
		return errRateLimited(token, o.throttle.String())
	}
	if inline {
		if lt, ok := s.throttler.(localThrottler); !ok || !lt.Unlimited(pool, a.ns, token, write) {
			return errAdmitLater
		}
		if jt, ok := s.throttler.(jobThrottler); ok && o.jobs > 0 && !jt.UnlimitedJobs(pool, a.ns, token) {
			return errAdmitLater
		}
	}
	allowed, err := s.throttler.Allow(ctx, pool, a.ns, token, write)
	if err != nil {
		return fmt.Errorf("throttle: %w", throttlerError{err})
	}
	if !allowed {
		s.metrics.rateLimit.WithLabelValues(pool, a.ns, s.tokenLabel(token), o.throttle.String()).Inc()
		return errRateLimited(token, o.throttle.String())
	}
	a.throttled = true
	if o.jobs > 0 {
		if err := s.admitJobs(ctx, a, o.jobs); err != nil {
			// The request did not deliver: its request token goes back.
			if rerr := s.refundAdmission(ctx, a); rerr != nil {
				s.log.WithError(rerr).Warn("throttle refund failed")
			}
			return err
		}
	}
	return nil
}

// admitJobs takes n jobs from the jobs limit of a's token at admission: a
// 429, as the request limit's, when the limit holds fewer. They are given
// back with the request's token if the request does not deliver.
func (s *Server) admitJobs(ctx context.Context, a *admission, n int) error {
	jt, ok := s.throttler.(jobThrottler)
	if !ok || s.throttler == nil {
		return nil
	}
	allowed, err := jt.AllowJobs(ctx, a.pool, a.ns, a.token, n)
	if err != nil {
		return fmt.Errorf("throttle: %w", throttlerError{err})
	}
	if !allowed {
		s.metrics.rateLimit.WithLabelValues(a.pool, a.ns, s.tokenLabel(a.token), throttleProduce.String()).Inc()
		return errRateLimited(a.token, throttleProduce.String())
	}
	if !jt.UnlimitedJobs(a.pool, a.ns, a.token) {
		a.jobs += n
	}
	return nil
}

// verify checks the token and its scope for every queue of the request
// (queues, or queue when there is no list); with inline set, only from the
// token store's memory (errAdmitLater when that is not enough).
func (s *Server) verify(ctx context.Context, pool, ns, token, queue string, queues []string, role auth.Role, inline bool) error {
	if token == "" {
		return errTokenNotFound
	}
	var scope auth.Scope
	var err error
	if inline {
		lt, ok := s.tokens.(localTokens)
		if !ok {
			return errAdmitLater
		}
		scope, err = lt.VerifyCached(pool, ns, token)
		if errors.Is(err, auth.ErrNotCached) {
			return errAdmitLater
		}
	} else {
		scope, err = s.tokens.Verify(ctx, pool, ns, token)
	}
	if err != nil {
		return fmt.Errorf("verify token: %w", err)
	}
	if queues == nil && !scope.Allows(queue, role) {
		return errForbidden(role, queue)
	}
	for _, q := range queues {
		if !scope.Allows(q, role) {
			return errForbidden(role, q)
		}
	}
	return nil
}

// refundNeedsIO reports whether refundAdmission may wait on the admin
// Redis (the event loops then refund off the loop).
func (s *Server) refundNeedsIO(a *admission) bool {
	if a.jobs > 0 {
		return true
	}
	if !a.throttled {
		return false
	}
	lt, ok := s.throttler.(localThrottler)
	return !ok || !lt.Unlimited(a.pool, a.ns, a.token, a.opts.throttle == throttleProduce)
}

// refundAdmission gives back the rate-limit token of an admitted request
// that did not deliver (a consume without a job, a failed publish); it
// does nothing when none was taken, and at most once.
func (s *Server) refundAdmission(ctx context.Context, a *admission) error {
	var err error
	if a.jobs > 0 {
		if jt, ok := s.throttler.(jobThrottler); ok {
			err = jt.RefundJobs(ctx, a.pool, a.ns, a.token, a.jobs)
		}
		a.jobs = 0
	}
	if !a.throttled {
		return err
	}
	a.throttled = false
	return errors.Join(err, s.throttler.Refund(ctx, a.pool, a.ns, a.token, a.opts.throttle == throttleProduce))
}

// chargeJobs charges a bulk publish admitted on its first job (admitJobs)
// the rest of its n jobs, whatever the limit holds (into debt); they are
// given back with the rest if the request does not deliver. A failure of
// the admin Redis fails the request, as at admission.
func (s *Server) chargeJobs(ctx context.Context, a *admission, n int) error {
	jt, ok := s.throttler.(jobThrottler)
	if !ok || a.jobs == 0 || n <= 0 {
		return nil // no jobs limit (admission took nothing)
	}
	if err := jt.ChargeJobs(ctx, a.pool, a.ns, a.token, n); err != nil {
		return fmt.Errorf("throttle: %w", throttlerError{err})
	}
	a.jobs += n
	return nil
}
