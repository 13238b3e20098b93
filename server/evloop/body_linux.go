//go:build linux

package evloop

import (
	"syscall"
	"time"
)

// Bodies: admission before buffering. A publish is admitted as soon as its
// head is complete (Parser.Parse: Head or Done), before the loop reads its
// body, as gin's guard refuses it before the handler reads one:
//
//   - admitted: the body is read straight into Pub.Body, allocated once at
//     its Content-Length, and the request joins a batch once it is all in;
//   - refused, with a Content-Length of maxPostHandlerReadBytes or more:
//     answered at once with Connection: close, then the connection is
//     half-closed and closed rstAvoidanceDelay later, without reading the
//     body, as net/http closes a connection whose handler left a large body
//     unread (its requestTooLarge and closeWriteAndWait);
//   - refused, with a smaller body: the body is read and thrown away as it
//     comes (never buffered), then the refusal is answered and the
//     connection stays open, as net/http discards a small unread body
//     before it answers. If the body never comes whole (EOF, ReadTimeout),
//     the refusal is answered with Connection: close and the connection
//     closed, as net/http does when that discard fails;
//   - admitted off the loop (Later): the connection reads nothing while the
//     admission runs (admit_linux.go); then as above.
//
// An admitted body cut short (EOF, ReadTimeout) goes to net/http with its
// head and what came of it, which answers it as it would have (400 "failed
// to read body"); what admission took goes back first (Host.Drop).

// maxPostHandlerReadBytes is net/http's: the most of a request body it reads
// and discards after a handler that did not read it.
const maxPostHandlerReadBytes = 256 << 10

// rstAvoidanceDelay is net/http's: how long it waits between half-closing a
// connection whose request it did not read to the end and closing it, so
// that the client reads the answer before the reset.
const rstAvoidanceDelay = 500 * time.Millisecond

// startBody acts on the admission of c.body, whose head begins c.in, and
// reports whether the request is all in and joined the batch (what follows
// it then begins c.in).
func (l *eventLoop) startBody(c *loopConn, now time.Time) bool {
	it := c.body
	have := min(len(c.in)-c.head, c.length)
	rest := c.in[c.head+have:] // what follows the body: only if it is whole
	switch {
	case it.Refused && c.length >= maxPostHandlerReadBytes:
		it.Close, c.closeAfter, c.linger = true, true, true
		c.in = c.in[:0] // never read on
		c.body, c.head = nil, 0
		l.batch(c, it)
		return false
	case it.Refused:
		c.discard = c.length - have
		c.in = c.in[:copy(c.in, rest)]
		c.head = 0
	default:
		it.Pub.Body = make([]byte, have, c.length)
		copy(it.Pub.Body, c.in[c.head:])
		c.in = c.in[:c.head+copy(c.in[c.head:], rest)]
	}
	return l.endBody(c, now)
}

// endBody puts c.body into the batch if it is all in (its head leaves
// c.in; what follows begins at now), and reports whether it did.
func (l *eventLoop) endBody(c *loopConn, now time.Time) bool {
	it := c.body
	if it.Refused && c.discard > 0 || !it.Refused && len(it.Pub.Body) < c.length {
		return false
	}
	if !it.Refused {
		c.in = c.in[:copy(c.in, c.in[c.head:])]
	}
	c.body, c.head, c.discard = nil, 0, 0
	c.since = now
	if len(c.in) == 0 && cap(c.in) > maxIdleBuffer {
		c.in = nil
	}
	l.batch(c, it)
	return true
}

// readBody reads the rest of c.body's body: into Pub.Body when admitted,
// into the loop's scratch buffer (thrown away) when refused; never past
// the body's end.
func (l *eventLoop) readBody(c *loopConn, now time.Time) {
	it := c.body
	var p []byte
	if it.Refused {
		p = l.rbuf[:min(len(l.rbuf), c.discard)]
	} else {
		p = it.Pub.Body[len(it.Pub.Body):c.length]
	}
	m, err := rawRead(c.fd, p)
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return
	case err != nil:
		c.dead = true
		return
	case m == 0:
		c.eof = true // finish: abandonBody
		return
	}
	c.last = now
	if it.Refused {
		c.discard -= m
	} else {
		it.Pub.Body = it.Pub.Body[:len(it.Pub.Body)+m]
	}
	if l.endBody(c, now) {
		l.parse(c, now)
	}
}

// abandonBody ends c.body, whose body will not come whole (EOF, or
// ReadTimeout): a refused one is answered with Connection: close, then c
// closes; an admitted one goes to net/http (c.handoff), with its head and
// what came of its body.
func (l *eventLoop) abandonBody(c *loopConn, now time.Time) {
	it := c.body
	c.body = nil
	if it.Refused {
		it.Close, c.closeAfter = true, true
		c.in, c.head, c.discard = c.in[:0], 0, 0
		l.runFast([]*Item{it}, l.httpDate(now))
		return
	}
	c.in = append(c.in[:c.head], it.Pub.Body...)
	c.head = 0
	l.host.Drop(it)
	l.host.Recycle(it)
	c.handoff = true
}

// lingerClose half-closes c, whose last answer is out, and leaves it to
// the sweep to close rstAvoidanceDelay later; c reads nothing meanwhile.
func (l *eventLoop) lingerClose(c *loopConn, now time.Time) {
	if !c.lingerUntil.IsZero() {
		return
	}
	_ = syscall.Shutdown(c.fd, syscall.SHUT_WR)
	c.lingerUntil = now.Add(rstAvoidanceDelay)
	l.arm(c)
}
