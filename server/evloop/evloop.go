// Package evloop serves the hottest requests of the public API —
// publish, consume and ACK in their plainest form — from event loops
// (Linux's epoll), in batches, with no goroutine per connection or per
// request; every other request goes, with its connection, to net/http.
//
// The package knows HTTP, the engine's batch calls and nothing of the
// server: which requests it may take is a Table the server gives it
// (server/routes.go), and it reaches the server through Host — take a
// parsed request (the server checks its parameters and admits it), admit
// one off the loop, answer one — and through the listener it hands
// connections over on (Group.Handoff), which net/http serves.
//
// Files: parse.go (the table and the parser), batch.go (a batch's engine
// calls), response.go (the bytes of an answer), loop_linux.go (the loops,
// their connections, timeouts and hand-over), wait_linux.go (long-polls),
// admit_linux.go (admission off the loop), sys_linux.go, rw_linux.go and
// rw_race_linux.go (raw system calls), other.go (no loops elsewhere).
package evloop

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// Kind is what a loop does with a request of a Route: which engine call
// its batch makes, and whether it may wait (a consume).
type Kind uint8

const (
	Publish Kind = iota // engine.Batcher's PublishEach
	Consume             // ConsumeEach; one that finds nothing may wait
	Ack                 // DeleteEach
)

// Host is the server as the loops see it. The loops call it from their
// own goroutine, except TakeLater, which runs off the loop.
type Host interface {
	// Take makes the Item of r, a request the parser took, received at
	// now from ip: it checks r's parameters as the route's handler would
	// and admits it without any I/O. ok false means net/http must serve
	// r (nothing has happened then). The Item is ready for the engine,
	// refused (Refused: Err is the answer), or needs I/O to be admitted
	// (Later: TakeLater, off the loop). Take sees the head only: a
	// publish's body is the loop's to read once the request is admitted,
	// into Pub.Body (allocated once at its Content-Length); a refused
	// one's is never buffered (body_linux.go).
	Take(r *Request, ip string, now time.Time) (it *Item, ok bool)
	// TakeLater admits it, which Take left Later, waiting on I/O as
	// needed; it clears Later and sets Refused and Err if refused. It
	// runs on a goroutine of its own.
	TakeLater(ctx context.Context, it *Item)
	// Answer appends it's HTTP response to out (AppendResponse), records
	// it (metrics, access log) and returns out. date is the Date header.
	Answer(it *Item, date, out []byte) []byte
	// Drop ends it unanswered (its client left): what its admission took
	// goes back.
	Drop(it *Item)
	// Recycle tells the host the loop is done with it (answered or
	// dropped).
	Recycle(it *Item)
}

// Item is one request a loop took: what the engine needs, and the
// engine's outcome. Take fills the exported fields above the outcome;
// the loop fills the outcome.
type Item struct {
	Route *Route // the table row it matched
	Kind  Kind
	Eng   engine.Engine // the engine of its pool (Take sets it once admitted)
	NS, Q string
	Start time.Time // when the loop took it
	IP    string    // the client's, as gin's ClientIP gives it
	// Query is the raw query (without '?'), for the access log.
	Query string

	Pub   engine.PublishRequest // Publish
	Con   engine.ConsumeRequest // Consume: Timeout is the wait allowed
	JobID string                // Ack
	// Receipt makes an Ack the ACK of that delivery only (engine.JobRef).
	Receipt string
	// Deadline is until when a Consume that finds nothing may wait;
	// zero: it may not.
	Deadline time.Time

	// Later: admission needs I/O, TakeLater must run before the engine
	// call. Refused: admission refused it, Err is the answer and no
	// engine call is made.
	Later, Refused bool
	// Close: the answer ends the connection, and says so (Connection:
	// close), as net/http's does after a refusal it could not read the
	// body of (body_linux.go).
	Close bool

	// Ext is the host's: whatever it keeps with the request (admission).
	Ext any

	// The outcome.
	ID   string        // Publish
	Jobs []*engine.Job // Consume
	Err  error

	conn *loopConn // the connection it came on
	ran  bool      // the engine call is done (or refused: none to make)
	// after marks a consume behind requests of its own connection in the
	// same batch: it runs once their engine calls are done.
	after  bool
	stop   func()             // the engine's watch of a parked consume
	timer  *time.Timer        // the deadline of a watched consume
	cancel context.CancelFunc // the goroutine wait of a parked consume
}

// Timeouts are net/http's limits, which the loops apply as net/http does.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// Config is what Start needs.
type Config struct {
	Host   Host
	Parser *Parser
	Loops  int // how many event loops
	Timeouts
	// Context ends the loops' long-polls and off-loop admissions: the
	// server cancels it before it shuts the loops down.
	Context context.Context
	Log     logrus.FieldLogger
}

// mayWait reports whether it is a consume that found nothing and may
// still wait: the loop parks it instead of answering.
func (it *Item) mayWait() bool {
	return !it.Refused && it.Kind == Consume && len(it.Jobs) == 0 &&
		(it.Err == nil || errors.Is(it.Err, engine.ErrClosed)) &&
		!it.Deadline.IsZero() && time.Now().Before(it.Deadline)
}
