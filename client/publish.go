package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
)

// MaxBulk is the most jobs one BatchPublish may carry.
const MaxBulk = 64

// MaxBodySize is the largest job body the server accepts.
const MaxBodySize = 1 << 20

// Publish publishes body to queue and returns the new job's ID.
//
//	id, err := c.Publish(ctx, "emails", []byte("hi"), client.Delay(5*time.Second), client.Tries(3))
//
// A publish without a job key is never re-sent after its request went out
// (that could publish it twice); it is retried only when the connection was
// refused. A publish with a JobKey (or with WithPublishKeys) is also
// retried after network errors and 5xx, including a 503 that says the job
// may exist (ErrMayExist): the retry answers the first job's ID.
func (c *Client) Publish(ctx context.Context, queue string, body []byte, opts ...PublishOption) (string, error) {
	return c.publish(ctx, queue, "", body, opts)
}

// RePublish publishes body as a new job of queue (new ID, parameters from
// opts) and deletes job jobID of the same queue, in one atomic step on
// Kairos. It returns the new job's ID. Typical use: give a failed job a
// delay before its next try.
func (c *Client) RePublish(ctx context.Context, queue, jobID string, body []byte, opts ...PublishOption) (string, error) {
	if jobID == "" {
		return "", argError("empty job id")
	}
	return c.publish(ctx, queue, jobID, body, opts)
}

func (c *Client) publish(ctx context.Context, queue, jobID string, body []byte, opts []PublishOption) (string, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return "", err
	}
	var p publishParams
	for _, o := range opts {
		o(&p)
	}
	if !p.hasKey && c.publishKeys {
		p.key, p.hasKey = rand.Text(), true
	}
	q, header, err := p.query()
	if err != nil {
		return "", err
	}
	if body == nil {
		body = []byte{}
	}
	path := c.apiPath(seg)
	if jobID != "" {
		path = c.apiPath(seg, "job", jobID)
	}
	// With a job key a publish is idempotent: re-sending it cannot publish
	// twice (the server answers 200 with the first job's ID).
	resp, err := c.t.do(ctx, request{
		method: http.MethodPut, path: path, query: q, body: body, header: header,
		idempotent: p.hasKey, want: []int{http.StatusCreated, http.StatusOK},
	})
	if err != nil {
		return "", err
	}
	if id, ok := scanJobID(resp.body); ok {
		return id, nil
	}
	var out struct {
		JobID string `json:"job_id"`
	}
	if err := decode(resp, &out); err != nil {
		return "", err
	}
	return out.JobID, nil
}

// BatchPublish publishes up to MaxBulk jobs to queue in one request, all or
// none, and returns their IDs in order. The JSON text of each element is
// one job body: a json.RawMessage (or []byte holding JSON) is sent byte for
// byte, a string s becomes the body "s" (with its quotes), any other value
// is JSON-encoded. Options apply to every job.
func (c *Client) BatchPublish(ctx context.Context, queue string, jobs []any, opts ...PublishOption) ([]string, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, argError("no jobs")
	}
	if len(jobs) > MaxBulk {
		return nil, argError("%d jobs in one bulk publish (at most %d)", len(jobs), MaxBulk)
	}
	var p publishParams
	for _, o := range opts {
		o(&p)
	}
	if p.hasKey {
		return nil, argError("JobKey is not allowed in BatchPublish")
	}
	q, header, err := p.query()
	if err != nil {
		return nil, err
	}
	body, err := bulkBody(jobs)
	if err != nil {
		return nil, err
	}
	resp, err := c.t.do(ctx, request{
		method: http.MethodPut, path: c.apiPath(seg, "bulk"), query: q, body: body, header: header,
		want: []int{http.StatusCreated},
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		JobIDs []string `json:"job_ids"`
	}
	if err := decode(resp, &out); err != nil {
		return nil, err
	}
	if len(out.JobIDs) != len(jobs) {
		return out.JobIDs, fmt.Errorf("kairos: bulk publish: %d jobs sent, %d IDs answered (request %s)", len(jobs), len(out.JobIDs), resp.requestID)
	}
	return out.JobIDs, nil
}

// bulkBody renders jobs as a JSON array, keeping raw JSON elements byte for
// byte (json.Marshal would compact them and escape <, > and &).
func bulkBody(jobs []any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, j := range jobs {
		if i > 0 {
			buf.WriteByte(',')
		}
		var raw []byte
		switch v := j.(type) {
		case json.RawMessage:
			raw = v
		case []byte:
			raw = v
		}
		if raw != nil {
			if !json.Valid(raw) {
				return nil, argError("job %d is not valid JSON", i)
			}
			buf.Write(raw)
			continue
		}
		if err := enc.Encode(j); err != nil {
			return nil, argError("job %d: %v", i, err)
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// decode unmarshals a response body.
func decode(resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("kairos: decode response (status %d, request %s): %w", resp.status, resp.requestID, err)
	}
	return nil
}
