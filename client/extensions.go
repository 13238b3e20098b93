package client

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"
)

// This file holds the Kairos extensions of the public API: receipts,
// receipt-checked ACK, release (nack), touch, cancel by job key,
// pause/resume and dead-letter browsing. Against lmstfy they fail with
// ErrNotFound (404 "api not found") or ErrBadRequest.

// ErrStaleReceipt: the receipt of an AckJob, Release or Touch is no longer
// the job's current delivery (its TTR expired and it was delivered again,
// or it was released). 409 "stale receipt".
var ErrStaleReceipt = errors.New("kairos: stale receipt")

// AllDead, as a limit of RespawnDeadLetter or DeleteDeadLetter, means every
// dead job.
const AllDead int64 = math.MaxInt64

// needReceipt checks that job is a consumed job with a receipt.
func needReceipt(job *Job) error {
	switch {
	case job == nil:
		return argError("nil job")
	case job.ID == "" || job.Queue == "":
		return argError("job without id or queue")
	case job.Receipt == "":
		return argError("job %s has no receipt (consumed from lmstfy, or not consumed)", job.ID)
	}
	return nil
}

// AckJob ACKs this delivery of job (Kairos, with job.Receipt): unlike Ack,
// it fails with ErrStaleReceipt when the job has since been delivered again,
// so that a worker whose TTR expired cannot delete the job another worker
// now holds. A job that no longer exists counts as ACKed (nil), which also
// makes retries safe. Without a receipt (a job consumed from lmstfy) it is
// Ack.
func (c *Client) AckJob(ctx context.Context, job *Job) error {
	if job == nil {
		return argError("nil job")
	}
	if job.Receipt == "" {
		return c.Ack(ctx, job.Queue, job.ID)
	}
	r, err := c.receiptAck(job)
	if err != nil {
		return err
	}
	_, err = c.t.do(ctx, r)
	return ackOutcome(err)
}

// receiptAck is the request of AckJob for a job with a receipt.
func (c *Client) receiptAck(job *Job) (request, error) {
	seg, err := queueSegment(job.Queue)
	if err != nil {
		return request{}, err
	}
	r := request{
		method: http.MethodDelete, path: c.nsPath, tail: [3]string{seg, "/job/", url.PathEscape(job.ID)},
		idempotent: true, want: wantNoContent,
	}
	r.params.add("receipt", job.Receipt)
	return r, nil
}

