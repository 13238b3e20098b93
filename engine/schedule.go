package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedules (periodic jobs, issue #24): a named job template of a queue
// published once per tick of a cron expression. The cron grammar is
// robfig/cron/v3's (a well-kept parser: 5 fields, 6 with seconds, and the
// @every / @hourly descriptors); this file adds the time zone, the
// missed-tick policy and the tick arithmetic every server must agree on.

// MissedPolicy says what a schedule does with ticks that fell due while no
// server could fire them (downtime longer than MissedAfter).
type MissedPolicy string

const (
	// MissedSkip drops missed ticks: the next tick fired is the first
	// one after now (the default).
	MissedSkip MissedPolicy = "skip"
	// MissedLast fires the latest missed tick once, then goes on.
	MissedLast MissedPolicy = "last"
)

// MissedAfter is how late a tick may be fired and still count as on time:
// a tick due longer ago than this was missed (downtime), and the
// schedule's MissedPolicy applies. Shorter lateness (a loaded server, a
// failover) fires the late ticks one by one.
const MissedAfter = 30 * time.Second

// MinEvery is the shortest tick interval a schedule may have.
const MinEvery = time.Second

// Errors of ParseCron, naming what was wrong (the API renders them as 400).
var (
	ErrBadCron     = errors.New("invalid cron expression")
	ErrBadTimeZone = errors.New("invalid time zone")
	ErrTooFrequent = errors.New("schedule fires more often than once a second")
	ErrNeverFires  = errors.New("cron expression never fires")
)

// ErrScheduleNotFound is returned for a schedule that does not exist.
var ErrScheduleNotFound = errors.New("schedule not found")

// ErrNoSchedules is returned by a pool whose engine runs no schedules.
var ErrNoSchedules = errors.New("engine: this pool's engine runs no schedules")

// cronParser reads the standard 5 fields, an optional leading seconds
// field, and the descriptors (@every 30s, @hourly, @daily, …).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron is a parsed schedule expression in its time zone.
type Cron struct {
	sched cron.Schedule
	every time.Duration // > 0 for @every
	loc   *time.Location
}

// ParseCron parses spec in the IANA time zone tz ("" = UTC). A time zone
// inside the spec (CRON_TZ=, TZ=) is refused: the zone is tz alone.
func ParseCron(spec, tz string) (*Cron, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || strings.EqualFold(tz, "Local") {
		return nil, fmt.Errorf("%w %q", ErrBadTimeZone, tz)
	}
	s := strings.TrimSpace(spec)
	if s == "" || strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("%w %q (give the zone as tz)", ErrBadCron, spec)
	}
	c := &Cron{loc: loc}
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w %q", ErrBadCron, spec)
		}
		if d < MinEvery || d%time.Second != 0 {
			return nil, fmt.Errorf("%w: %q (whole seconds, at least 1s)", ErrTooFrequent, spec)
		}
		c.every = d
		c.sched = cron.Every(d)
		return c, nil
	}
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadCron, spec, err)
	}
	if ss, ok := sched.(*cron.SpecSchedule); ok {
		ss.Location = loc
	}
	c.sched = sched
	// A valid expression for an impossible date (30 February) never fires:
	// robfig's Next gives up after five years and returns the zero time.
	if c.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: %q", ErrNeverFires, spec)
	}
	return c, nil
}

// Next returns the first tick strictly after t (the zero time if there is
// none within five years). Ticks are whole seconds.
//
// Daylight saving time, for an expression with fixed hours (not every
// hour, "*"), is cron's usual: a wall-clock time that a spring-forward
// gap skips fires once, at the end of the gap (0 2 * * * in Europe/Berlin
// fires at 03:00 CEST on the last Sunday of March), and a wall-clock time
// that a fall-back repeats fires once, at its first occurrence (02:00
// CEST, not again at 02:00 CET). An expression for every hour fires at
// every real instant that matches: no tick in a gap, each repeated one.
func (c *Cron) Next(t time.Time) time.Time {
	n := c.raw(t)
	ss, ok := c.sched.(*cron.SpecSchedule)
	const hours = 1<<24 - 1
	if !ok || n.IsZero() || ss.Hour&hours == hours {
		return n
	}
	if g := c.gapTick(ss, t, n); !g.IsZero() {
		return g
	}
	for i := 0; i < 4 && !n.IsZero() && c.repeated(n); i++ {
		n = c.raw(n)
	}
	return n
}

