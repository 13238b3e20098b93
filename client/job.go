package client

import (
	"encoding/json"
	"math"
	"net/url"
	"time"
)

// Job is a job as consumed or peeked.
type Job struct {
	// ID is the job ID, to ACK (Ack) or peek (PeekJob) it with.
	ID string
	// Namespace and Queue name the queue the job came from; after a
	// consume over several queues, Queue says which one.
	Namespace string
	Queue     string
	// Body is the job body, as published.
	Body []byte
	// TTL is the time the job has left before it expires, in whole seconds
	// as the server reports it; 0 means the job never expires.
	TTL time.Duration
	// ElapsedMS is the number of milliseconds since the job was first
	// published.
	ElapsedMS int64
	// RemainTries is the number of deliveries left after this one (for a
	// consume) or the tries stored (for a peek).
	RemainTries int
	// Attributes are the job's attributes, nil for jobs published without.
	Attributes map[string]string

	// The fields below are Kairos extensions; they stay empty with lmstfy.

	// Receipt identifies this delivery of a consumed job (16 hex digits):
	// AckJob, Release and Touch use it so that a delivery whose TTR has
	// expired cannot ACK or release the job's next delivery.
	Receipt string
	// State is the job's state in a peek or a dead-letter listing:
	// "ready", "delayed", "in_flight" or "dead".
	State string
	// Priority is the job's priority within its queue (peeks).
	Priority int
	// Deliveries is the number of times the job was delivered (peeks).
	Deliveries int
	// DueAt is when a delayed job becomes ready or an in-flight job's TTR
	// expires (peeks); zero when not applicable.
	DueAt time.Time
	// DeadAt and DeadReason say when and why a dead job died (peeks,
	// dead-letter listings).
	DeadAt     time.Time
	DeadReason string
	// TraceParent and TraceState are the W3C trace context the job was
	// published with (empty without one): the Worker starts each handler's
	// span from it, and Context returns a context carrying it.
	TraceParent string
	TraceState  string
	// Attempts are the job's last deliveries, newest first (PeekJob on
	// Kairos; at most 16).
	Attempts []Attempt
	// LastError is the error of the job's last failed delivery (PeekJob,
	// dead-letter listings), "" when none said one.
	LastError string
	// Group is the job's group within its queue (the Group publish
	// option), "" for the default group.
	Group string
}

// Attempt is one delivery of a job, as its history keeps it.
type Attempt struct {
	// Delivery is the delivery's number (1 = the first).
	Delivery int `json:"delivery"`
	// Outcome: "in_flight", "released" (handed back keeping the try),
	// "nacked" (handed back, the try spent), "ttr_expired" or
	// "webhook_failed". An ACKed job is deleted with its history.
	Outcome string `json:"outcome"`
	// Worker is the consumer's name (WorkerConfig.Name), "webhook" for
	// webhook deliveries, "" when none was given.
	Worker string `json:"worker"`
	// StartMS and EndMS are Unix milliseconds (0: unknown, or in flight);
	// DurationMS runs to now for an in-flight delivery.
	StartMS    int64 `json:"start_ms"`
	EndMS      int64 `json:"end_ms"`
	DurationMS int64 `json:"duration_ms"`
	// Error is what the consumer or the webhook's answer said went wrong.
	Error string `json:"error"`
}