// ackOutcome is AckJob's error for a receipt ACK that failed with err: a
// job that no longer exists counts as ACKed.
func ackOutcome(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ReleaseOption sets a parameter of Release.
type ReleaseOption func(*releaseParams)

type releaseParams struct {
	delay    time.Duration
	hasDelay bool
	keepTry  bool
	errText  string
}

// ReleaseDelay makes the released job ready again after d (0: at once).
// Without it the queue's backoff policy decides (at once when it has none).
func ReleaseDelay(d time.Duration) ReleaseOption {
	return func(p *releaseParams) { p.delay, p.hasDelay = d, true }
}

// ReleaseError records why the job is handed back: the text goes into
// the job's attempt history (peek job's attempts, the dead letter's
// last_error). The server keeps at most 4096 bytes of it, cut at a
// character boundary.
func ReleaseError(text string) ReleaseOption {
	return func(p *releaseParams) { p.errText = text }
}

// KeepTry gives back the try the delivery spent.
func KeepTry() ReleaseOption {
	return func(p *releaseParams) { p.keepTry = true }
}

// Release hands a consumed job back (a nack, Kairos extension) instead of
// letting its TTR expire: it is ready again at once, after ReleaseDelay, or
// after the queue's backoff policy. A job out of tries goes to the dead
// letter. ErrStaleReceipt when this delivery is no longer current,
// ErrNotFound when the job is gone.
func (c *Client) Release(ctx context.Context, job *Job, opts ...ReleaseOption) error {
	if err := needReceipt(job); err != nil {
		return err
	}
	seg, err := queueSegment(job.Queue)
	if err != nil {
		return err
	}
	var p releaseParams
	for _, o := range opts {
		o(&p)
	}
	q := url.Values{"receipt": {job.Receipt}}
	if p.hasDelay {
		if p.delay < 0 {
			return argError("release delay must not be negative")
		}
		ms := p.delay / time.Millisecond
		if p.delay%time.Millisecond != 0 {
			ms++
		}
		q.Set("delay_ms", strconv.FormatInt(int64(ms), 10))
	}
	if p.keepTry {
		q.Set("keep_try", "true")
	}
	var body []byte
	var header http.Header
	if p.errText != "" {
		// In the body: a stack trace is too long for a query string.
		if len(p.errText) > maxErrorText {
			p.errText = cutText(p.errText, maxErrorText)
		}
		body, _ = json.Marshal(struct {
			Error string `json:"error"`
		}{p.errText})
		header = http.Header{"Content-Type": {"application/json"}}
	}
	_, err = c.t.do(ctx, request{
		method: http.MethodPut, path: c.apiPath(seg, "job", job.ID, "release"), query: q,
		body: body, header: header, want: []int{http.StatusNoContent},
	})
	return err
}

// Touch restarts the TTR of this delivery of job from now, for ttr (0: the
// server's default), and returns when it now expires (Kairos extension).
// Long handlers call it to keep their job. ErrStaleReceipt when the
// delivery is no longer current, ErrNotFound when the job is gone.
func (c *Client) Touch(ctx context.Context, job *Job, ttr time.Duration) (time.Time, error) {
	if err := needReceipt(job); err != nil {
		return time.Time{}, err
	}
	seg, err := queueSegment(job.Queue)
	if err != nil {
		return time.Time{}, err
	}
	q := url.Values{"receipt": {job.Receipt}}
	if ttr < 0 {
		return time.Time{}, argError("ttr must not be negative")
	}
	if ttr > 0 {
		if err := setDuration(q, "ttr", ttr); err != nil {
			return time.Time{}, err
		}
	}
	resp, err := c.t.do(ctx, request{
		method: http.MethodPut, path: c.apiPath(seg, "job", job.ID, "touch"), query: q,
		idempotent: true, want: []int{http.StatusOK},
	})
	if err != nil {
		return time.Time{}, err
	}
	var out struct {
		DueAtMS int64 `json:"due_at_ms"`
	}
	if err := decode(resp, &out); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(out.DueAtMS), nil
}

// CancelJobKey deletes the job published to queue with job key key (see
// JobKey) and returns its ID; ErrNotFound when no live job has that key.
// Kairos extension.
func (c *Client) CancelJobKey(ctx context.Context, queue, key string) (string, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return "", err
	}
	if key == "" || len(key) > MaxJobKey {
		return "", argError("job key must be 1..%d bytes", MaxJobKey)
	}
	resp, err := c.t.do(ctx, request{
		method: http.MethodDelete, path: c.apiPath(seg, "job_key", key), idempotent: false,
		want: []int{http.StatusOK},
	})
	if err != nil {
		return "", err
	}
	var out struct {
		JobID string `json:"job_id"`
	}
	if err := decode(resp, &out); err != nil {
		return "", err
	}
	return out.JobID, nil
}

// PauseQueue stops queue from handing out jobs (consumes wait or find
// nothing); publishing continues. Kairos extension.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, "pause")
}

// ResumeQueue undoes PauseQueue. Kairos extension.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, "resume")
}

func (c *Client) setPaused(ctx context.Context, queue, what string) error {
	seg, err := queueSegment(queue)
	if err != nil {
		return err
	}
	_, err = c.t.do(ctx, request{
		method: http.MethodPut, path: c.apiPath(seg, what), idempotent: true, want: []int{http.StatusNoContent},
	})
	return err
}

// MaxDeadLetterPage is the largest page of ListDeadLetter.
const MaxDeadLetterPage = 100

