package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// The success statuses of the hot calls, shared (no slice per call).
var (
	wantPublish   = []int{http.StatusCreated, http.StatusOK}
	wantCreated   = []int{http.StatusCreated}
	wantOK        = []int{http.StatusOK}
	wantNoContent = []int{http.StatusNoContent}
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
	p := applyPublish(opts)
	if !p.hasKey && c.publishKeys {
		p.key, p.hasKey = rand.Text(), true
	}
	r := request{
		method: http.MethodPut, path: c.nsPath, tail: [3]string{seg}, body: body,
		// With a job key a publish is idempotent: re-sending it cannot
		// publish twice (the server answers 200 with the first job's ID).
		idempotent: p.hasKey, want: wantPublish,
	}
	header, err := p.params(&r.params)
	if err != nil {
		return "", err
	}
	r.header = header
	if r.body == nil {
		r.body = []byte{}
	}
	if jobID != "" {
		r.tail[1], r.tail[2] = "/job/", url.PathEscape(jobID)
	}
	resp, err := c.t.do(ctx, r)
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
	p := applyPublish(opts)
	if p.hasKey {
		return nil, argError("JobKey is not allowed in BatchPublish")
	}
	r := request{method: http.MethodPut, path: c.nsPath, tail: [3]string{seg, "/bulk"}, want: wantCreated}
	header, err := p.params(&r.params)
	if err != nil {
		return nil, err
	}
	r.header = header
	if r.body, err = bulkBody(jobs); err != nil {
		return nil, err
	}
	resp, err := c.t.do(ctx, r)
	if err != nil {
		return nil, err
	}
	ids, ok := scanJobIDs(resp.body)
	if !ok {
		out := new(struct {
			JobIDs []string `json:"job_ids"`
		})
		if err := decode(resp, out); err != nil {
			return nil, err
		}
		ids = out.JobIDs
	}
	if len(ids) != len(jobs) {
		return ids, fmt.Errorf("kairos: bulk publish: %d jobs sent, %d IDs answered (request %s)", len(jobs), len(ids), resp.requestID())
	}
	return ids, nil
}

// applyPublish returns the parameters opts set. Without options nothing
// is allocated (the options' closures make the parameters they are given
// escape).
func applyPublish(opts []PublishOption) publishParams {
	if len(opts) == 0 {
		return publishParams{}
	}
	p := new(publishParams)
	for _, o := range opts {
		o(p)
	}
	return *p
}

// bulkBody renders jobs as a JSON array, keeping raw JSON elements byte for
// byte (json.Marshal would compact them and escape <, > and &). ASCII
// strings and raw elements are written into a buffer of their size as
// encoding/json would write them; the other values go through it.
func bulkBody(jobs []any) ([]byte, error) {
	size := 2 + len(jobs)
	for _, j := range jobs {
		switch v := j.(type) {
		case string:
			size += len(v) + 2
		case json.RawMessage:
			size += len(v)
		case []byte:
			size += len(v)
		default:
			size += 64
		}
	}
	buf := make([]byte, 1, size)
	buf[0] = '['
	var enc *json.Encoder
	var out *bytes.Buffer
	for i, j := range jobs {
		if i > 0 {
			buf = append(buf, ',')
		}
		var raw []byte
		switch v := j.(type) {
		case json.RawMessage:
			raw = v
		case []byte:
			raw = v
		case string:
			if ascii(v) {
				buf = appendJSONString(buf, v)
				continue
			}
		}
		if raw != nil {
			if !json.Valid(raw) {
				return nil, argError("job %d is not valid JSON", i)
			}
			buf = append(buf, raw...)
			continue
		}
		if enc == nil {
			out = new(bytes.Buffer)
			enc = json.NewEncoder(out)
			enc.SetEscapeHTML(false)
		}
		out.Reset()
		if err := enc.Encode(j); err != nil {
			return nil, argError("job %d: %v", i, err)
		}
		buf = append(buf, bytes.TrimSuffix(out.Bytes(), []byte("\n"))...) // Encode's newline
	}
	return append(buf, ']'), nil
}

// ascii reports whether s is all ASCII.
func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// appendJSONString appends the ASCII string s as a JSON string, escaped
// as encoding/json escapes it with HTML escaping off
// (TestBulkBodyMatchesEncoder).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decode unmarshals a response body.
func decode(resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("kairos: decode response (status %d, request %s): %w", resp.status, resp.requestID(), err)
	}
	return nil
}
