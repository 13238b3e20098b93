package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Schedules (periodic jobs), a Kairos extension: a named job template of a
// queue that the servers publish once per tick of a cron expression, each
// tick exactly once however many servers run.

// ScheduleSpec says when a schedule fires.
type ScheduleSpec struct {
	// Cron is a 5-field cron expression ("0 2 * * *"), a 6-field one with
	// seconds first ("*/10 * * * * *"), or a descriptor ("@every 30s",
	// "@hourly", "@daily", …). At most one tick a second.
	Cron string
	// TZ is the IANA time zone the expression is read in ("" = UTC).
	TZ string
	// Missed is what happens to ticks missed while no server ran (late by
	// more than 30 s): "skip" (the default) or "last" (fire the latest once).
	Missed string
}

// ScheduleJob is what each tick publishes.
type ScheduleJob struct {
	Body     []byte
	TTL      time.Duration // counted from the tick; 0 = forever
	Tries    int
	Priority int
	// Group is the jobs' group in the queue ("" = the default group).
	Group      string
	Versioned  bool
	Attributes map[string]string
}

// Schedule is a schedule and its state.
type Schedule struct {
	Namespace, Queue, Name string
	ScheduleSpec
	Paused bool
	// NextAt is the next tick (zero while paused); LastTickAt and LastJobID
	// the last tick fired and its job; Fired counts the ticks fired.
	NextAt     time.Time
	LastTickAt time.Time
	LastJobID  string
	Fired      int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Job        ScheduleJob
}

