package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/engine"
)

// Schedules (periodic jobs, issue #24): PUT/GET/DELETE
// /api/:namespace/:queue/schedule/:name, GET /api/:namespace/:queue/schedule
// and PUT …/schedule/:name/pause and …/resume. Every route needs a token
// that may publish to the queue (admit, like publish, without taking a
// rate-limit token: a schedule's ticks are not requests).

var (
	errScheduleNotFound = newAPIError(http.StatusNotFound, "error", "schedule not found")
	errNoSchedules      = newAPIError(http.StatusNotImplemented, "error", "this pool does not run schedules")
	errScheduleName     = badRequest("invalid schedule name: 1 to 128 characters of [-_.A-Za-z0-9]")
	errCronMissing      = badRequest("invalid cron: the cron parameter is required")
	errScheduleDelay    = badRequest("invalid delay: a scheduled job is due at its tick (no delay, delay_ms or due_at)")
	errScheduleJobKey   = badRequest("invalid job_key: a schedule publishes each tick once by itself (no job_key or Idempotency-Key)")
	errInvalidMissed    = badRequest("invalid missed: skip or last")
)

// scheduleJSON is a schedule on the wire.
type scheduleJSON struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Name      string `json:"name"`
	Cron      string `json:"cron"`
	TZ        string `json:"tz"`
	Missed    string `json:"missed"`
	Paused    bool   `json:"paused"`
	// NextAt is the next tick (RFC 3339, UTC), null while paused.
	NextAt     *time.Time  `json:"next_at"`
	LastTickAt *time.Time  `json:"last_tick_at"`
	LastJobID  string      `json:"last_job_id"`
	Fired      int64       `json:"fired"`
	CreatedAt  time.Time   `json:"created_at"`
	UpdatedAt  time.Time   `json:"updated_at"`
	Job        jobTemplate `json:"job"`
}

// jobTemplate is what each tick publishes.
type jobTemplate struct {
	Data       []byte            `json:"data"`
	TTL        int64             `json:"ttl"`
	TTLMS      int64             `json:"ttl_ms"`
	Tries      uint16            `json:"tries"`
	Priority   int               `json:"priority"`
	Group      string            `json:"group,omitempty"` // issue #32: absent for the default group
	Versioned  bool              `json:"versioned"`
	Attributes map[string]string `json:"attributes"`
}

