package server

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/migration"
)

// A queue's groups (issue #32, engine/groups.go): the publish parameter
// group (publish.go, fastpath.go), the limits and weights of the queue
// config (queue.go) and, here, the admin route that shows a queue's
// groups to the dashboard and to operators.

// Page sizes of GET /queue/:namespace/:queue/groups.
const (
	defaultGroupPage = 20
	maxGroupPage     = 500
)

var errNoGroups = newAPIError(http.StatusNotImplemented, "error", "this pool's engine keeps no groups")

// grouperOf returns the groups reads of a pool: its engine's, or for a
// migrating pool its own (old) engine's, as dashboardOf.
func (s *Server) grouperOf(pool string) (engine.Grouper, error) {
	eng, ok := s.engines[pool]
	if !ok {
		return nil, errAdminPool
	}
	if m, ok := eng.(*migration.Engine); ok {
		eng = m.Old
	}
	g, ok := eng.(engine.Grouper)
	if !ok {
		return nil, errNoGroups
	}
	return g, nil
}

// groupsResponse is engine.QueueGroups with the queue's names.
type groupsResponse struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	engine.QueueGroups
}

// listGroups serves GET /queue/:namespace/:queue/groups?pool=&limit=: the
// queue's groups with ready or in-flight jobs, biggest (ready + in
// flight) first, and its limits.
func (s *Server) listGroups(c *gin.Context) {
	pool, ns, q, _, ok := s.adminQueue(c)
	if !ok {
		return
	}
	limit, err := queryInt(c, "limit", defaultGroupPage, 1, maxGroupPage, errInvalidPageLimit)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	out, err := s.queueGroups(c.Request.Context(), pool, ns, q, limit)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	writeJSON(c, http.StatusOK, groupsResponse{Namespace: ns, Queue: q, QueueGroups: out})
}

// queueGroups reads a queue's groups for the groups route and the
// dashboard. A group is limited while its jobs in flight are at the
// queue's group_max_in_flight, whether or not the engine has moved it out
// of its rotation yet (it does so when the rotation reaches it).
func (s *Server) queueGroups(ctx context.Context, pool, ns, q string, limit int) (engine.QueueGroups, error) {
	g, err := s.grouperOf(pool)
	if err != nil {
		return engine.QueueGroups{}, err
	}
	out, err := g.QueueGroups(ctx, ns, q, limit)
	if err != nil {
		return engine.QueueGroups{}, err
	}
	if out.Groups == nil {
		out.Groups = []engine.GroupStats{}
	}
	for i := range out.Groups {
		st := &out.Groups[i]
		st.Limited = st.Limited || out.GroupMaxInFlight > 0 && st.InFlight >= int64(out.GroupMaxInFlight)
	}
	return out, nil
}