// ListDeadLetter returns up to limit (1..100) dead jobs of queue, oldest
// first, from offset, with their bodies, DeadAt and DeadReason, and the
// offset of the next page (-1 after the last page). Kairos extension.
func (c *Client) ListDeadLetter(ctx context.Context, queue string, offset, limit int64) ([]*Job, int64, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 || limit > MaxDeadLetterPage {
		return nil, 0, argError("offset must be ≥ 0 and limit 1..%d (got %d, %d)", MaxDeadLetterPage, offset, limit)
	}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "limit": {strconv.FormatInt(limit, 10)}}
	resp, err := c.t.do(ctx, request{
		method: http.MethodGet, path: c.apiPath(seg, "deadletter", "jobs"), query: q, idempotent: true,
		want: []int{http.StatusOK},
	})
	if err != nil {
		return nil, 0, err
	}
	var out struct {
		Jobs       []*Job `json:"jobs"`
		NextOffset int64  `json:"next_offset"`
	}
	if err := decode(resp, &out); err != nil {
		return nil, 0, err
	}
	return out.Jobs, out.NextOffset, nil
}

// Dead letter reasons, as Job.DeadReason and DeadLetterQuery.Reason
// spell them.
const (
	ReasonNacked        = "nacked"
	ReasonTTRExpired    = "ttr_expired"
	ReasonWebhookFailed = "webhook_failed"
)

// DeadLetterQuery selects a page of ListDeadLetterPage.
type DeadLetterQuery struct {
	// Offset counts dead-letter entries from the oldest, or from the
	// newest with Newest.
	Offset int64
	// Limit is the most jobs on the page (1..MaxDeadLetterPage; 0 means
	// the server's default, 20).
	Limit int64
	// Newest lists the newest death first.
	Newest bool
	// Reason, when not empty, keeps the jobs that died for it
	// (ReasonNacked, ReasonTTRExpired, ReasonWebhookFailed). The server
	// then examines at most 1,000 entries per call: a page may be short,
	// even empty, while NextOffset says where to go on.
	Reason string
	// Error, when not empty, keeps the jobs whose last error holds it (a
	// plain substring, at most 4096 bytes), examined as with Reason.
	Error string
}

// DeadLetterPage is a page of the dead letter.
type DeadLetterPage struct {
	Jobs []*Job
	// NextOffset is the Offset of the next page, -1 after the last one.
	NextOffset int64
	// Total is the number of entries in the dead letter: the last page
	// starts at Total-Limit.
	Total int64
}

// ListDeadLetterPage returns a page of queue's dead letter in either
// order, filtered by reason, with the dead letter's size. Kairos
// extension.
func (c *Client) ListDeadLetterPage(ctx context.Context, queue string, dq DeadLetterQuery) (*DeadLetterPage, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, err
	}
	if dq.Limit == 0 {
		dq.Limit = 20
	}
	if dq.Offset < 0 || dq.Limit < 1 || dq.Limit > MaxDeadLetterPage {
		return nil, argError("offset must be ≥ 0 and limit 1..%d (got %d, %d)", MaxDeadLetterPage, dq.Offset, dq.Limit)
	}
	order := "oldest"
	if dq.Newest {
		order = "newest"
	}
	q := url.Values{"offset": {strconv.FormatInt(dq.Offset, 10)}, "limit": {strconv.FormatInt(dq.Limit, 10)}, "order": {order}}
	if dq.Reason != "" {
		q.Set("reason", dq.Reason)
	}
	if dq.Error != "" {
		q.Set("error", dq.Error)
	}
	resp, err := c.t.do(ctx, request{
		method: http.MethodGet, path: c.apiPath(seg, "deadletter", "jobs"), query: q, idempotent: true,
		want: []int{http.StatusOK},
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Jobs       []*Job `json:"jobs"`
		NextOffset int64  `json:"next_offset"`
		Total      int64  `json:"total"`
	}
	if err := decode(resp, &out); err != nil {
		return nil, err
	}
	return &DeadLetterPage{Jobs: out.Jobs, NextOffset: out.NextOffset, Total: out.Total}, nil
}

