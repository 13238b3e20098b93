package server

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// publishResponse is 201 {"job_id":…,"msg":"published"}.
type publishResponse struct {
	JobID string `json:"job_id"`
	Msg   string `json:"msg"`
}

// bulkResponse is 201 {"job_ids":[…],"msg":"published"}.
type bulkResponse struct {
	JobIDs []string `json:"job_ids"`
	Msg    string   `json:"msg"`
}

// publish serves PUT /api/:namespace/:queue and the re-publish
// PUT /api/:namespace/:queue/job/:job_id. Unlike lmstfy, re-publish
// validates everything first and then publishes the new job and deletes
// the old one in one atomic engine step.
func (s *Server) publish(c *gin.Context) {
	st := state(c)
	p, err := s.parsePublish(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ext, err := s.parsePublishExt(c, &p)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	body, err := readBody(c, engine.MaxBodySize, errBodyTooLarge)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	if err := parseAttributes(c, &p); err != nil {
		s.failAPI(c, err)
		return
	}
	req := s.publishRequest(c, &p, body)
	req.TraceParent, req.TraceState = s.publishTrace(c)
	ext.apply(req)
	req.Replaces = c.Param("job_id")
	id, err := st.eng.Publish(c.Request.Context(), req)
	if err != nil {
		if errors.Is(err, engine.ErrKeyExists) && id != "" {
			// Kairos idempotency key: the first job stands.
			s.spanJobIDs(c, id)
			writeJSON(c, http.StatusOK, publishResponse{JobID: id, Msg: "duplicate job_key"})
			return
		}
		s.failAPI(c, publishFailure(err, id))
		return
	}
	if s.debug {
		s.reqLogger(c).WithFields(logrus.Fields{
			"new_job_id": id, "delay": p.delay, "ttl": p.ttl, "tries": p.tries,
		}).Debug("job published")
	}
	s.spanJobIDs(c, id)
	writeJSON(c, http.StatusCreated, publishResponse{JobID: id, Msg: "published"})
}

func (s *Server) publishRequest(c *gin.Context, p *publishParams, body []byte) *engine.PublishRequest {
	return &engine.PublishRequest{
		Namespace:  c.Param("namespace"),
		Queue:      c.Param("queue"),
		Body:       body,
		TTL:        secs(p.ttl),
		Delay:      secs(p.delay),
		Tries:      p.tries,
		Attributes: p.attributes,
		Versioned:  p.versioned,
	}
}

// publishBulk serves PUT /api/:namespace/:queue/bulk: a JSON array whose
// elements' raw JSON texts become the job bodies, published atomically.
func (s *Server) publishBulk(c *gin.Context) {
	st := state(c)
	p, err := s.parsePublish(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ext, err := s.parsePublishExt(c, &p)
	if err == nil && ext.key != "" {
		err = errBulkJobKey
	}
	if err != nil {
		s.failAPI(c, err)
		return
	}
	body, err := readBody(c, maxBulkBody, errBodyTooLarge)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	var jobs []json.RawMessage
	if err := json.Unmarshal(body, &jobs); err != nil {
		s.failAPI(c, errNotArray)
		return
	}
	switch {
	case len(jobs) == 0:
		s.failAPI(c, errNoJobs)
		return
	case len(jobs) > engine.MaxBulkPublish:
		s.failAPI(c, errTooManyJobs)
		return
	}
	for _, j := range jobs {
		if len(j) > engine.MaxBodySize {
			s.failAPI(c, errJobTooLarge)
			return
		}
	}
	if err := parseAttributes(c, &p); err != nil {
		s.failAPI(c, err)
		return
	}
	if st.adm != nil {
		// The token's jobs limit weighs a bulk by its jobs: admitted on
		// its first, charged the rest now.
		if err := s.chargeJobs(c.Request.Context(), st.adm, len(jobs)-1); err != nil {
			s.failAPI(c, err)
			return
		}
	}
	reqs := make([]*engine.PublishRequest, len(jobs))
	tp, ts := s.publishTrace(c)
	for i, j := range jobs {
		reqs[i] = s.publishRequest(c, &p, j)
		reqs[i].TraceParent, reqs[i].TraceState = tp, ts
		ext.apply(reqs[i])
	}
	ids, err := st.eng.PublishBatch(c.Request.Context(), reqs)
	if err != nil {
		s.failAPI(c, publishFailure(err, ids...))
		return
	}
	if s.debug {
		s.reqLogger(c).WithFields(logrus.Fields{
			"jobs": len(ids), "delay": p.delay, "ttl": p.ttl, "tries": p.tries,
		}).Debug("jobs published")
	}
	s.spanJobIDs(c, ids...)
	writeJSON(c, http.StatusCreated, bulkResponse{JobIDs: ids, Msg: "published"})
}

// maxBulkBody caps a bulk publish body: 64 jobs of 1 MiB plus room for
// the commas, brackets and whitespace between them.
const maxBulkBody = engine.MaxBulkPublish*engine.MaxBodySize + 64<<10

// readBody reads at most limit bytes of the request body: errTooLarge when
// there are more (without reading them), errReadBody when reading fails.
func readBody(c *gin.Context, limit int64, errTooLarge *apiError) ([]byte, error) {
	r := c.Request
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil
	}
	// Preallocate what Content-Length announces (+1 to see EOF without
	// growing), but never more than one job's worth up front: a client
	// announcing 64 MiB must send them before they are allocated.
	capHint := int64(512)
	if r.ContentLength > 0 {
		capHint = min(r.ContentLength, engine.MaxBodySize) + 1
	}
	body := http.MaxBytesReader(c.Writer, r.Body, limit)
	// A body that outgrows buf is read into chunks (doubling up to one
	// job's size) joined once at the end: a growing slice would allocate
	// about five times a large bulk body, a chunk list twice.
	buf := make([]byte, 0, capHint)
	var full [][]byte
	size := 0
	for {
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, errTooLarge
			}
			return nil, errReadBody
		}
		if len(buf) == cap(buf) {
			full = append(full, buf)
			size += len(buf)
			buf = make([]byte, 0, min(max(2*len(buf), 4096), engine.MaxBodySize))
		}
	}
	if full == nil {
		return buf, nil
	}
	out := make([]byte, 0, size+len(buf))
	for _, b := range full {
		out = append(out, b...)
	}
	return append(out, buf...), nil
}

