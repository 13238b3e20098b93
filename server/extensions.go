package server

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// The Kairos extensions of the public API (doc/API.md, "Kairos
// extensions"): receipts, release (nack), touch, millisecond parameters,
// due_at, priority, idempotency keys, pause/resume, dead-letter browsing and
// job inspection. Each is a new route or a new optional parameter; without
// them every lmstfy route answers exactly as before. Every engine has the
// extensions (engine.Extensions is part of engine.Engine).

// extHeader opts a request into the Kairos fields of lmstfy's job
// responses: receipt in consume, state and friends in peek and peek job.
// Without it those responses stay lmstfy's byte for byte, so that strict
// lmstfy clients (and the compatibility tests) see no new key.
const extHeader = "X-Kairos-Extensions"

// Limits of the extension parameters.
const (
	// maxParamMS is the largest millisecond delay, TTL or TTR: what the
	// second forms allow (uint32 seconds).
	maxParamMS = math.MaxUint32 * 1000
	// maxJobKey is the longest idempotency key, in bytes.
	maxJobKey = 256
	// maxDeadPage is the largest page of the dead-letter listing.
	maxDeadPage = 100
	// defaultDeadPage is its default page size.
	defaultDeadPage = 20
)

// Errors of the extensions.
var (
	errStaleReceipt     = newAPIError(http.StatusConflict, "error", "stale receipt")
	errKeyNotFound      = newAPIError(http.StatusNotFound, "error", "job key not found")
	errMissingReceipt   = badRequest("missing receipt")
	errInvalidReceipt   = badRequest("invalid receipt")
	errInvalidDelayMS   = badRequest("invalid delay_ms")
	errInvalidTTLMS     = badRequest("invalid ttl_ms")
	errInvalidTTRMS     = badRequest("invalid ttr_ms")
	errInvalidTimeoutMS = badRequest("invalid timeout_ms")
	errInvalidDueAt     = badRequest("invalid due_at")
	errDueAtConflict    = badRequest("due_at conflicts with delay")
	errInvalidPriority  = badRequest("invalid priority")
	errInvalidJobKey    = badRequest("invalid job_key")
	errJobKeyConflict   = badRequest("job_key and Idempotency-Key differ")
	errBulkJobKey       = badRequest("job_key is not allowed in bulk publish")
	errInvalidKeepTry   = badRequest("invalid keep_try")
	errInvalidOffset    = badRequest("invalid offset")
)

