package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// MaxBatchConsume is the most jobs one BatchConsume may take.
const MaxBatchConsume = 100

// Consume takes one job from queue, waiting up to timeout for one (0: do
// not wait). The job must be ACKed (Ack) within ttr, else it is delivered
// again while tries remain, then goes to the dead letter. ttr 0 takes the
// server's default (120 s). When no job comes, the error is ErrNoJob.
// Sub-second ttr and timeout are exact on Kairos (ttr_ms, timeout_ms) and
// rounded up to seconds by lmstfy. On Kairos the job carries its Receipt.
//
// The server caps the wait at its MaxTimeoutSecond (600 s); the request's
// deadline is always timeout plus the client's timeout, so a long-poll is
// never cut short by the client. A consume is retried only when the
// connection was refused: once sent, it may have taken a job.
func (c *Client) Consume(ctx context.Context, queue string, ttr, timeout time.Duration) (*Job, error) {
	return c.ConsumeFromQueues(ctx, ttr, timeout, queue)
}

// ConsumeFromQueues takes one job from the first of queues that has one
// (the first queue has the highest priority), waiting up to timeout. See
// Consume.
func (c *Client) ConsumeFromQueues(ctx context.Context, ttr, timeout time.Duration, queues ...string) (*Job, error) {
	seg, err := queuesSegment(queues)
	if err != nil {
		return nil, err
	}
	return c.consumeOne(ctx, extFixed, seg, ttr, timeout)
}

// consumeOne takes one job from the queues of seg (queuesSegment's),
// sending h.
func (c *Client) consumeOne(ctx context.Context, h fixedHeader, seg string, ttr, timeout time.Duration) (*Job, error) {
	resp, err := c.consume(ctx, h, seg, 1, ttr, timeout)
	if err != nil {
		return nil, err
	}
	return consumedJob(resp)
}

// consumedJob is the job of a single-job consume's answer.
func consumedJob(resp *response) (*Job, error) {
	job := new(Job)
	if !scanJob(resp.body, job) {
		if err := decode(resp, job); err != nil {
			return nil, err
		}
	}
	jobTraceHeaders(job, &resp.head)
	return job, nil
}

// ackConsume is a Worker's success path (issue #34): the receipt ACK of
// job (AckJob's, with actx) and the next consume from the queues of seg
// (consumeOne's, with ctx) go out together, in one write on one
// connection (HTTP/1.1 pipelining), and their answers come back in turn:
// one exchange per job instead of two, which the server's event loops
// serve in one pass. acked is called once with what AckJob would have
// returned, as soon as the ACK's answer is read (before the consume's,
// which may long-poll). consumed false means that no consume was made, or
// that the server did not serve it (it closed the connection after the
// ACK's answer, or the ACK's answer never came): the caller consumes
// itself. A job the consume took whose answer was lost comes back after
// its TTR, as after any lost consume. Without the client's own transport
// (WithHTTPClient, a proxy) or without a receipt, it is AckJob alone.
func (c *Client) ackConsume(actx, ctx context.Context, job *Job, h fixedHeader, seg string, ttr, timeout time.Duration,
	acked func(error)) (next *Job, consumed bool, err error) {
	if c.t.fast == nil || job.Receipt == "" || ctx.Err() != nil {
		acked(c.AckJob(actx, job))
		return nil, false, nil
	}
	ar, err := c.receiptAck(job)
	if err == nil {
		var cr request
		if cr, err = c.consumeRequest(h, seg, 1, ttr, timeout); err == nil {
			return c.pair(actx, ctx, job, &ar, &cr, acked)
		}
	}
	acked(c.AckJob(actx, job))
	return nil, false, nil
}

// pair is ackConsume's exchange of the ACK ar and the consume cr.
func (c *Client) pair(actx, ctx context.Context, job *Job, ar, cr *request, acked func(error)) (*Job, bool, error) {
	ackDone := false
	res, err := c.t.fastPair(actx, ctx, ar, cr, func(res fastResult) {
		ackDone = true
		_, retry, err := c.t.answer(ar, res.status, res.head, res.body)
		if err != nil && retry {
			// A 5xx: AckJob retries it as it would have (an ACK is
			// idempotent).
			err = c.AckJob(actx, job)
		}
		acked(ackOutcome(err))
	})
	if !ackDone {
		// The ACK's answer never came: it may or may not have been
		// served; an ACK is idempotent, so it goes again, alone.
		acked(c.AckJob(actx, job))
		return nil, false, nil
	}
	if errors.Is(err, errPairUnsent) {
		return nil, false, nil
	}
	var resp *response
	var retry bool
	if err != nil {
		_, retry, err = c.t.failed(ctx, cr, err)
	} else {
		resp, retry, err = c.t.answer(cr, res.status, res.head, res.body)
	}
	switch {
	case err != nil && retry:
		return nil, false, nil // e.g. a 503: consumeOne retries it
	case err != nil:
		return nil, true, err
	}
	next, err := consumedJob(resp)
	return next, true, err
}