// publishParams are the query parameters of the publish routes.
type publishParams struct {
	delay, ttl uint64 // seconds
	tries      uint16
	versioned  bool
	attributes map[string]string
}

// parsePublish validates publish parameters in lmstfy's order: delay,
// ttl, ttl ≥ delay, tries. Attributes are collected by parseAttributes,
// after the body has been read.
func (s *Server) parsePublish(c *gin.Context) (publishParams, error) {
	var p publishParams
	var err error
	if p.delay, err = queryUint(c, "delay", 32, s.def.delay, errInvalidDelay); err != nil {
		return p, err
	}
	if p.ttl, err = queryUint(c, "ttl", 32, s.def.ttl, errInvalidTTL); err != nil {
		return p, err
	}
	if p.ttl > 0 && p.ttl < p.delay {
		return p, errTTLShorter
	}
	tries, err := queryUint(c, "tries", 16, s.def.tries, errInvalidTries)
	if err != nil {
		return p, err
	}
	if tries == 0 {
		return p, errZeroTries
	}
	p.tries = uint16(tries)
	return p, nil
}

// Attribute limits (lmstfy, spec 3.2).
const (
	maxAttributes        = 16
	maxAttributeKeyLen   = 32
	maxAttributeValueLen = 128
	attributePrefix      = "Job-Attr-"
)

// parseAttributes reads Enable-Job-Version and the Job-Attr-* headers:
// only with the version header (value "YES", any case) are attributes
// collected and the job versioned. Keys are what follows "Job-Attr-" in the
// canonical header name, truncated to 32 bytes and lower-cased; values are
// the first value when non-empty, truncated to 128 bytes.
func parseAttributes(c *gin.Context, p *publishParams) error {
	if !strings.EqualFold(c.GetHeader("Enable-Job-Version"), "YES") {
		return nil
	}
	p.versioned = true
	var attrs map[string]string
	for k, v := range c.Request.Header {
		if !strings.HasPrefix(k, attributePrefix) || len(v) == 0 || v[0] == "" {
			continue
		}
		k = k[len(attributePrefix):]
		if len(k) > maxAttributeKeyLen {
			k = k[:maxAttributeKeyLen]
		}
		val := v[0]
		if len(val) > maxAttributeValueLen {
			val = val[:maxAttributeValueLen]
		}
		if attrs == nil {
			attrs = make(map[string]string)
		}
		attrs[strings.ToLower(k)] = val
	}
	if len(attrs) > maxAttributes {
		return errTooManyAttrs
	}
	p.attributes = attrs
	return nil
}

// publishExt is what the Kairos publish parameters add to a publish.
type publishExt struct {
	delay, ttl time.Duration // effective, whichever form gave them
	// dueAt is due_at, stored as is: delay is only its estimate, for the
	// checks, as the engine reads its clock later.
	dueAt    time.Time
	priority int
	key      string
	// group is the job's group in its queue (issue #32; "" = default).
	group string
}

func (x *publishExt) apply(req *engine.PublishRequest) {
	req.Delay, req.TTL, req.Priority, req.Key, req.Group = x.delay, x.ttl, x.priority, x.key, x.group
	if !x.dueAt.IsZero() {
		req.Delay, req.DueAt = 0, x.dueAt
	}
}

// parsePublishExt reads the Kairos publish parameters, after lmstfy's
// (parsePublish), in this order: delay_ms, ttl_ms, due_at, the TTL ≥ delay
// rule on the effective values, priority, group, job_key / Idempotency-Key.
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
	if x.group, err = queryGroup(c); err != nil {
		return x, err
	}
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

// queryGroup reads the optional group parameter: a valid group name
// (engine.ValidGroup); absent is the default group, "" or anything else
// invalid is errInvalidGroup. The event loops take a publish's group with
// the same check (loopHost.Take).
func queryGroup(c *gin.Context) (string, error) {
	g, ok := getQuery(c, "group")
	if ok && !engine.ValidGroup(g) {
		return "", errInvalidGroup
	}
	return g, nil
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