// wantsExt reports whether the request asked for the Kairos fields
// (X-Kairos-Extensions: 1, true or yes, any case).
func wantsExt(c *gin.Context) bool {
	switch strings.ToLower(c.GetHeader(extHeader)) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// queryMS parses an optional millisecond parameter (unsigned decimal, at
// most maxParamMS) and reports whether it was given.
func queryMS(c *gin.Context, name string, bad *apiError) (time.Duration, bool, error) {
	v, ok := getQuery(c, name)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > maxParamMS {
		return 0, true, bad
	}
	return time.Duration(n) * time.Millisecond, true, nil
}

// publishExt is what the Kairos publish parameters add to a publish.
type publishExt struct {
	delay, ttl time.Duration // effective, whichever form gave them
	// dueAt is due_at, stored as is: delay is only its estimate, for the
	// checks, as the engine reads its clock later.
	dueAt    time.Time
	priority int
	key      string
}

func (x *publishExt) apply(req *engine.PublishRequest) {
	req.Delay, req.TTL, req.Priority, req.Key = x.delay, x.ttl, x.priority, x.key
	if !x.dueAt.IsZero() {
		req.Delay, req.DueAt = 0, x.dueAt
	}
}

// parsePublishExt reads the Kairos publish parameters, after lmstfy's
// (parsePublish), in this order: delay_ms, ttl_ms, due_at, the TTL ≥ delay
// rule on the effective values, priority, job_key / Idempotency-Key.
// Millisecond forms win over the second forms.
func (s *Server) parsePublishExt(c *gin.Context, p *publishParams) (publishExt, error) {
	x := publishExt{delay: secs(p.delay), ttl: secs(p.ttl)}
	_, explicitDelay := getQuery(c, "delay")
	d, ok, err := queryMS(c, "delay_ms", errInvalidDelayMS)
	if err != nil {
		return x, err
	}
	if ok {
		x.delay, explicitDelay = d, true
	}
	if t, ok, err := queryMS(c, "ttl_ms", errInvalidTTLMS); err != nil {
		return x, err
	} else if ok {
		x.ttl = t
	}
	if v, ok := getQuery(c, "due_at"); ok {
		if explicitDelay {
			return x, errDueAtConflict
		}
		due, err := parseDueAt(v)
		if err != nil {
			return x, err
		}
		x.dueAt, x.delay = due, max(due.Sub(s.now()), 0)
		if x.delay > maxParamMS*time.Millisecond {
			return x, errInvalidDueAt
		}
	}
	if x.ttl > 0 && x.ttl < x.delay {
		return x, errTTLShorter
	}
	prio, err := queryUint(c, "priority", 8, 0, errInvalidPriority)
	if err != nil {
		return x, err
	}
	x.priority = int(prio)
	qk, hasQK := getQuery(c, "job_key")
	hk := c.GetHeader("Idempotency-Key")
	switch {
	case hasQK && (qk == "" || len(qk) > maxJobKey), len(hk) > maxJobKey:
		return x, errInvalidJobKey
	case hasQK && hk != "" && qk != hk:
		return x, errJobKeyConflict
	case hasQK:
		x.key = qk
	default:
		x.key = hk
	}
	return x, nil
}

// parseDueAt reads an instant: Unix milliseconds or RFC 3339. A '+' of a
// time zone offset that arrived as a space (an unencoded '+' in a query)
// is put back.
func parseDueAt(v string) (time.Time, error) {
	if v != "" && strings.Trim(v, "0123456789") == "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms > math.MaxInt64/int64(time.Millisecond) {
			return time.Time{}, errInvalidDueAt
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t, err = time.Parse(time.RFC3339Nano, strings.Replace(v, " ", "+", 1))
	}
	if err != nil {
		return time.Time{}, errInvalidDueAt
	}
	return t, nil
}

// consumeTimes returns consume's TTR and wait: ttr_ms and timeout_ms win
// over ttr and timeout (seconds, already parsed); the wait is capped at
// Kairos.MaxTimeoutSecond either way.
func (s *Server) consumeTimes(c *gin.Context, ttr, timeout uint64) (time.Duration, time.Duration, error) {
	ttrD := secs(ttr)
	if d, ok, err := queryMS(c, "ttr_ms", errInvalidTTRMS); err != nil {
		return 0, 0, err
	} else if ok {
		ttrD = d
	}
	maxWait := secs(s.def.maxTimeout)
	wait := secs(min(timeout, s.def.maxTimeout))
	if v, ok := getQuery(c, "timeout_ms"); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, errInvalidTimeoutMS
		}
		wait = maxWait
		if n < uint64(maxWait/time.Millisecond) {
			wait = time.Duration(n) * time.Millisecond
		}
	}
	return ttrD, wait, nil
}

