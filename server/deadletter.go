package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"time"

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
	if v, ok := getQuery(c, "error"); ok && v != "" {
		named = true
		if len(v) > engine.MaxErrorText {
			return q, false, errInvalidErrorText
		}
		q.Error = v
	}
	return q, named, nil
}

// listDeadLetter serves GET /api/:namespace/:queue/deadletter/jobs?offset=&limit=&order=&reason=&error=:
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

// Bulk actions on the dead letter (POST …/deadletter/jobs/respawn and
// …/deadletter/jobs/delete): the jobs named, or every job that matches
// the filters of the listing.

// maxBulkIDs is the most job IDs one bulk request names; maxBulkMatch the
// most jobs one "match" request acts on (the answer's more says whether
// it stopped there), examining at most maxBulkScan entries.
const (
	maxBulkIDs   = 1000
	maxBulkMatch = 10000
	maxBulkScan  = 100 * engine.MaxDeadScan
)

var errInvalidBulk = badRequest(`invalid body: {"job_ids":[…]} (1 to 1000) or {"match":{"reason":…,"error":…}}`)

// deadBulkRequest is the body of a bulk action.
type deadBulkRequest struct {
	JobIDs []string `json:"job_ids"`
	Match  *struct {
		Reason string `json:"reason"`
		Error  string `json:"error"`
	} `json:"match"`
	// TTL of respawned jobs in seconds (default TTLSecond, 0 = forever).
	TTL *int64 `json:"ttl"`
}

// deadBulkResponse answers a bulk action.
type deadBulkResponse struct {
	// Count is how many jobs were respawned or deleted.
	Count int64 `json:"count"`
	// Missing are the named jobs that were not dead (gone, respawned).
	Missing []string `json:"missing,omitempty"`
	// More is true when a match stopped at its bound: send it again.
	More bool `json:"more"`
}

// deadLetterBulk serves POST /api/:namespace/:queue/deadletter/jobs/respawn
// and …/delete (respawn true or false): the action on each job named by
// job_ids, or on every job matching match (reason, error text; {} is
// every job), oldest first, up to maxBulkMatch per call.
func (s *Server) deadLetterBulk(respawn bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		var req deadBulkRequest
		body, err := io.ReadAll(io.LimitReader(c.Request.Body, 1<<20+1))
		if err != nil || len(body) > 1<<20 || json.Unmarshal(body, &req) != nil ||
			(req.Match == nil) == (len(req.JobIDs) == 0) || len(req.JobIDs) > maxBulkIDs {
			s.failAPI(c, errInvalidBulk)
			return
		}
		ttl := int64(s.def.ttl)
		if req.TTL != nil {
			ttl = *req.TTL
		}
		if ttl < 0 || ttl > maxDurationSeconds {
			s.failAPI(c, errInvalidTTL)
			return
		}
		var match *engine.DeadLetterQuery
		if req.Match != nil {
			match = &engine.DeadLetterQuery{Reason: engine.DeadReason(req.Match.Reason), Error: req.Match.Error}
			if match.Reason != "" && !engine.ValidDeadReason(match.Reason) {
				s.failAPI(c, errInvalidReason)
				return
			}
			if len(match.Error) > engine.MaxErrorText {
				s.failAPI(c, errInvalidErrorText)
				return
			}
		}
		out, err := bulkDead(c.Request.Context(), state(c).eng, c.Param("namespace"), c.Param("queue"), req.JobIDs, match, respawn, secs(uint64(ttl)))
		if err != nil {
			s.failAPI(c, err)
			return
		}
		action := "dead jobs deleted"
		if respawn {
			action = "dead jobs respawned"
		}
		s.reqLogger(c).WithFields(logrus.Fields{"count": out.Count, "named": len(req.JobIDs), "more": out.More}).Info(action)
		writeJSON(c, http.StatusOK, out)
	}
}

// bulkDead respawns (with ttl) or deletes the dead jobs ids, or, with
// match, every dead job that passes its reason and error filters, oldest
// first, up to maxBulkMatch jobs and maxBulkScan entries examined (More
// then says to go on). The API's bulk routes and the dashboard's
// selection both use it.
func bulkDead(ctx context.Context, x engine.Engine, ns, q string, ids []string, match *engine.DeadLetterQuery, respawn bool, ttl time.Duration) (deadBulkResponse, error) {
	out := deadBulkResponse{}
	if match != nil {
		dq := *match
		dq.Offset, dq.Limit, dq.Newest = 0, 1000, false
		// The IDs first, then the actions: acting while paging would move
		// the entries under the offsets.
		for scanned := int64(0); ; {
			page, err := x.ListDeadLetterPage(ctx, ns, q, dq)
			if err != nil {
				return out, err
			}
			for _, j := range page.Jobs {
				ids = append(ids, j.ID)
			}
			if page.Next < 0 {
				break
			}
			scanned += page.Next - dq.Offset
			if len(ids) >= maxBulkMatch || scanned >= maxBulkScan {
				out.More = true
				break
			}
			dq.Offset = page.Next
		}
		if len(ids) > maxBulkMatch {
			ids, out.More = ids[:maxBulkMatch], true
		}
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		var err error
		if respawn {
			err = x.RespawnDeadJob(ctx, ns, q, id, ttl)
		} else {
			err = x.DeleteDeadJob(ctx, ns, q, id)
		}
		switch {
		case err == nil:
			out.Count++
		case errors.Is(err, engine.ErrJobNotFound) || errors.Is(err, engine.ErrInvalid):
			out.Missing = append(out.Missing, id)
		default:
			return out, err
		}
	}
	return out, nil
}
