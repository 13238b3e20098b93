package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"
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
