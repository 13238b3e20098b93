package server

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// ack serves DELETE /api/:namespace/:queue/job/:job_id: 204 whether or not
// the job existed. With a receipt (Kairos) it is the ACK of one delivery.
func (s *Server) ack(c *gin.Context) {
	if _, ok := getQuery(c, "receipt"); ok {
		s.ackReceipt(c)
		return
	}
	err := state(c).eng.Delete(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id"))
	if err != nil {
		s.failAPI(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// parseReceipt reads the receipt parameter: 16 hex digits.
func parseReceipt(c *gin.Context) (string, error) {
	r := queryString(c, "receipt")
	if r == "" {
		return "", errMissingReceipt
	}
	if !validReceipt(r) {
		return "", errInvalidReceipt
	}
	return r, nil
}

// ackReceipt serves DELETE /api/:namespace/:queue/job/:job_id?receipt=R:
// the ACK of one delivery. 204 when the receipt is the job's current
// delivery, 409 when it is stale, 404 when there is no such job.
func (s *Server) ackReceipt(c *gin.Context) {
	x := state(c).eng
	receipt, err := parseReceipt(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	if err := x.Ack(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id"), receipt); err != nil {
		s.failAPI(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// release serves PUT /api/:namespace/:queue/job/:job_id/release: the
// consumer hands its delivery back, ready again after delay_ms (or delay
// seconds), or after the queue's backoff policy when neither is given.
// keep_try=true gives back the try the delivery spent.
func (s *Server) release(c *gin.Context) {
	x := state(c).eng
	receipt, err := parseReceipt(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	req := &engine.ReleaseRequest{
		Namespace: c.Param("namespace"), Queue: c.Param("queue"), ID: c.Param("job_id"),
		Receipt: receipt, Reason: engine.ReasonNacked,
	}
	delay, okMS, err := queryMS(c, "delay_ms", errInvalidDelayMS)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	_, okS := getQuery(c, "delay")
	delayS, err := queryUint(c, "delay", 32, 0, errInvalidDelay)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	switch {
	case okMS:
		req.Delay = delay
	case okS:
		req.Delay = secs(delayS)
	default:
		req.UsePolicy = true
	}
	if v, ok := getQuery(c, "keep_try"); ok {
		if req.KeepTry, err = strconv.ParseBool(v); err != nil {
			s.failAPI(c, errInvalidKeepTry)
			return
		}
	}
	if req.Error, err = releaseError(c); err != nil {
		s.failAPI(c, err)
		return
	}
	if err := x.Release(c.Request.Context(), req); err != nil {
		s.failAPI(c, err)
		return
	}
	if s.debug {
		s.reqLogger(c).WithFields(logrus.Fields{"delay": req.Delay, "policy": req.UsePolicy, "keep_try": req.KeepTry}).Debug("job released")
	}
	c.Status(http.StatusNoContent)
}

// touchResponse is 200 {"due_at_ms":…,"job_id":…}.
type touchResponse struct {
	DueAtMS int64  `json:"due_at_ms"`
	JobID   string `json:"job_id"`
}

// touch serves PUT /api/:namespace/:queue/job/:job_id/touch: the delivery's
// TTR restarts from now with ttr_ms (or ttr seconds, default TTRSecond).
func (s *Server) touch(c *gin.Context) {
	x := state(c).eng
	receipt, err := parseReceipt(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ttr, err := queryUint(c, "ttr", 32, s.def.ttr, errInvalidTTR)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ttrD := secs(ttr)
	if d, ok, err := queryMS(c, "ttr_ms", errInvalidTTRMS); err != nil {
		s.failAPI(c, err)
		return
	} else if ok {
		ttrD = d
	}
	id := c.Param("job_id")
	due, err := x.Touch(c.Request.Context(), c.Param("namespace"), c.Param("queue"), id, receipt, ttrD)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	writeJSON(c, http.StatusOK, touchResponse{DueAtMS: due.UnixMilli(), JobID: id})
}
