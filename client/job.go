package client

import (
	"encoding/json"
	"math"
	"net/url"
	"strconv"
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
}

// wireJob is the server's JSON shape of a job (lmstfy's).
type wireJob struct {
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	JobID       string            `json:"job_id"`
	Namespace   string            `json:"namespace"`
	Queue       string            `json:"queue"`
	RemainTries int               `json:"remain_tries"`
	TTL         int64             `json:"ttl"`
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
		TTL: int64(j.TTL / time.Second),
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
}

// Delay makes the job consumable only after d. Kairos is accurate to the
// millisecond; a d that is not a whole number of seconds is sent in
// milliseconds (delay_ms) when the server supports it, else rounded up.
func Delay(d time.Duration) PublishOption {
	return func(p *publishParams) { p.delay, p.hasDelay = d, true }
}

// TTL makes the job expire d after it is published; 0 means never.
// Rounded up to whole seconds.
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
	s, err := seconds(name, d)
	if err != nil {
		return err
	}
	q.Set(name, strconv.FormatUint(s, 10))
	return nil
}

// query renders the publish parameters and headers.
func (p *publishParams) query() (url.Values, map[string][]string, error) {
	q := url.Values{}
	if p.hasDelay {
		if err := setSeconds(q, "delay", p.delay); err != nil {
			return nil, nil, err
		}
	}
	if p.hasTTL {
		if err := setSeconds(q, "ttl", p.ttl); err != nil {
			return nil, nil, err
		}
	}
	if p.hasTries {
		if p.tries < 1 || p.tries > math.MaxUint16 {
			return nil, nil, argError("tries must be 1..65535 (got %d)", p.tries)
		}
		q.Set("tries", strconv.Itoa(p.tries))
	}
	var header map[string][]string
	if len(p.attrs) > 0 {
		header = map[string][]string{"Enable-Job-Version": {"YES"}}
		for k, v := range p.attrs {
			if !validHeaderName(k) {
				return nil, nil, argError("attribute name %q: only letters, digits and -_.!#$%%&'*+^`|~ are allowed", k)
			}
			header["Job-Attr-"+k] = []string{v}
		}
	}
	return q, header, nil
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
