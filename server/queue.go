package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
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

// setPaused serves PUT /api/:namespace/:queue/pause and …/resume: only the
// paused flag of the queue's settings changes.
func (s *Server) setPaused(paused bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		x := state(c).eng
		ctx, ns, q := c.Request.Context(), c.Param("namespace"), c.Param("queue")
		cfg, err := x.QueueConfig(ctx, ns, q)
		if err != nil {
			s.failAPI(c, err)
			return
		}
		cfg.Paused = paused
		if err := x.SetQueueConfig(ctx, ns, q, cfg); err != nil {
			s.failAPI(c, err)
			return
		}
		s.reqLogger(c).WithField("paused", paused).Info("queue pause changed")
		c.Status(http.StatusNoContent)
	}
}

// queueConfigJSON is a queue's settings on the wire.
type queueConfigJSON struct {
	Backoff   string `json:"backoff"`
	DeadTTLMS int64  `json:"dead_ttl_ms"`
	Paused    bool   `json:"paused"`
	// Shards is the queue's number of hot-queue shards (1: unsharded).
	Shards int `json:"shards"`
	// The in-flight limits and group weights (issue #32), absent when
	// unset, so that a queue without them reads as before.
	MaxInFlight      int            `json:"max_in_flight,omitempty"`
	GroupMaxInFlight int            `json:"group_max_in_flight,omitempty"`
	GroupWeights     map[string]int `json:"group_weights,omitempty"`
}

// queueConfigPatch is a PUT body: absent fields keep their value.
// group_weights, when present, replaces the queue's weights ({} clears
// them).
type queueConfigPatch struct {
	Backoff          *string         `json:"backoff"`
	DeadTTLMS        *int64          `json:"dead_ttl_ms"`
	Paused           *bool           `json:"paused"`
	Shards           *int            `json:"shards"`
	MaxInFlight      *int            `json:"max_in_flight"`
	GroupMaxInFlight *int            `json:"group_max_in_flight"`
	GroupWeights     *map[string]int `json:"group_weights"`
}

// Limits of the queue config's in-flight limits and group weights.
const (
	// maxInFlightLimit is the largest max_in_flight and
	// group_max_in_flight.
	maxInFlightLimit = 1_000_000
	// maxGroupWeights is the most groups group_weights may name.
	maxGroupWeights = 1000
)

var (
	errInvalidMaxInFlight      = badRequest(fmt.Sprintf("invalid max_in_flight: an integer 0..%d (0: no limit)", maxInFlightLimit))
	errInvalidGroupMaxInFlight = badRequest(fmt.Sprintf("invalid group_max_in_flight: an integer 0..%d (0: no limit)", maxInFlightLimit))
	errMaxInFlightShards       = badRequest("max_in_flight must be at least the queue's shards")
	errTooManyGroupWeights     = badRequest(fmt.Sprintf("invalid group_weights: at most %d groups", maxGroupWeights))
)

// checkGroupWeights refuses group_weights naming an invalid group or
// giving a weight outside 1..engine.MaxGroupWeight, naming the first
// offender (in name order, so the answer is stable).
func checkGroupWeights(w map[string]int) error {
	if len(w) > maxGroupWeights {
		return errTooManyGroupWeights
	}
	names := make([]string, 0, len(w))
	for g := range w {
		names = append(names, g)
	}
	slices.Sort(names)
	for _, g := range names {
		if !engine.ValidGroup(g) {
			return badRequest(fmt.Sprintf("invalid group_weights: %q is not a valid group name", g))
		}
		if n := w[g]; n < 1 || n > engine.MaxGroupWeight {
			return badRequest(fmt.Sprintf("invalid group_weights: the weight of %q must be 1..%d", g, engine.MaxGroupWeight))
		}
	}
	return nil
}

func renderQueueConfig(cfg engine.QueueConfig) queueConfigJSON {
	return queueConfigJSON{
		Backoff: tidyDurations(cfg.Backoff.String()), DeadTTLMS: cfg.DeadTTL.Milliseconds(), Paused: cfg.Paused, Shards: max(cfg.Shards, 1),
		MaxInFlight: cfg.MaxInFlight, GroupMaxInFlight: cfg.GroupMaxInFlight, GroupWeights: cfg.GroupWeights,
	}
}

