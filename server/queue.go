package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// sizeResponse is {"namespace","queue","size"}.
type sizeResponse struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Size      int64  `json:"size"`
}

// peekQueue serves GET /api/:namespace/:queue/peek: the next live job of
// the ready queue, not consumed (remain_tries as stored).
func (s *Server) peekQueue(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	job, err := state(c).eng.PeekQueue(c.Request.Context(), ns, q)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	if job == nil {
		s.failAPI(c, errQueueEmpty)
		return
	}
	if wantsExt(c) {
		writeJSON(c, http.StatusOK, newJobDetail(job, ns, q, s.now()))
		return
	}
	writeJSON(c, http.StatusOK, newJobResponse(job, ns, q, "", s.now()))
}

// peekJob serves GET /api/:namespace/:queue/job/:job_id: a job by ID in
// any state.
func (s *Server) peekJob(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	job, err := state(c).eng.PeekJob(c.Request.Context(), ns, q, c.Param("job_id"))
	if err != nil {
		s.failAPI(c, err)
		return
	}
	if job == nil {
		s.failAPI(c, errJobNotFound)
		return
	}
	if wantsExt(c) {
		writeJSON(c, http.StatusOK, newJobDetail(job, ns, q, s.now()))
		return
	}
	writeJSON(c, http.StatusOK, newJobResponse(job, ns, q, "", s.now()))
}

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

// size serves GET /api/:namespace/:queue/size (no token check).
func (s *Server) size(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	n, err := state(c).eng.Size(c.Request.Context(), ns, q)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	writeJSON(c, http.StatusOK, sizeResponse{Namespace: ns, Queue: q, Size: n})
}

// destroy serves DELETE /api/:namespace/:queue: every ready, delayed and
// in-flight job of the queue is deleted (the dead letter stays).
func (s *Server) destroy(c *gin.Context) {
	n, err := state(c).eng.Destroy(c.Request.Context(), c.Param("namespace"), c.Param("queue"))
	if err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).WithField("count", n).Info("queue destroyed")
	c.Status(http.StatusNoContent)
}