type wireSchedule struct {
	Namespace  string     `json:"namespace"`
	Queue      string     `json:"queue"`
	Name       string     `json:"name"`
	Cron       string     `json:"cron"`
	TZ         string     `json:"tz"`
	Missed     string     `json:"missed"`
	Paused     bool       `json:"paused"`
	NextAt     *time.Time `json:"next_at"`
	LastTickAt *time.Time `json:"last_tick_at"`
	LastJobID  string     `json:"last_job_id"`
	Fired      int64      `json:"fired"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	Job        struct {
		Data       []byte            `json:"data"`
		TTLMS      int64             `json:"ttl_ms"`
		Tries      int               `json:"tries"`
		Priority   int               `json:"priority"`
		Group      string            `json:"group"`
		Versioned  bool              `json:"versioned"`
		Attributes map[string]string `json:"attributes"`
	} `json:"job"`
}

func (w *wireSchedule) schedule() *Schedule {
	s := &Schedule{
		Namespace: w.Namespace, Queue: w.Queue, Name: w.Name,
		ScheduleSpec: ScheduleSpec{Cron: w.Cron, TZ: w.TZ, Missed: w.Missed},
		Paused:       w.Paused, LastJobID: w.LastJobID, Fired: w.Fired,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		Job: ScheduleJob{
			Body: w.Job.Data, TTL: time.Duration(w.Job.TTLMS) * time.Millisecond, Tries: w.Job.Tries,
			Priority: w.Job.Priority, Group: w.Job.Group, Versioned: w.Job.Versioned, Attributes: w.Job.Attributes,
		},
	}
	if w.NextAt != nil {
		s.NextAt = *w.NextAt
	}
	if w.LastTickAt != nil {
		s.LastTickAt = *w.LastTickAt
	}
	return s
}

func (c *Client) schedulePath(queue, name string, parts ...string) (string, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", argError("empty schedule name")
	}
	return c.apiPath(seg, append([]string{"schedule", name}, parts...)...), nil
}

func (c *Client) scheduleCall(ctx context.Context, method, path string, q url.Values, body []byte, header http.Header) (*Schedule, error) {
	resp, err := c.t.do(ctx, request{
		method: method, path: path, query: q, body: body, header: header,
		idempotent: true, want: []int{http.StatusOK},
	})
	if err != nil {
		return nil, err
	}
	var w wireSchedule
	if err := decode(resp, &w); err != nil {
		return nil, err
	}
	return w.schedule(), nil
}

// PutSchedule creates or replaces schedule name of queue: each tick of spec
// publishes body with the publish options TTL (counted from the tick),
// Tries, Priority, Group and Attributes. Delay, DueAt and JobKey do not apply (a
// tick's job is due at the tick and published once by the servers). A
// replace keeps the schedule's state and whether it is paused. The token
// needs publish rights on the queue. Kairos extension.
//
//	s, err := c.PutSchedule(ctx, "reports", "nightly",
//		client.ScheduleSpec{Cron: "0 2 * * *", TZ: "Europe/Berlin"},
//		[]byte(`{"report":"daily"}`), client.TTL(time.Hour), client.Tries(3))
func (c *Client) PutSchedule(ctx context.Context, queue, name string, spec ScheduleSpec, body []byte, opts ...PublishOption) (*Schedule, error) {
	path, err := c.schedulePath(queue, name)
	if err != nil {
		return nil, err
	}
	if spec.Cron == "" {
		return nil, argError("empty cron expression")
	}
	var p publishParams
	for _, o := range opts {
		o(&p)
	}
	if p.hasDelay || !p.dueAt.IsZero() || p.hasKey {
		return nil, argError("a schedule's jobs take no Delay, DueAt or JobKey")
	}
	q, header, err := p.query()
	if err != nil {
		return nil, err
	}
	q.Set("cron", spec.Cron)
	if spec.TZ != "" {
		q.Set("tz", spec.TZ)
	}
	if spec.Missed != "" {
		q.Set("missed", spec.Missed)
	}
	if body == nil {
		body = []byte{}
	}
	return c.scheduleCall(ctx, http.MethodPut, path, q, body, http.Header(header))
}

// GetSchedule returns schedule name of queue; ErrNotFound when there is
// none. Kairos extension.
func (c *Client) GetSchedule(ctx context.Context, queue, name string) (*Schedule, error) {
	path, err := c.schedulePath(queue, name)
	if err != nil {
		return nil, err
	}
	return c.scheduleCall(ctx, http.MethodGet, path, nil, nil, nil)
}

// ListSchedules returns queue's schedules sorted by name. Kairos extension.
func (c *Client) ListSchedules(ctx context.Context, queue string) ([]*Schedule, error) {
	seg, err := queueSegment(queue)
	if err != nil {
		return nil, err
	}
	resp, err := c.t.do(ctx, request{
		method: http.MethodGet, path: c.apiPath(seg, "schedule"), idempotent: true, want: []int{http.StatusOK},
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Schedules []wireSchedule `json:"schedules"`
	}
	if err := decode(resp, &out); err != nil {
		return nil, err
	}
	list := make([]*Schedule, len(out.Schedules))
	for i := range out.Schedules {
		list[i] = out.Schedules[i].schedule()
	}
	return list, nil
}

// DeleteSchedule deletes schedule name of queue; ErrNotFound when there is
// none. Jobs it published stay. Kairos extension.
func (c *Client) DeleteSchedule(ctx context.Context, queue, name string) error {
	path, err := c.schedulePath(queue, name)
	if err != nil {
		return err
	}
	_, err = c.t.do(ctx, request{
		method: http.MethodDelete, path: path, idempotent: true, want: []int{http.StatusNoContent},
	})
	return err
}

// PauseSchedule stops a schedule's ticks (a job already published ahead
// of its tick, at most a second before, still comes). Kairos extension.
func (c *Client) PauseSchedule(ctx context.Context, queue, name string) (*Schedule, error) {
	path, err := c.schedulePath(queue, name, "pause")
	if err != nil {
		return nil, err
	}
	return c.scheduleCall(ctx, http.MethodPut, path, nil, nil, nil)
}

// ResumeSchedule undoes PauseSchedule: the next tick is the first after
// now (ticks of the pause are not fired). Kairos extension.
func (c *Client) ResumeSchedule(ctx context.Context, queue, name string) (*Schedule, error) {
	path, err := c.schedulePath(queue, name, "resume")
	if err != nil {
		return nil, err
	}
	return c.scheduleCall(ctx, http.MethodPut, path, nil, nil, nil)
}