// RespawnDeadJob moves one dead job of queue back to its ready queue with
// one try and a TTL of ttl (0: never expires); ErrNotFound when it is not
// dead. Kairos extension.
func (c *Client) RespawnDeadJob(ctx context.Context, queue, jobID string, ttl time.Duration) error {
	seg, err := queueSegment(queue)
	if err != nil {
		return err
	}
	if jobID == "" {
		return argError("empty job id")
	}
	q := url.Values{}
	if err := setSeconds(q, "ttl", ttl); err != nil {
		return err
	}
	_, err = c.t.do(ctx, request{
		method: http.MethodPut, path: c.apiPath(seg, "deadletter", "job", jobID), query: q,
		want: []int{http.StatusNoContent},
	})
	return err
}

// DeleteDeadJob deletes one dead job of queue; ErrNotFound when it is not
// dead. Kairos extension.
func (c *Client) DeleteDeadJob(ctx context.Context, queue, jobID string) error {
	seg, err := queueSegment(queue)
	if err != nil {
		return err
	}
	if jobID == "" {
		return argError("empty job id")
	}
	_, err = c.t.do(ctx, request{
		method: http.MethodDelete, path: c.apiPath(seg, "deadletter", "job", jobID),
		want: []int{http.StatusNoContent},
	})
	return err
}

// maxErrorText is the most bytes of error text the server keeps
// (engine.MaxErrorText); the client cuts before sending.
const maxErrorText = 4096

// cutText cuts s to at most n bytes at a UTF-8 character boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := 0; i < 3 && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// DeadLetterBulk is the outcome of RespawnDeadJobs or DeleteDeadJobs.
type DeadLetterBulk struct {
	// Count is how many jobs were respawned or deleted.
	Count int64 `json:"count"`
	// Missing are the named jobs that were not dead.
	Missing []string `json:"missing"`
	// More is true when a match stopped at its bound (10,000 jobs, or
	// 100,000 entries examined): call again for the rest.
	More bool `json:"more"`
}

// DeadLetterMatch selects the dead jobs of a bulk action by filters, as
// the listing's: a reason and a text the last error holds ("" = any).
type DeadLetterMatch struct {
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// RespawnDeadJobs respawns several dead jobs of queue with the TTL ttl
// (0: never expires): those of ids (1..1000), or, with ids nil, every
// one match selects. Kairos extension.
func (c *Client) RespawnDeadJobs(ctx context.Context, queue string, ids []string, match *DeadLetterMatch, ttl time.Duration) (*DeadLetterBulk, error) {
	if ttl < 0 {
		return nil, argError("ttl must not be negative")
	}
	secs := int64(ttl / time.Second)
	return c.deadBulk(ctx, queue, "respawn", ids, match, &secs)
}

// DeleteDeadJobs deletes several dead jobs of queue: those of ids
// (1..1000), or, with ids nil, every one match selects. Kairos extension.
func (c *Client) DeleteDeadJobs(ctx context.Context, queue string, ids []string, match *DeadLetterMatch) (*DeadLetterBulk, error) {
	return c.deadBulk(ctx, queue, "delete", ids, match, nil)
}

func (c *Client) deadBulk(ctx context.Context, queue, op string, ids []string, match *DeadLetterMatch, ttl *int64) (*DeadLetterBulk, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, err
	}
	if (len(ids) == 0) == (match == nil) {
		return nil, argError("name 1..1000 job IDs or a match, not both")
	}
	body, err := json.Marshal(struct {
		JobIDs []string         `json:"job_ids,omitempty"`
		Match  *DeadLetterMatch `json:"match,omitempty"`
		TTL    *int64           `json:"ttl,omitempty"`
	}{ids, match, ttl})
	if err != nil {
		return nil, err
	}
	resp, err := c.t.do(ctx, request{
		method: http.MethodPost, path: c.apiPath(seg, "deadletter", "jobs", op), body: body,
		header: http.Header{"Content-Type": {"application/json"}}, want: []int{http.StatusOK},
	})
	if err != nil {
		return nil, err
	}
	var out DeadLetterBulk
	if err := decode(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