// jobDetail is a job with its Kairos fields, keys in alphabetical order
// like lmstfy's: peek and peek job with X-Kairos-Extensions, and the
// dead-letter listing.
type jobDetail struct {
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	DeadAtMS    int64             `json:"dead_at_ms"`
	DeadReason  string            `json:"dead_reason"`
	Deliveries  int               `json:"deliveries"`
	DueAtMS     int64             `json:"due_at_ms"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	JobID       string            `json:"job_id"`
	Namespace   string            `json:"namespace"`
	Priority    int               `json:"priority"`
	Queue       string            `json:"queue"`
	RemainTries uint16            `json:"remain_tries"`
	State       string            `json:"state"`
	TTL         int64             `json:"ttl"`
}

func newJobDetail(job *engine.Job, namespace, queue string, now time.Time) jobDetail {
	r := newJobResponse(job, namespace, queue, "", now)
	return jobDetail{
		Attributes:  r.Attributes,
		Data:        r.Data,
		DeadAtMS:    unixMS(job.DeadAt),
		DeadReason:  string(job.DeadReason),
		Deliveries:  job.Deliveries,
		DueAtMS:     unixMS(job.DueAt),
		ElapsedMS:   r.ElapsedMS,
		JobID:       r.JobID,
		Namespace:   r.Namespace,
		Priority:    job.Priority,
		Queue:       r.Queue,
		RemainTries: r.RemainTries,
		State:       string(job.State),
		TTL:         r.TTL,
	}
}

// unixMS is t in Unix milliseconds, 0 for the zero time.
func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// parseReceipt reads the receipt parameter: 16 hex digits.
func parseReceipt(c *gin.Context) (string, error) {
	r := queryString(c, "receipt")
	if r == "" {
		return "", errMissingReceipt
	}
	if len(r) != 16 || strings.Trim(r, "0123456789abcdefABCDEF") != "" {
		return "", errInvalidReceipt
	}
	return r, nil
}

// ackReceipt serves DELETE /api/:namespace/:queue/job/:job_id?receipt=R:
// the ACK of one delivery. 204 when the receipt is the job's current
// delivery, 409 when it is stale, 404 when there is no such job.
func (s *Server) ackReceipt(c *gin.Context) {
	x := state(c).eng
	receipt, err := parseReceipt(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	if err := x.Ack(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id"), receipt); err != nil {
		s.failAPI(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// release serves PUT /api/:namespace/:queue/job/:job_id/release: the
// consumer hands its delivery back, ready again after delay_ms (or delay
// seconds), or after the queue's backoff policy when neither is given.
// keep_try=true gives back the try the delivery spent.
func (s *Server) release(c *gin.Context) {
	x := state(c).eng
	receipt, err := parseReceipt(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	req := &engine.ReleaseRequest{
		Namespace: c.Param("namespace"), Queue: c.Param("queue"), ID: c.Param("job_id"),
		Receipt: receipt, Reason: engine.ReasonNacked,
	}
	delay, okMS, err := queryMS(c, "delay_ms", errInvalidDelayMS)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	_, okS := getQuery(c, "delay")
	delayS, err := queryUint(c, "delay", 32, 0, errInvalidDelay)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	switch {
	case okMS:
		req.Delay = delay
	case okS:
		req.Delay = secs(delayS)
	default:
		req.UsePolicy = true
	}
	if v, ok := getQuery(c, "keep_try"); ok {
		if req.KeepTry, err = strconv.ParseBool(v); err != nil {
			s.failAPI(c, errInvalidKeepTry)
			return
		}
	}
	if err := x.Release(c.Request.Context(), req); err != nil {
		s.failAPI(c, err)
		return
	}
	if s.debug {
		s.reqLogger(c).WithFields(logrus.Fields{"delay": req.Delay, "policy": req.UsePolicy, "keep_try": req.KeepTry}).Debug("job released")
	}
	c.Status(http.StatusNoContent)
}

// touchResponse is 200 {"due_at_ms":…,"job_id":…}.
type touchResponse struct {
	DueAtMS int64  `json:"due_at_ms"`
	JobID   string `json:"job_id"`
}

// touch serves PUT /api/:namespace/:queue/job/:job_id/touch: the delivery's
// TTR restarts from now with ttr_ms (or ttr seconds, default TTRSecond).
func (s *Server) touch(c *gin.Context) {
	x := state(c).eng
	receipt, err := parseReceipt(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ttr, err := queryUint(c, "ttr", 32, s.def.ttr, errInvalidTTR)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ttrD := secs(ttr)
	if d, ok, err := queryMS(c, "ttr_ms", errInvalidTTRMS); err != nil {
		s.failAPI(c, err)
		return
	} else if ok {
		ttrD = d
	}
	id := c.Param("job_id")
	due, err := x.Touch(c.Request.Context(), c.Param("namespace"), c.Param("queue"), id, receipt, ttrD)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	writeJSON(c, http.StatusOK, touchResponse{DueAtMS: due.UnixMilli(), JobID: id})
}

// cancelKey serves DELETE /api/:namespace/:queue/job_key/*key: deletes the
// job published with that idempotency key (any bytes but an empty key;
// percent-encode '/').
func (s *Server) cancelKey(c *gin.Context) {
	x := state(c).eng
	key := strings.TrimPrefix(c.Param("key"), "/")
	if key == "" || len(key) > maxJobKey {
		s.failAPI(c, errInvalidJobKey)
		return
	}
	id, err := x.CancelKey(c.Request.Context(), c.Param("namespace"), c.Param("queue"), key)
	if errors.Is(err, engine.ErrJobNotFound) {
		err = errKeyNotFound
	}
	if err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).WithField("cancelled_job_id", id).Info("job cancelled by key")
	writeJSON(c, http.StatusOK, publishResponse{JobID: id, Msg: "cancelled"})
}

// setPaused serves PUT /api/:namespace/:queue/pause and …/resume: only the
// paused flag of the queue's settings changes.
func (s *Server) setPaused(paused bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		x := state(c).eng
		ctx, ns, q := c.Request.Context(), c.Param("namespace"), c.Param("queue")
		cfg, err := x.QueueConfig(ctx, ns, q)
		if err != nil {
			s.failAPI(c, err)
			return
		}
		cfg.Paused = paused
		if err := x.SetQueueConfig(ctx, ns, q, cfg); err != nil {
			s.failAPI(c, err)
			return
		}
		s.reqLogger(c).WithField("paused", paused).Info("queue pause changed")
		c.Status(http.StatusNoContent)
	}
}

// deadJobsResponse is a page of the dead letter.
type deadJobsResponse struct {
	Jobs       []jobDetail `json:"jobs"`
	NextOffset int64       `json:"next_offset"`
}

// listDeadLetter serves GET /api/:namespace/:queue/deadletter/jobs?offset=&limit=:
// dead jobs oldest first, with bodies, reasons and times. next_offset is
// the offset of the next page, -1 after the last one.
func (s *Server) listDeadLetter(c *gin.Context) {
	x := state(c).eng
	offset, err := queryInt64(c, "offset", 0, 0, errInvalidOffset)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	limit, err := queryInt64(c, "limit", defaultDeadPage, 1, errInvalidLimit)
	if err != nil || limit > maxDeadPage {
		s.failAPI(c, errInvalidLimit)
		return
	}
	if offset > math.MaxInt64-maxDeadPage {
		s.failAPI(c, errInvalidOffset)
		return
	}
	ctx, ns, q := c.Request.Context(), c.Param("namespace"), c.Param("queue")
	jobs, err := x.ListDeadLetter(ctx, ns, q, offset, limit)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	// Offsets count dead-letter entries, and a page skips entries whose job
	// is gone (deleted, or expired by the dead TTL): the next page starts
	// limit entries later, whatever this page returned.
	size, err := x.DeadLetterSize(ctx, ns, q)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	out := deadJobsResponse{Jobs: make([]jobDetail, len(jobs)), NextOffset: -1}
	if offset+limit < size {
		out.NextOffset = offset + limit
	}
	now := s.now()
	for i, j := range jobs {
		out.Jobs[i] = newJobDetail(j, ns, q, now)
	}
	writeJSON(c, http.StatusOK, out)
}

// respawnDeadJob serves PUT /api/:namespace/:queue/deadletter/job/:job_id?ttl=:
// one dead job back to the ready queue with one try (404 when it is not
// dead).
func (s *Server) respawnDeadJob(c *gin.Context) {
	x := state(c).eng
	ttl, err := queryInt64(c, "ttl", int64(s.def.ttl), 0, errInvalidTTL)
	if err != nil || ttl > maxDurationSeconds {
		s.failAPI(c, errInvalidTTL)
		return
	}
	if err := x.RespawnDeadJob(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id"), secs(uint64(ttl))); err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).Info("dead job respawned")
	c.Status(http.StatusNoContent)
}

// deleteDeadJob serves DELETE /api/:namespace/:queue/deadletter/job/:job_id
// (404 when it is not dead).
func (s *Server) deleteDeadJob(c *gin.Context) {
	x := state(c).eng
	if err := x.DeleteDeadJob(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id")); err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).Info("dead job deleted")
	c.Status(http.StatusNoContent)
}

// deadLetterLimit reads the limit of lmstfy's respawn and delete: an int64
// ≥ 1, or "all" (Kairos).
func deadLetterLimit(c *gin.Context) (int64, error) {
	if v, ok := getQuery(c, "limit"); ok && v == "all" {
		return math.MaxInt64, nil
	}
	return queryInt64(c, "limit", 1, 1, errInvalidLimit)
}
