package server

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/engine"
)

// jobResponse is one job as lmstfy renders it; fields are declared in
// alphabetical JSON-name order because lmstfy's maps serialise that way.
// Msg is "new job" for consume and absent for peeks.
type jobResponse struct {
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	Group       string            `json:"group,omitempty"` // Kairos, issue #32: only on grouped jobs
	JobID       string            `json:"job_id"`
	Msg         string            `json:"msg,omitempty"`
	Namespace   string            `json:"namespace"`
	Queue       string            `json:"queue"`
	Receipt     string            `json:"receipt,omitempty"` // Kairos, with X-Kairos-Extensions
	RemainTries uint16            `json:"remain_tries"`
	TraceParent string            `json:"traceparent,omitempty"` // Kairos, with X-Kairos-Extensions
	TraceState  string            `json:"tracestate,omitempty"`  // Kairos, with X-Kairos-Extensions
	TTL         int64             `json:"ttl"`
}

// newJobResponse renders job; namespace and queue are the request's where
// lmstfy uses them (the consumed job's own queue for consume).
func newJobResponse(job *engine.Job, namespace, queue, msg string, now time.Time) jobResponse {
	data := job.Body
	if data == nil {
		data = []byte{}
	}
	return jobResponse{
		Attributes:  job.Attributes,
		Data:        data,
		ElapsedMS:   engine.ElapsedMS(job.ID, now),
		Group:       job.Group,
		JobID:       job.ID,
		Msg:         msg,
		Namespace:   namespace,
		Queue:       queue,
		RemainTries: job.Tries,
		TTL:         ttlSeconds(job.TTL),
	}
}

// ttlSeconds is the remaining TTL in whole seconds, rounded as Redis's TTL
// command rounds; a job that still expires never reads 0 (which means "no
// expiry").
func ttlSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64((d + time.Second/2) / time.Second)
	if s == 0 {
		s = 1
	}
	return s
}

// jobDetail is a job with its Kairos fields, keys in alphabetical order
// like lmstfy's: peek and peek job with X-Kairos-Extensions, and the
// dead-letter listing.
type jobDetail struct {
	// Attempts is the job's attempt history, on peek job only.
	Attempts    *[]attemptJSON    `json:"attempts,omitempty"`
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	DeadAtMS    int64             `json:"dead_at_ms"`
	DeadReason  string            `json:"dead_reason"`
	Deliveries  int               `json:"deliveries"`
	DueAtMS     int64             `json:"due_at_ms"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	Group       string            `json:"group,omitempty"`
	JobID       string            `json:"job_id"`
	LastError   string            `json:"last_error,omitempty"`
	Namespace   string            `json:"namespace"`
	Priority    int               `json:"priority"`
	Queue       string            `json:"queue"`
	RemainTries uint16            `json:"remain_tries"`
	State       string            `json:"state"`
	TraceParent string            `json:"traceparent,omitempty"`
	TraceState  string            `json:"tracestate,omitempty"`
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
		Group:       r.Group,
		JobID:       r.JobID,
		LastError:   job.LastError,
		Namespace:   r.Namespace,
		Priority:    job.Priority,
		Queue:       r.Queue,
		RemainTries: r.RemainTries,
		State:       string(job.State),
		TraceParent: job.TraceParent,
		TraceState:  job.TraceState,
		TTL:         r.TTL,
	}
}

// newJobDetailAttempts is newJobDetail with the job's attempt history (peek
// job).
func newJobDetailAttempts(job *engine.Job, namespace, queue string, now time.Time) jobDetail {
	d := newJobDetail(job, namespace, queue, now)
	as := newAttempts(job.Attempts, now)
	d.Attempts = &as
	return d
}

// unixMS is t in Unix milliseconds, 0 for the zero time.
func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// peekJob serves GET /api/:namespace/:queue/job/:job_id: a job by ID in
// any state.
func (s *Server) peekJob(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	job, err := state(c).eng.PeekJob(c.Request.Context(), ns, q, c.Param("job_id"))
	if err != nil {
		s.failAPI(c, err)
		return
	}
	if job == nil {
		s.failAPI(c, errJobNotFound)
		return
	}
	if wantsExt(c) {
		writeJSON(c, http.StatusOK, newJobDetailAttempts(job, ns, q, s.now()))
		return
	}
	writeJSON(c, http.StatusOK, newJobResponse(job, ns, q, "", s.now()))
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
