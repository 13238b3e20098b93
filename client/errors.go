package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Every error the server answers is an *APIError; match the
// common cases with errors.Is, read the details with errors.As:
//
//	job, err := c.Consume(ctx, "emails", 30*time.Second, 10*time.Second)
//	switch {
//	case errors.Is(err, client.ErrNoJob):
//		// nothing within the timeout
//	case err != nil:
//		var apiErr *client.APIError
//		if errors.As(err, &apiErr) {
//			log.Printf("status %d, request %s", apiErr.Status, apiErr.RequestID)
//		}
//	}
var (
	// ErrNoJob: a consume found no job within its timeout, or a peek found
	// the queue empty (404 "no job available" / "the queue is empty").
	ErrNoJob = errors.New("kairos: no job available")
	// ErrNotFound: a job, pool, route or rate limit does not exist (404
	// other than ErrNoJob).
	ErrNotFound = errors.New("kairos: not found")
	// ErrUnauthorized: no token, an unknown token, or refused admin
	// credentials (401).
	ErrUnauthorized = errors.New("kairos: unauthorized")
	// ErrForbidden: a scoped token used outside its queues or roles (403).
	ErrForbidden = errors.New("kairos: forbidden")
	// ErrRateLimited: the token's rate limit refused the request (429
	// other than ErrQuotaExceeded).
	ErrRateLimited = errors.New("kairos: rate limited")
	// ErrQuotaExceeded: the publish would take the namespace beyond its
	// quota (429 "namespace quota exceeded: max_jobs 50", Kairos): nothing
	// was written. Not retried: room comes back when the namespace's
	// consumers ACK (or an admin raises the quota, Admin.SetQuota).
	ErrQuotaExceeded = errors.New("kairos: namespace quota exceeded")
	// ErrBadRequest: the server refused a parameter, name or body (400,
	// 413), or the client refused an argument before sending anything.
	ErrBadRequest = errors.New("kairos: bad request")
	// ErrConflict: the thing to create exists already (409, e.g. a rate
	// limit added twice).
	ErrConflict = errors.New("kairos: conflict")
	// ErrServer: the server failed (5xx), e.g. Redis is unreachable or the
	// server is shutting down.
	ErrServer = errors.New("kairos: server error")
	// ErrUnavailable: the server cannot serve for now (503: Redis
	// unreachable, loading or failing over, or the server shutting down);
	// the same request may succeed later (APIError.RetryAfter). It also
	// matches ErrServer.
	ErrUnavailable = errors.New("kairos: service unavailable")
	// ErrMayExist: a publish was written but not confirmed by the replicas
	// the server waits for (Kairos's WaitReplicas): the job exists unless
	// a failover loses it, so publishing it again without a job key may
	// make a duplicate. APIError.JobID (JobIDs for a bulk publish) names
	// it. It also matches ErrUnavailable and ErrServer.
	ErrMayExist = errors.New("kairos: publish not replicated, the job may exist")
	// ErrPoolFull: the pool's Redis is full (507: maxmemory reached under
	// noeviction) and refused a publish, writing nothing. Not an outage:
	// the same publish fails until consumers make room, so it is not
	// retried; consumes and ACKs keep working. It also matches ErrServer.
	ErrPoolFull = errors.New("kairos: pool is full")
)

// APIError is an error answered by a Kairos (or lmstfy) server: a status
// code other than the one the call expects.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the server's message: the value of the body's "error",
	// "msg" or "err" key, else the status text.
	Message string
	// RequestID is the response's X-Request-ID; quote it when reporting a
	// problem: the server logs it with every line about the request.
	RequestID string
	// Method and Path name the request (without query or host).
	Method, Path string
	// RetryAfter is the response's Retry-After (503, 429), or 0.
	RetryAfter time.Duration
	// JobID and JobIDs name the jobs of a publish answered ErrMayExist.
	JobID  string
	JobIDs []string
}

// Error formats the error as "kairos: METHOD /path: 404 job not found
// (request 01J…)".
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("kairos: ")
	if e.Method != "" {
		b.WriteString(e.Method)
		b.WriteString(" ")
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "%d %s", e.Status, e.Message)
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

// Is reports whether the error matches one of the sentinels, so that
// errors.Is(err, ErrNoJob) works through any wrapping.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNoJob:
		return e.Status == http.StatusNotFound && e.noJob()
	case ErrNotFound:
		return e.Status == http.StatusNotFound && !e.noJob()
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests && !e.quotaExceeded()
	case ErrQuotaExceeded:
		return e.quotaExceeded()
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrStaleReceipt:
		return e.Status == http.StatusConflict && e.Message == "stale receipt"
	case ErrServer:
		return e.Status >= 500
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case ErrMayExist:
		return e.mayExist()
	case ErrPoolFull:
		return e.Status == http.StatusInsufficientStorage
	}
	return false
}

// mayExist reports whether the error is a publish that was written but
// not confirmed by the replicas.
func (e *APIError) mayExist() bool {
	return e.Status == http.StatusServiceUnavailable && (e.JobID != "" || len(e.JobIDs) > 0)
}

// quotaExceeded reports whether a 429 is a namespace quota's refusal
// rather than a rate limit's (whose text is lmstfy's "... reach the limit
// rate ...").
func (e *APIError) quotaExceeded() bool {
	return e.Status == http.StatusTooManyRequests && strings.HasPrefix(e.Message, "namespace quota exceeded")
}

// noJob reports whether a 404 means "no job" rather than "no such thing".
func (e *APIError) noJob() bool {
	return e.Message == "no job available" || e.Message == "the queue is empty"
}

// Temporary reports whether retrying the same request later may succeed:
// rate limits and server failures.
func (e *APIError) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// newAPIError builds the error for an unexpected response.
func newAPIError(method, path string, status int, header http.Header, body []byte) *APIError {
	return newAPIErrorHead(method, path, status, headOf(header), body)
}

// newAPIErrorHead is newAPIError of the headers the client reads.
func newAPIErrorHead(method, path string, status int, head respHead, body []byte) *APIError {
	e := &APIError{
		Status:     status,
		Message:    errorMessage(status, body),
		RequestID:  string(head.requestID),
		Method:     method,
		Path:       path,
		RetryAfter: retryAfter(string(head.retryAfter)),
	}
	if status == http.StatusServiceUnavailable {
		var ids struct {
			JobID  string   `json:"job_id"`
			JobIDs []string `json:"job_ids"`
		}
		if json.Unmarshal(body, &ids) == nil {
			e.JobID, e.JobIDs = ids.JobID, ids.JobIDs
		}
	}
	return e
}

// maxRetryAfter caps how long the client honours a Retry-After.
const maxRetryAfter = 30 * time.Second

// retryAfter reads Retry-After in seconds (the form Kairos sends); 0 when
// absent or not a number of seconds.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}

// errorMessage extracts the message of an error body: lmstfy answers
// {"error":…} mostly, {"msg":…} for "no job" and 429, {"err":…} when the
// rate limiter fails; 401 from basic auth has no body at all.
func errorMessage(status int, body []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) == nil {
		for _, key := range []string{"error", "msg", "err"} {
			raw, ok := m[key]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return s
			}
			return string(raw)
		}
	}
	if text := strings.TrimSpace(string(body)); text != "" && text != "null" && len(text) <= 200 {
		return text
	}
	if text := http.StatusText(status); text != "" {
		return strings.ToLower(text)
	}
	return "unexpected status"
}

// argError is a client-side refusal of an argument; it matches
// ErrBadRequest.
func argError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}