func (c *Cron) raw(t time.Time) time.Time {
	n := c.sched.Next(t.In(c.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// gapTick returns the end of the first spring-forward gap after t and
// before n in which the expression matches a skipped wall-clock time, or
// the zero time.
func (c *Cron) gapTick(ss *cron.SpecSchedule, t, n time.Time) time.Time {
	_, end := t.In(c.loc).ZoneBounds()
	for !end.IsZero() && end.Before(n) {
		_, before := end.Add(-time.Nanosecond).In(c.loc).Zone()
		_, after := end.In(c.loc).Zone()
		if after > before && end.After(t) {
			// The wall clock of the gap, read in the offset before it:
			// the instants [end, end+gap) under the old offset.
			old := *ss
			old.Location = time.FixedZone("", before)
			m := old.Next(end.Add(-time.Second))
			if !m.IsZero() && m.Before(end.Add(time.Duration(after-before)*time.Second)) {
				return end.UTC()
			}
		}
		_, end = end.In(c.loc).ZoneBounds()
	}
	return time.Time{}
}

// repeated reports whether n's wall-clock time was shown before, in the
// hour (or so) a fall-back repeats.
func (c *Cron) repeated(n time.Time) bool {
	start, _ := n.In(c.loc).ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).In(c.loc).Zone()
	_, now := n.In(c.loc).Zone()
	return before > now && n.Before(start.Add(time.Duration(before-now)*time.Second))
}

// lastTick returns the latest tick in [from, now], given that from is a
// tick and from ≤ now.
func (c *Cron) lastTick(from, now time.Time) time.Time {
	if c.every > 0 {
		return from.Add(now.Sub(from) / c.every * c.every)
	}
	// Calendar ticks are absolute: look back over a window doubling from a
	// minute, so that a per-second expression costs ~60 steps and a yearly
	// one a few dozen windows.
	for w := time.Minute; ; w *= 2 {
		start := now.Add(-w)
		if !start.After(from) {
			start = from
		}
		last := time.Time{}
		if start.Equal(from) {
			last = from
		}
		for t := c.Next(start); !t.IsZero() && !t.After(now); t = c.Next(t) {
			last = t
		}
		if !last.IsZero() {
			return last
		}
	}
}

// Plan is what a server does with a schedule whose stored next tick is
// due (at or before now plus the publish lead).
type Plan struct {
	// Fire is set when a job is published, for tick Tick (its due time).
	Fire bool
	Tick time.Time
	// Next is the schedule's next tick afterwards.
	Next time.Time
}

// PlanTick decides, at now, what happens to the stored next tick next:
// a tick due in the future or at most MissedAfter ago is fired as is; an
// older one was missed: MissedSkip fires nothing and moves on to the first
// tick after now, MissedLast fires the latest tick at or before now once.
func (c *Cron) PlanTick(next, now time.Time, missed MissedPolicy) Plan {
	if now.Sub(next) <= MissedAfter {
		return Plan{Fire: true, Tick: next, Next: c.Next(next)}
	}
	// The ticks after the latest one at or before now keep an @every
	// schedule's phase.
	last := c.lastTick(next, now)
	if missed == MissedLast {
		return Plan{Fire: true, Tick: last, Next: c.Next(last)}
	}
	return Plan{Next: c.Next(last)}
}

// ParseMissed reads a missed-tick policy ("" = skip).
func ParseMissed(s string) (MissedPolicy, error) {
	switch MissedPolicy(s) {
	case "", MissedSkip:
		return MissedSkip, nil
	case MissedLast:
		return MissedLast, nil
	}
	return "", fmt.Errorf("missed must be skip or last, not %q", s)
}

// MaxScheduleName is the longest schedule name.
const MaxScheduleName = 128

// ValidScheduleName reports whether s may name a schedule: 1..128
// characters from [-_.A-Za-z0-9].
func ValidScheduleName(s string) bool {
	if len(s) == 0 || len(s) > MaxScheduleName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Schedule is a schedule: its expression, the job template, and its state.
type Schedule struct {
	Namespace, Queue, Name string
	Spec                   string
	TZ                     string // IANA zone; "UTC" by default
	Missed                 MissedPolicy
	Paused                 bool

	// The job template: each tick publishes a job with these, due at the
	// tick (its TTL counts from the tick).
	Body       []byte
	TTL        time.Duration // 0 = forever
	Tries      uint16
	Priority   int
	Attributes map[string]string
	Versioned  bool
	// Group is the group of the jobs the schedule publishes ("" = the
	// default group; ValidGroup, groups.go).
	Group string

	// State (read only): the next tick (zero while paused), the last tick
	// fired and the ID of its job, how many ticks were fired, and when the
	// schedule was created and last changed.
	Next     time.Time
	LastTick time.Time
	LastJob  string
	Fired    int64
	Created  time.Time
	Updated  time.Time
}

// Scheduler is what an engine offers for schedules. Every engine of a
// pool that runs them fires each tick exactly once, whichever of the
// servers sharing the pool gets there first.
type Scheduler interface {
	// PutSchedule creates or replaces a schedule (its state, and whether
	// it is paused, are kept on a replace) and returns it as stored.
	PutSchedule(ctx context.Context, s *Schedule) (*Schedule, error)
	// GetSchedule returns one schedule, or ErrScheduleNotFound.
	GetSchedule(ctx context.Context, ns, q, name string) (*Schedule, error)
	// ListSchedules returns the queue's schedules sorted by name.
	ListSchedules(ctx context.Context, ns, q string) ([]*Schedule, error)
	// DeleteSchedule deletes a schedule, or returns ErrScheduleNotFound.
	DeleteSchedule(ctx context.Context, ns, q, name string) error
	// PauseSchedule pauses (no tick fires) or resumes a schedule; a
	// resumed schedule's next tick is the first after now.
	PauseSchedule(ctx context.Context, ns, q, name string, paused bool) (*Schedule, error)
}