// fixedHeader is a request's headers and, for the fast transport, their
// rendering (request.headText), made once for many requests.
type fixedHeader struct {
	h    http.Header
	text string
}

// extFixed is extHeader's.
var extFixed = fixedHeader{extHeader, extHeaderText}

// consumeHeader is the headers of a consume naming worker ("" names none).
func consumeHeader(worker string) fixedHeader {
	if worker == "" {
		return extFixed
	}
	h := http.Header{"X-Kairos-Extensions": {"1"}, "X-Kairos-Worker": {worker}}
	fh := fixedHeader{h: h}
	if b, err := appendHeader(nil, h); err == nil {
		fh.text = string(b)
	} // else the fast transport renders h and refuses it, per request
	return fh
}

// BatchConsume takes up to count (1..100) jobs from queues in priority
// order, waiting up to timeout for the first. See Consume.
func (c *Client) BatchConsume(ctx context.Context, queues []string, count int, ttr, timeout time.Duration) ([]*Job, error) {
	if count < 1 || count > MaxBatchConsume {
		return nil, argError("count must be 1..%d (got %d)", MaxBatchConsume, count)
	}
	seg, err := queuesSegment(queues)
	if err != nil {
		return nil, err
	}
	if count == 1 {
		job, err := c.consumeOne(ctx, extFixed, seg, ttr, timeout)
		if err != nil {
			return nil, err
		}
		return []*Job{job}, nil
	}
	resp, err := c.consume(ctx, extFixed, seg, count, ttr, timeout)
	if err != nil {
		return nil, err
	}
	var jobs []*Job
	if err := decode(resp, &jobs); err != nil {
		return nil, err
	}
	return jobs, nil
}

func (c *Client) consume(ctx context.Context, h fixedHeader, seg string, count int, ttr, timeout time.Duration) (*response, error) {
	r, err := c.consumeRequest(h, seg, count, ttr, timeout)
	if err != nil {
		return nil, err
	}
	return c.t.do(ctx, r)
}

// consumeRequest is the request of a consume of count jobs from the
// queues of seg, sending h.
func (c *Client) consumeRequest(h fixedHeader, seg string, count int, ttr, timeout time.Duration) (request, error) {
	r := request{
		method: http.MethodGet, path: c.nsPath, tail: [3]string{seg}, wait: timeout,
		header: h.h, headText: h.text, want: wantOK, unavailableRetry: true,
	}
	if ttr != 0 {
		if ttr < 0 {
			return request{}, argError("ttr must be > 0 (got %v)", ttr)
		}
		if err := addDuration(&r.params, "ttr", ttr); err != nil {
			return request{}, err
		}
	}
	if err := addDuration(&r.params, "timeout", timeout); err != nil {
		return request{}, err
	}
	if count != 1 {
		r.params.addInt("count", int64(count))
	}
	return r, nil
}

// Ack deletes job jobID of queue: it is done and will never be delivered
// again. ACKing an unknown job is not an error. ACK is idempotent and
// therefore retried after network errors.
func (c *Client) Ack(ctx context.Context, queue, jobID string) error {
	seg, err := queueSegment(queue)
	if err != nil {
		return err
	}
	if jobID == "" {
		return argError("empty job id")
	}
	_, err = c.t.do(ctx, request{
		method: http.MethodDelete, path: c.nsPath, tail: [3]string{seg, "/job/", url.PathEscape(jobID)},
		idempotent: true, want: wantNoContent,
	})
	return err
}

// PeekQueue returns the job a consume of queue would take next, without
// taking it; ErrNoJob when the queue has no ready job.
func (c *Client) PeekQueue(ctx context.Context, queue string) (*Job, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, err
	}
	return c.getJob(ctx, c.apiPath(seg, "peek"))
}

