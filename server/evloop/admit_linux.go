//go:build linux

package evloop

import "time"

// Admission off the loop. Host.Take admits a request inline when
// everything admission needs is in memory (a cached token, a token without
// a rate limit). When it needs I/O (it.Later: the admin Redis), the loop
// never waits for it: a goroutine runs Host.TakeLater, and the connection reads and parses nothing more
// (as while a consume is parked) until the answer comes back through the
// wake pipe; the request then joins the loop's next batch, admitted or
// refused, ahead of the connection's next requests. A flood of unknown
// tokens, or a slow or hung admin Redis, so delays only the requests that
// need it.

// admitLater sends it, the request c's parse just took, to be admitted off
// the loop.
func (l *eventLoop) admitLater(c *loopConn, it *Item) {
	c.admitting = it
	l.admits++
	go func() {
		l.host.TakeLater(l.ctx, it)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.released {
			return
		}
		l.admittedq = append(l.admittedq, it)
		l.ended.Broadcast()
		if len(l.admittedq) == 1 {
			l.wake()
		}
	}()
}

// readmit puts the requests admitted off the loop into this pass's batch.
func (l *eventLoop) readmit(now time.Time) {
	l.mu.Lock()
	done := l.admittedq
	l.admittedq = nil
	l.mu.Unlock()
	for _, it := range done {
		l.admits--
		c := it.conn
		c.admitting = nil
		if c.released || c.dead || l.closing {
			// Nobody to answer: what admission took goes back.
			if c.body == it {
				c.body = nil
			}
			l.host.Drop(it)
			l.host.Recycle(it)
			if !c.released {
				l.touch(c) // finish closes it
			}
			continue
		}
		if c.body == it {
			// Its body is read now, or thrown away (body_linux.go); its
			// read timeout still runs from when it began, as net/http's.
			c.last = now
			l.touch(c)
			l.arm(c)
			if l.startBody(c, now) && len(c.in) > 0 {
				l.again = append(l.again, c)
			}
			continue
		}
		c.since, c.last = now, now
		consume := l.batch(c, it)
		l.touch(c)
		l.arm(c)
		if !consume && len(c.in) > 0 {
			// What follows joins the batch after it (consumes run last:
			// what follows one waits for the next pass).
			l.again = append(l.again, c)
		}
	}
}