// wireJob is the server's JSON shape of a job: lmstfy's fields, then the
// Kairos ones (only with X-Kairos-Extensions).
type wireJob struct {
	Attempts    []Attempt         `json:"attempts,omitempty"`
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	DeadAtMS    int64             `json:"dead_at_ms,omitempty"`
	DeadReason  string            `json:"dead_reason,omitempty"`
	Deliveries  int               `json:"deliveries,omitempty"`
	DueAtMS     int64             `json:"due_at_ms,omitempty"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	Group       string            `json:"group,omitempty"`
	JobID       string            `json:"job_id"`
	LastError   string            `json:"last_error,omitempty"`
	Namespace   string            `json:"namespace"`
	Priority    int               `json:"priority,omitempty"`
	Queue       string            `json:"queue"`
	Receipt     string            `json:"receipt,omitempty"`
	RemainTries int               `json:"remain_tries"`
	State       string            `json:"state,omitempty"`
	TraceParent string            `json:"traceparent,omitempty"`
	TraceState  string            `json:"tracestate,omitempty"`
	TTL         int64             `json:"ttl"`
}

// unixMS converts Unix milliseconds (0 = none) to a time.
func unixMS(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// toUnixMS converts a time (zero = none) to Unix milliseconds.
func toUnixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// MarshalJSON renders the job in the server's JSON shape (data in base64,
// ttl in seconds), so that tools print what the API answers.
func (j *Job) MarshalJSON() ([]byte, error) {
	body := j.Body
	if body == nil {
		body = []byte{}
	}
	return json.Marshal(wireJob{
		Attributes: j.Attributes, Data: body, ElapsedMS: j.ElapsedMS, JobID: j.ID,
		Namespace: j.Namespace, Queue: j.Queue, RemainTries: j.RemainTries,
		TTL: int64(j.TTL / time.Second), Receipt: j.Receipt, State: j.State, Priority: j.Priority,
		Deliveries: j.Deliveries, DueAtMS: toUnixMS(j.DueAt), DeadAtMS: toUnixMS(j.DeadAt), DeadReason: j.DeadReason,
		TraceParent: j.TraceParent, TraceState: j.TraceState, Attempts: j.Attempts, LastError: j.LastError,
		Group: j.Group,
	})
}

// UnmarshalJSON reads the server's JSON shape of a job.
func (j *Job) UnmarshalJSON(data []byte) error {
	var w wireJob
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*j = Job{
		ID: w.JobID, Namespace: w.Namespace, Queue: w.Queue, Body: w.Data,
		TTL: time.Duration(w.TTL) * time.Second, ElapsedMS: w.ElapsedMS,
		RemainTries: w.RemainTries, Attributes: w.Attributes,
		Receipt: w.Receipt, State: w.State, Priority: w.Priority, Deliveries: w.Deliveries,
		DueAt: unixMS(w.DueAtMS), DeadAt: unixMS(w.DeadAtMS), DeadReason: w.DeadReason,
		TraceParent: w.TraceParent, TraceState: w.TraceState, Attempts: w.Attempts, LastError: w.LastError,
		Group: w.Group,
	}
	return nil
}

// PublishOption sets a parameter of Publish, RePublish or BatchPublish.
// Parameters left unset take the server's defaults (lmstfy's: no delay, a
// TTL of one day, one try).
type PublishOption func(*publishParams)

type publishParams struct {
	delay, ttl       time.Duration
	hasDelay, hasTTL bool
	tries            int
	hasTries         bool
	attrs            map[string]string
	priority         int
	hasPriority      bool
	key              string
	hasKey           bool
	dueAt            time.Time
	group            string
	hasGroup         bool
}

// Delay makes the job consumable only after d. A d that is not a whole
// number of seconds is also sent in milliseconds (delay_ms, a Kairos
// extension, accurate to the millisecond); lmstfy, which ignores delay_ms,
// uses the seconds, rounded up.
func Delay(d time.Duration) PublishOption {
	return func(p *publishParams) { p.delay, p.hasDelay = d, true }
}

// TTL makes the job expire d after it is published; 0 means never. Like
// Delay, sub-second precision needs Kairos (ttl_ms); lmstfy rounds up.
func TTL(d time.Duration) PublishOption {
	return func(p *publishParams) { p.ttl, p.hasTTL = d, true }
}

// Tries sets how many times the job is delivered before it goes to the
// dead letter (1..65535).
func Tries(n int) PublishOption {
	return func(p *publishParams) { p.tries, p.hasTries = n, true }
}

// Attributes attaches attributes (at most 16; keys up to 32 bytes, stored
// lower-cased; values up to 128 bytes) to the job. Jobs with attributes get
// a versioned ID.
func Attributes(attrs map[string]string) PublishOption {
	return func(p *publishParams) {
		if p.attrs == nil {
			p.attrs = make(map[string]string, len(attrs))
		}
		for k, v := range attrs {
			p.attrs[k] = v
		}
	}
}

// Attribute attaches one attribute to the job (see Attributes).
func Attribute(key, value string) PublishOption {
	return Attributes(map[string]string{key: value})
}

// MaxPriority is the highest job priority.
const MaxPriority = 255

// Priority orders the job among the ready jobs of its queue: higher first,
// FIFO among equals (0..MaxPriority, default 0). Kairos extension.
func Priority(n int) PublishOption {
	return func(p *publishParams) { p.priority, p.hasPriority = n, true }
}

// MaxGroupLength is the longest group name.
const MaxGroupLength = 64

// Group puts the job in a group of its queue (Kairos extension): a queue's
// consumes serve its groups in turn (weighted round robin), so that one
// group's backlog never holds back another's jobs, and the queue's
// group_max_in_flight limits each group's jobs in flight (doc/API.md,
// "Groups and in-flight limits"). A name of 1..MaxGroupLength characters
// from [-_A-Za-z0-9], such as a customer's ID; jobs without one are in the
// default group. lmstfy ignores it. In BatchPublish every job gets it.
func Group(g string) PublishOption {
	return func(p *publishParams) { p.group, p.hasGroup = g, true }
}

// validGroup reports whether g is a group name the server accepts.
func validGroup(g string) bool {
	if g == "" || len(g) > MaxGroupLength {
		return false
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// MaxJobKey is the longest idempotency key, in bytes.
const MaxJobKey = 256

// JobKey makes the publish idempotent (Kairos extension): while the job
// published with key lives (its TTL), publishing the same key to the same
// queue again publishes nothing and returns the first job's ID, with no
// error. Such a publish is also safe to retry after a network error, and
// the client does. Not allowed in BatchPublish; CancelJobKey deletes the
// job by its key.
func JobKey(key string) PublishOption {
	return func(p *publishParams) { p.key, p.hasKey = key, true }
}

// DueAt makes the job consumable at t (Kairos extension): the server
// stores t itself, to the millisecond (a finer t is rounded up, so the job
// is never ready before t); a time in the past means now. Not together
// with Delay.
func DueAt(t time.Time) PublishOption {
	return func(p *publishParams) { p.dueAt = t }
}

// maxSeconds is the largest value of the server's uint32 second params.
const maxSeconds = math.MaxUint32

// seconds converts d to whole seconds, rounding up.
func seconds(name string, d time.Duration) (uint64, error) {
	if d < 0 {
		return 0, argError("%s must not be negative (got %v)", name, d)
	}
	s := uint64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	if s > maxSeconds {
		return 0, argError("%s too large (got %v)", name, d)
	}
	return s, nil
}

// setSeconds adds name=<d in seconds, rounded up> to q.
func setSeconds(q url.Values, name string, d time.Duration) error {
	var p params
	if err := addSeconds(&p, name, d); err != nil {
		return err
	}
	p.setIn(q)
	return nil
}

// setDuration adds name=<d in seconds, rounded up> to q and, when d is not
// a whole number of seconds, name_ms=<d in milliseconds, rounded up> too:
// Kairos takes the milliseconds, lmstfy the seconds.
func setDuration(q url.Values, name string, d time.Duration) error {
	var p params
	if err := addDuration(&p, name, d); err != nil {
		return err
	}
	p.setIn(q)
	return nil
}

// addSeconds is setSeconds into p.
func addSeconds(p *params, name string, d time.Duration) error {
	s, err := seconds(name, d)
	if err != nil {
		return err
	}
	p.addInt(name, int64(s))
	return nil
}

// addDuration is setDuration into p. name_ms is name+"_ms", from a
// constant for the names the client sends (no concatenation per call).
func addDuration(p *params, name string, d time.Duration) error {
	if err := addSeconds(p, name, d); err != nil {
		return err
	}
	if d%time.Second != 0 {
		ms := d / time.Millisecond
		if d%time.Millisecond != 0 {
			ms++
		}
		p.addInt(msName(name), int64(ms))
	}
	return nil
}

// msName is name+"_ms".
func msName(name string) string {
	switch name {
	case "delay":
		return "delay_ms"
	case "ttl":
		return "ttl_ms"
	case "ttr":
		return "ttr_ms"
	case "timeout":
		return "timeout_ms"
	}
	return name + "_ms"
}

// ceilUnixMilli is t in Unix milliseconds, rounded up.
func ceilUnixMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

// query renders the publish parameters and headers as url.Values.
func (p *publishParams) query() (url.Values, map[string][]string, error) {
	var ps params
	header, err := p.params(&ps)
	if err != nil {
		return nil, nil, err
	}
	q := url.Values{}
	ps.setIn(q)
	return q, header, nil
}

// params adds the publish parameters to ps and returns the headers
// (attributes), nil without.
func (p *publishParams) params(ps *params) (map[string][]string, error) {
	if p.hasDelay {
		if !p.dueAt.IsZero() {
			return nil, argError("Delay and DueAt exclude each other")
		}
		if err := addDuration(ps, "delay", p.delay); err != nil {
			return nil, err
		}
	}
	if p.hasTTL {
		if err := addDuration(ps, "ttl", p.ttl); err != nil {
			return nil, err
		}
	}
	if !p.dueAt.IsZero() {
		ps.addInt("due_at", ceilUnixMilli(p.dueAt))
	}
	if p.hasPriority {
		if p.priority < 0 || p.priority > MaxPriority {
			return nil, argError("priority must be 0..%d (got %d)", MaxPriority, p.priority)
		}
		ps.addInt("priority", int64(p.priority))
	}
	if p.hasGroup {
		if !validGroup(p.group) {
			return nil, argError("group must be 1..%d characters of [-_A-Za-z0-9] (got %q)", MaxGroupLength, p.group)
		}
		ps.add("group", p.group)
	}
	if p.hasKey {
		if p.key == "" || len(p.key) > MaxJobKey {
			return nil, argError("job key must be 1..%d bytes", MaxJobKey)
		}
		ps.add("job_key", p.key)
	}
	if p.hasTries {
		if p.tries < 1 || p.tries > math.MaxUint16 {
			return nil, argError("tries must be 1..65535 (got %d)", p.tries)
		}
		ps.addInt("tries", int64(p.tries))
	}
	var header map[string][]string
	if len(p.attrs) > 0 {
		header = map[string][]string{"Enable-Job-Version": {"YES"}}
		for k, v := range p.attrs {
			if !validHeaderName(k) {
				return nil, argError("attribute name %q: only letters, digits and -_.!#$%%&'*+^`|~ are allowed", k)
			}
			header["Job-Attr-"+k] = []string{v}
		}
	}
	return header, nil
}

// validHeaderName reports whether s is a non-empty HTTP token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' ||
			c == '\'' || c == '*' || c == '+' || c == '^' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}