// PeekJob returns job jobID of queue in whatever state it is (ready,
// delayed, in flight, dead); ErrNotFound when there is no such job.
func (c *Client) PeekJob(ctx context.Context, queue, jobID string) (*Job, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, err
	}
	if jobID == "" {
		return nil, argError("empty job id")
	}
	return c.getJob(ctx, c.apiPath(seg, "job", jobID))
}

func (c *Client) getJob(ctx context.Context, path string) (*Job, error) {
	resp, err := c.t.do(ctx, request{method: http.MethodGet, path: path, header: extHeader, idempotent: true, want: []int{http.StatusOK}})
	if err != nil {
		return nil, err
	}
	job := new(Job)
	if err := decode(resp, job); err != nil {
		return nil, err
	}
	return job, nil
}

// QueueSize returns the number of ready jobs of queue (not the delayed, in
// flight or dead ones). It needs no token.
func (c *Client) QueueSize(ctx context.Context, queue string) (int, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return 0, err
	}
	return c.size(ctx, c.apiPath(seg, "size"))
}

func (c *Client) size(ctx context.Context, path string) (int, error) {
	resp, err := c.t.do(ctx, request{method: http.MethodGet, path: path, idempotent: true, want: []int{http.StatusOK}})
	if err != nil {
		return 0, err
	}
	var out struct {
		Size int `json:"size"`
	}
	if err := decode(resp, &out); err != nil {
		return 0, err
	}
	return out.Size, nil
}

// DestroyQueue deletes every ready, delayed and in-flight job of queue (its
// dead letter stays).
func (c *Client) DestroyQueue(ctx context.Context, queue string) error {
	seg, err := queueSegment(queue)
	if err != nil {
		return err
	}
	_, err = c.t.do(ctx, request{method: http.MethodDelete, path: c.apiPath(seg), idempotent: true, want: []int{http.StatusNoContent}})
	return err
}

// PeekDeadLetter returns the size of queue's dead letter and the ID of its
// oldest job ("" when empty).
func (c *Client) PeekDeadLetter(ctx context.Context, queue string) (size int, head string, err error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.t.do(ctx, request{method: http.MethodGet, path: c.apiPath(seg, "deadletter"), idempotent: true, want: []int{http.StatusOK}})
	if err != nil {
		return 0, "", err
	}
	var out struct {
		Head string `json:"deadletter_head"`
		Size int    `json:"deadletter_size"`
	}
	if err := decode(resp, &out); err != nil {
		return 0, "", err
	}
	return out.Size, out.Head, nil
}

// DeadLetterSize returns the number of jobs in queue's dead letter. It
// needs no token.
func (c *Client) DeadLetterSize(ctx context.Context, queue string) (int, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return 0, err
	}
	return c.size(ctx, c.apiPath(seg, "deadletter", "size"))
}

// RespawnDeadLetter moves the limit (> 0) oldest dead jobs of queue back to
// its ready queue, each with one try and a TTL of ttl (0: never expires;
// rounded up to seconds), and returns how many moved. Never retried once
// sent.
func (c *Client) RespawnDeadLetter(ctx context.Context, queue string, limit int64, ttl time.Duration) (int, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, argError("limit must be > 0 (got %d)", limit)
	}
	q := url.Values{"limit": {strconv.FormatInt(limit, 10)}}
	if err := setSeconds(q, "ttl", ttl); err != nil {
		return 0, err
	}
	resp, err := c.t.do(ctx, request{method: http.MethodPut, path: c.apiPath(seg, "deadletter"), query: q, want: []int{http.StatusOK}})
	if err != nil {
		return 0, err
	}
	var out struct {
		Count int `json:"count"`
	}
	if err := decode(resp, &out); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// DeleteDeadLetter deletes the limit (> 0) oldest dead jobs of queue.
// Never retried once sent.
func (c *Client) DeleteDeadLetter(ctx context.Context, queue string, limit int64) error {
	seg, err := queueSegment(queue)
	if err != nil {
		return err
	}
	if limit <= 0 {
		return argError("limit must be > 0 (got %d)", limit)
	}
	q := url.Values{"limit": {strconv.FormatInt(limit, 10)}}
	_, err = c.t.do(ctx, request{method: http.MethodDelete, path: c.apiPath(seg, "deadletter"), query: q, want: []int{http.StatusNoContent}})
	return err
}

// jobTraceHeaders takes a single-job consume's trace context from the
// response headers when the body has none (a server that answers it only
// there).
func jobTraceHeaders(job *Job, h *respHead) {
	if job.TraceParent == "" {
		job.TraceParent, job.TraceState = string(h.traceParent), string(h.traceState)
	}
}