// schedulesResponse is GET /api/:namespace/:queue/schedule.
type schedulesResponse struct {
	Namespace string         `json:"namespace"`
	Queue     string         `json:"queue"`
	Schedules []scheduleJSON `json:"schedules"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func renderSchedule(s *engine.Schedule) scheduleJSON {
	return scheduleJSON{
		Namespace: s.Namespace, Queue: s.Queue, Name: s.Name, Cron: s.Spec, TZ: s.TZ,
		Missed: string(s.Missed), Paused: s.Paused, NextAt: timePtr(s.Next), LastTickAt: timePtr(s.LastTick),
		LastJobID: s.LastJob, Fired: s.Fired, CreatedAt: s.Created.UTC(), UpdatedAt: s.Updated.UTC(),
		Job: jobTemplate{
			Data: s.Body, TTL: int64(s.TTL / time.Second), TTLMS: s.TTL.Milliseconds(), Tries: s.Tries,
			Priority: s.Priority, Group: s.Group, Versioned: s.Versioned, Attributes: s.Attributes,
		},
	}
}

// scheduler returns the request pool's engine as an engine.Scheduler.
func scheduler(c *gin.Context) (engine.Scheduler, error) {
	sc, ok := state(c).eng.(engine.Scheduler)
	if !ok {
		return nil, errNoSchedules
	}
	return sc, nil
}

// scheduleName reads and checks the :name segment.
func scheduleName(c *gin.Context) (string, error) {
	name := c.Param("name")
	if !engine.ValidScheduleName(name) {
		return "", errScheduleName
	}
	return name, nil
}

// scheduleFailure renders the engine's schedule errors.
func scheduleFailure(err error) error {
	switch {
	case errors.Is(err, engine.ErrScheduleNotFound):
		return errScheduleNotFound
	case errors.Is(err, engine.ErrNoSchedules):
		return errNoSchedules
	}
	return err
}

// parseScheduleSpec reads cron, tz and missed.
func parseScheduleSpec(c *gin.Context) (spec, tz string, missed engine.MissedPolicy, err error) {
	spec, ok := getQuery(c, "cron")
	if !ok || spec == "" {
		return "", "", "", errCronMissing
	}
	tz, _ = getQuery(c, "tz")
	if tz == "" {
		tz = "UTC"
	}
	if _, err := engine.ParseCron(spec, tz); err != nil {
		if errors.Is(err, engine.ErrBadTimeZone) {
			return "", "", "", badRequest("invalid tz: " + err.Error())
		}
		return "", "", "", badRequest("invalid cron: " + err.Error())
	}
	m, _ := getQuery(c, "missed")
	if missed, err = engine.ParseMissed(m); err != nil {
		return "", "", "", errInvalidMissed
	}
	return spec, tz, missed, nil
}

// putSchedule serves PUT /api/:namespace/:queue/schedule/:name: the body
// is the job's, the publish parameters (ttl, ttl_ms, tries, priority, group,
// Enable-Job-Version and Job-Attr-*) its template; cron, tz and missed
// the schedule's. A replace keeps the schedule's state and pause.
func (s *Server) putSchedule(c *gin.Context, sc engine.Scheduler, ns, q, name string) error {
	spec, tz, missed, err := parseScheduleSpec(c)
	if err != nil {
		return err
	}
	for _, p := range []string{"delay", "delay_ms", "due_at"} {
		if _, ok := getQuery(c, p); ok {
			return errScheduleDelay
		}
	}
	if _, ok := getQuery(c, "job_key"); ok || c.GetHeader("Idempotency-Key") != "" {
		return errScheduleJobKey
	}
	p, err := s.parsePublish(c)
	if err != nil {
		return err
	}
	ext, err := s.parsePublishExt(c, &p)
	if err != nil {
		return err
	}
	body, err := readBody(c, engine.MaxBodySize, errBodyTooLarge)
	if err != nil {
		return err
	}
	if err := parseAttributes(c, &p); err != nil {
		return err
	}
	out, err := sc.PutSchedule(c.Request.Context(), &engine.Schedule{
		Namespace: ns, Queue: q, Name: name,
		Spec: spec, TZ: tz, Missed: missed,
		Body: body, TTL: ext.ttl, Tries: p.tries, Priority: ext.priority, Group: ext.group,
		Attributes: p.attributes, Versioned: p.versioned,
	})
	if err != nil {
		return err
	}
	s.reqLogger(c).WithField("schedule", name).WithField("cron", spec).Info("schedule put")
	writeJSON(c, http.StatusOK, renderSchedule(out))
	return nil
}

// getSchedule serves GET /api/:namespace/:queue/schedule/:name.
func (s *Server) getSchedule(c *gin.Context, sc engine.Scheduler, ns, q, name string) error {
	out, err := sc.GetSchedule(c.Request.Context(), ns, q, name)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, renderSchedule(out))
	return nil
}

// listSchedules serves GET /api/:namespace/:queue/schedule.
func (s *Server) listSchedules(c *gin.Context, sc engine.Scheduler, ns, q, _ string) error {
	list, err := sc.ListSchedules(c.Request.Context(), ns, q)
	if err != nil {
		return err
	}
	out := schedulesResponse{Namespace: ns, Queue: q, Schedules: make([]scheduleJSON, len(list))}
	for i, x := range list {
		out.Schedules[i] = renderSchedule(x)
	}
	writeJSON(c, http.StatusOK, out)
	return nil
}

// deleteSchedule serves DELETE /api/:namespace/:queue/schedule/:name.
func (s *Server) deleteSchedule(c *gin.Context, sc engine.Scheduler, ns, q, name string) error {
	if err := sc.DeleteSchedule(c.Request.Context(), ns, q, name); err != nil {
		return err
	}
	s.reqLogger(c).WithField("schedule", name).Info("schedule deleted")
	c.Status(http.StatusNoContent)
	return nil
}

// pauseSchedule serves PUT …/schedule/:name/pause and …/resume.
func (s *Server) pauseSchedule(paused bool) scheduleHandler {
	return func(c *gin.Context, sc engine.Scheduler, ns, q, name string) error {
		out, err := sc.PauseSchedule(c.Request.Context(), ns, q, name, paused)
		if err != nil {
			return err
		}
		s.reqLogger(c).WithField("schedule", name).WithField("paused", paused).Info("schedule pause changed")
		writeJSON(c, http.StatusOK, renderSchedule(out))
		return nil
	}
}

// scheduleHandler handles one schedule route, given the pool's scheduler,
// the queue and the checked :name ("" on routes without it).
type scheduleHandler func(c *gin.Context, sc engine.Scheduler, ns, q, name string) error

// schedules makes a gin handler of h: it finds the scheduler, checks the
// name, and renders h's error (the engine's schedule errors included).
func (s *Server) schedules(h scheduleHandler) gin.HandlerFunc {
	return func(c *gin.Context) {
		err := func() error {
			sc, err := scheduler(c)
			if err != nil {
				return err
			}
			name := ""
			if _, ok := c.Params.Get("name"); ok {
				if name, err = scheduleName(c); err != nil {
					return err
				}
			}
			return h(c, sc, c.Param("namespace"), c.Param("queue"), name)
		}()
		if err != nil {
			s.failAPI(c, scheduleFailure(err))
		}
	}
}
