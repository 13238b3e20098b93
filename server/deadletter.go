package server

import (
	"math"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// deadLetterResponse is lmstfy's dead letter peek.
type deadLetterResponse struct {
	DeadLetterHead string `json:"deadletter_head"`
	DeadLetterSize int64  `json:"deadletter_size"`
	Namespace      string `json:"namespace"`
	Queue          string `json:"queue"`
}

// respawnResponse is {"count":n,"msg":"respawned"}.
type respawnResponse struct {
	Count int64  `json:"count"`
	Msg   string `json:"msg"`
}

// peekDeadLetter serves GET /api/:namespace/:queue/deadletter: size and
// oldest job ID ("" when empty), always 200.
func (s *Server) peekDeadLetter(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	dl, err := state(c).eng.PeekDeadLetter(c.Request.Context(), ns, q)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	writeJSON(c, http.StatusOK, deadLetterResponse{
		DeadLetterHead: dl.Head, DeadLetterSize: dl.Size, Namespace: ns, Queue: q,
	})
}

// respawnDeadLetter serves PUT /api/:namespace/:queue/deadletter?limit=&ttl=:
// the oldest limit dead jobs go back to the ready queue with one try.
func (s *Server) respawnDeadLetter(c *gin.Context) {
	limit, err := deadLetterLimit(c) // lmstfy's, or "all"
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ttl, err := queryInt64(c, "ttl", int64(s.def.ttl), 0, errInvalidTTL)
	if err != nil || ttl > maxDurationSeconds {
		s.failAPI(c, errInvalidTTL)
		return
	}
	ns, q := c.Param("namespace"), c.Param("queue")
	n, err := state(c).eng.RespawnDeadLetter(c.Request.Context(), ns, q, limit, secs(uint64(ttl)))
	if err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).WithFields(logrus.Fields{"limit": limit, "count": n}).Info("dead letter respawned")
	writeJSON(c, http.StatusOK, respawnResponse{Count: n, Msg: "respawned"})
}

// deleteDeadLetter serves DELETE /api/:namespace/:queue/deadletter?limit=.
func (s *Server) deleteDeadLetter(c *gin.Context) {
	limit, err := deadLetterLimit(c) // lmstfy's, or "all"
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ns, q := c.Param("namespace"), c.Param("queue")
	n, err := state(c).eng.DeleteDeadLetter(c.Request.Context(), ns, q, limit)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).WithFields(logrus.Fields{"limit": limit, "count": n}).Info("dead letter deleted")
	c.Status(http.StatusNoContent)
}

// deadLetterSize serves GET /api/:namespace/:queue/deadletter/size (no
// token check).
func (s *Server) deadLetterSize(c *gin.Context) {
	ns, q := c.Param("namespace"), c.Param("queue")
	n, err := state(c).eng.DeadLetterSize(c.Request.Context(), ns, q)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	writeJSON(c, http.StatusOK, sizeResponse{Namespace: ns, Queue: q, Size: n})
}

// deadLetterLimit reads the limit of lmstfy's respawn and delete: an int64
// ≥ 1, or "all" (Kairos).
func deadLetterLimit(c *gin.Context) (int64, error) {
	if v, ok := getQuery(c, "limit"); ok && v == "all" {
		return math.MaxInt64, nil
	}
	return queryInt64(c, "limit", 1, 1, errInvalidLimit)
}

// deadJobsResponse is a page of the dead letter.
type deadJobsResponse struct {
	Jobs       []jobDetail `json:"jobs"`
	NextOffset int64       `json:"next_offset"`
	// Total is the dead letter's size, sent when the request names order
	// or reason (the default answer stays as it was).
	Total *int64 `json:"total,omitempty"`
}

// deadLetterQuery reads the page a dead-letter listing asks for:
// offset, limit, order (oldest or newest) and reason. named is true when
// order or reason was given.
func deadLetterQuery(c *gin.Context) (q engine.DeadLetterQuery, named bool, err error) {
	if q.Offset, err = queryInt64(c, "offset", 0, 0, errInvalidOffset); err != nil {
		return q, false, err
	}
	q.Limit, err = queryInt64(c, "limit", defaultDeadPage, 1, errInvalidLimit)
	if err != nil || q.Limit > maxDeadPage {
		return q, false, errInvalidLimit
	}
	if q.Offset > math.MaxInt64-engine.MaxDeadScan {
		return q, false, errInvalidOffset
	}
	if v, ok := getQuery(c, "order"); ok {
		named = true
		switch v {
		case "oldest":
		case "newest":
			q.Newest = true
		default:
			return q, false, errInvalidDeadOrder
		}
	}
	if v, ok := getQuery(c, "reason"); ok {
		named = true
		if q.Reason = engine.DeadReason(v); !engine.ValidDeadReason(q.Reason) {
			return q, false, errInvalidReason
		}
	}
	return q, named, nil
}

// listDeadLetter serves GET /api/:namespace/:queue/deadletter/jobs?offset=&limit=&order=&reason=:
// dead jobs oldest first (newest first with order=newest), with bodies,
// reasons and times, only those of one reason with reason=. next_offset
// is the offset of the next page, -1 after the last one; total, sent with
// order or reason, is the dead letter's size.
func (s *Server) listDeadLetter(c *gin.Context) {
	q, named, err := deadLetterQuery(c)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	ns, qn := c.Param("namespace"), c.Param("queue")
	// Offsets count dead-letter entries, and a page skips entries whose job
	// is gone (deleted, or expired by the dead TTL): the next page starts
	// after the last entry examined, whatever this page returned. With a
	// reason, one call examines at most engine.MaxDeadScan entries.
	page, err := state(c).eng.ListDeadLetterPage(c.Request.Context(), ns, qn, q)
	if err != nil {
		s.failAPI(c, err)
		return
	}
	out := deadJobsResponse{Jobs: make([]jobDetail, len(page.Jobs)), NextOffset: page.Next}
	if named {
		out.Total = &page.Size
	}
	now := s.now()
	for i, j := range page.Jobs {
		out.Jobs[i] = newJobDetail(j, ns, qn, now)
	}
	writeJSON(c, http.StatusOK, out)
}

// respawnDeadJob serves PUT /api/:namespace/:queue/deadletter/job/:job_id?ttl=:
// one dead job back to the ready queue with one try (404 when it is not
// dead).
func (s *Server) respawnDeadJob(c *gin.Context) {
	x := state(c).eng
	ttl, err := queryInt64(c, "ttl", int64(s.def.ttl), 0, errInvalidTTL)
	if err != nil || ttl > maxDurationSeconds {
		s.failAPI(c, errInvalidTTL)
		return
	}
	if err := x.RespawnDeadJob(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id"), secs(uint64(ttl))); err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).Info("dead job respawned")
	c.Status(http.StatusNoContent)
}

// deleteDeadJob serves DELETE /api/:namespace/:queue/deadletter/job/:job_id
// (404 when it is not dead).
func (s *Server) deleteDeadJob(c *gin.Context) {
	x := state(c).eng
	if err := x.DeleteDeadJob(c.Request.Context(), c.Param("namespace"), c.Param("queue"), c.Param("job_id")); err != nil {
		s.failAPI(c, err)
		return
	}
	s.reqLogger(c).Info("dead job deleted")
	c.Status(http.StatusNoContent)
}