// tidyDurations drops the zero units Go prints in durations ("1m0s" →
// "1m", "1h0m0s" → "1h"), so that a policy reads back as an operator
// writes it; ParseBackoff reads both forms alike.
func tidyDurations(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "m0s", "m"), "h0m", "h")
}

// getQueueConfig serves GET /queue/:namespace/:queue/config?pool=.
func (s *Server) getQueueConfig(c *gin.Context) {
	_, ns, q, x, ok := s.adminQueue(c)
	if !ok {
		return
	}
	cfg, err := x.QueueConfig(c.Request.Context(), ns, q)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	writeJSON(c, http.StatusOK, renderQueueConfig(cfg))
}

// putQueueConfig serves PUT /queue/:namespace/:queue/config?pool= with a
// JSON body {"backoff","dead_ttl_ms","paused","shards","max_in_flight",
// "group_max_in_flight","group_weights"}; absent fields keep their value
// ("shards": 0 is 1; a limit of 0 removes it). A max_in_flight is split
// over the queue's shards, so it must be at least their number (checked
// on the config as it will be). Answers the whole new config.
func (s *Server) putQueueConfig(c *gin.Context) {
	_, ns, q, x, ok := s.adminQueue(c)
	if !ok {
		return
	}
	var patch queueConfigPatch
	if !s.decodeAdminJSON(c, &patch, errInvalidQueueConf) {
		return
	}
	var backoff *engine.Backoff
	if patch.Backoff != nil {
		var err error
		if backoff, err = engine.ParseBackoff(*patch.Backoff); err != nil {
			s.failAdmin(c, badRequest(strings.TrimSuffix(err.Error(), ": "+engine.ErrInvalid.Error())))
			return
		}
	}
	if patch.DeadTTLMS != nil && (*patch.DeadTTLMS < 0 || *patch.DeadTTLMS > maxParamMS) {
		s.failAdmin(c, errInvalidDeadTTL)
		return
	}
	if patch.Shards != nil && (*patch.Shards < 0 || *patch.Shards > engine.MaxShards) {
		s.failAdmin(c, errInvalidShards)
		return
	}
	if patch.MaxInFlight != nil && (*patch.MaxInFlight < 0 || *patch.MaxInFlight > maxInFlightLimit) {
		s.failAdmin(c, errInvalidMaxInFlight)
		return
	}
	if patch.GroupMaxInFlight != nil && (*patch.GroupMaxInFlight < 0 || *patch.GroupMaxInFlight > maxInFlightLimit) {
		s.failAdmin(c, errInvalidGroupMaxInFlight)
		return
	}
	if patch.GroupWeights != nil {
		if err := checkGroupWeights(*patch.GroupWeights); err != nil {
			s.failAdmin(c, err)
			return
		}
	}
	ctx := c.Request.Context()
	cfg, err := x.QueueConfig(ctx, ns, q)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if patch.Backoff != nil {
		cfg.Backoff = backoff
	}
	if patch.DeadTTLMS != nil {
		cfg.DeadTTL = time.Duration(*patch.DeadTTLMS) * time.Millisecond
	}
	if patch.Paused != nil {
		cfg.Paused = *patch.Paused
	}
	if patch.Shards != nil {
		cfg.Shards = max(*patch.Shards, 1)
	}
	if patch.MaxInFlight != nil {
		cfg.MaxInFlight = *patch.MaxInFlight
	}
	if patch.GroupMaxInFlight != nil {
		cfg.GroupMaxInFlight = *patch.GroupMaxInFlight
	}
	if patch.GroupWeights != nil {
		cfg.GroupWeights = *patch.GroupWeights
		if len(cfg.GroupWeights) == 0 {
			cfg.GroupWeights = nil
		}
	}
	if cfg.MaxInFlight > 0 && cfg.MaxInFlight < max(cfg.Shards, 1) {
		s.failAdmin(c, errMaxInFlightShards)
		return
	}
	if err := x.SetQueueConfig(ctx, ns, q, cfg); err != nil {
		s.failAdmin(c, err)
		return
	}
	out := renderQueueConfig(cfg)
	s.reqLogger(c).WithFields(logrus.Fields{
		"backoff": out.Backoff, "dead_ttl_ms": out.DeadTTLMS, "paused": out.Paused, "shards": out.Shards,
		"max_in_flight": out.MaxInFlight, "group_max_in_flight": out.GroupMaxInFlight, "group_weights": len(out.GroupWeights),
	}).Info("queue config set")
	writeJSON(c, http.StatusOK, out)
}
