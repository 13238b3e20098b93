package server

import (
	"encoding/json"
	"errors"
	"net/http"

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
	ext.apply(req)
	req.Replaces = c.Param("job_id")
	id, err := st.eng.Publish(c.Request.Context(), req)
	if err != nil {
		if errors.Is(err, engine.ErrKeyExists) && id != "" {
			// Kairos idempotency key: the first job stands.
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
	reqs := make([]*engine.PublishRequest, len(jobs))
	for i, j := range jobs {
		reqs[i] = s.publishRequest(c, &p, j)
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
	writeJSON(c, http.StatusCreated, bulkResponse{JobIDs: ids, Msg: "published"})
}
