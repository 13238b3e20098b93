//go:build linux

package evloop

import (
	"context"
	"time"
)

// Long-polls on the event loops. A consume that finds nothing and may wait
// is parked on its connection: the connection reads nothing more (the loop
// watches it only for the client leaving) until the consume is answered.
//
// With an engine that can watch (engine.Watcher's Watch answers ok), a
// parked consume costs no goroutine: the engine calls back when a job may
// have become ready, and the loop puts the consume in its next batch for a
// new look; a timer ends it at its deadline. Otherwise a goroutine waits
// with the engine's Consume. Either way the outcome reaches the loop as a
// parkSignal through the wake pipe, and the answer goes out in order,
// before the connection's next requests.

// parkSignal tells the loop about connection c's parked consume number gen.
type parkSignal struct {
	c    *loopConn
	gen  uint64
	kind parkKind
}

type parkKind uint8

const (
	parkFired   parkKind = iota // the engine's watch fired: look again
	parkExpired                 // the deadline passed
	parkDone                    // the goroutine wait ended, with it.jobs and it.err
	parkLook                    // look now, the watch kept (Watch said so)
)

// signal hands s to the loop, from any goroutine.
func (l *eventLoop) signal(s parkSignal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return
	}
	l.signals = append(l.signals, s)
	l.ended.Broadcast()
	if len(l.signals) == 1 {
		l.wake()
	}
}

// wait parks it, a consume that found nothing and may wait, on c: c reads
// nothing more until it is answered (after a new look or at its deadline),
// before its next requests.
func (c *loopConn) wait(it *Item) {
	l := c.l
	if c.parked == nil {
		c.parked = it
		c.gen++
		l.parked++
	}
	c.looking = false
	gen := c.gen
	if it.stop != nil {
		return // still watched: that look was made with the watch on
	}
	if !l.closing {
		stop, look, ok := it.Eng.Watch(it.NS, it.Con.Queues, func() { l.signal(parkSignal{c, gen, parkFired}) })
		if ok {
			it.stop = stop
			if it.timer == nil {
				it.timer = time.AfterFunc(time.Until(it.Deadline), func() { l.signal(parkSignal{c, gen, parkExpired}) })
			}
			if look {
				l.relook = append(l.relook, parkSignal{c, gen, parkLook})
			}
			return
		}
	}
	ctx, cancel := context.WithCancel(l.ctx)
	it.cancel = cancel
	req := it.Con
	req.Timeout = time.Until(it.Deadline)
	go func() {
		jobs, err := it.Eng.Consume(ctx, &req)
		if len(jobs) == 0 && ctx.Err() != nil {
			err = nil // cancelled: no job, as the gin handler answers
		}
		it.Jobs, it.Err = jobs, err
		cancel()
		l.signal(parkSignal{c, gen, parkDone})
	}()
}

// done tells c that it is answered (before it is recycled): once its consume is answered (at once or after
// waiting), c parses its next requests, starting with what it had already
// read, in the next pass.
func (c *loopConn) done(it *Item) {
	l := c.l
	if c.consume == it {
		c.consume = nil
		if c.parked != it && len(c.in) > 0 {
			l.again = append(l.again, c)
		}
	}
	if c.parked != it {
		return
	}
	if it.stop != nil {
		it.stop() // found a job on a look made with the watch on
		it.stop = nil
	}
	if it.timer != nil {
		it.timer.Stop()
		it.timer = nil
	}
	c.parked, c.looking = nil, false
	l.parked--
	l.arm(c)
	if len(c.in) > 0 {
		l.again = append(l.again, c)
	}
}

// resume acts on the signals for parked consumes: looks go into this pass's
// batch, ended waits are answered.
func (l *eventLoop) resume(now time.Time) {
	l.mu.Lock()
	signals := l.signals
	l.signals = nil
	l.mu.Unlock()
	relook := l.relook
	l.relook = nil
	for _, sigs := range [2][]parkSignal{signals, relook} {
		for _, s := range sigs {
			c := s.c
			it := c.parked
			if it == nil || c.gen != s.gen || c.released {
				continue // answered meanwhile
			}
			switch s.kind {
			case parkFired, parkLook:
				if s.kind == parkFired {
					it.stop = nil // the watch is used up
				}
				if !c.looking {
					l.look(c, it)
				}
			case parkExpired:
				if !c.looking { // else the look's answer sees the deadline
					l.lastLook(c, it)
				}
			case parkDone:
				it.cancel = nil
				it.Deadline = time.Time{}
				l.answerParked(c, it, now)
			}
		}
	}
}

// look puts c's parked consume in this pass's batch.
func (l *eventLoop) look(c *loopConn, it *Item) {
	c.looking = true
	it.Jobs, it.Err, it.ran, it.after = nil, nil, false, false
	l.items = append(l.items, it)
	l.touch(c)
}

// lastLook ends c's parked consume at its deadline with one last look, as
// the goroutine wait (engine.Consume) ends when it could not be sure to
// hear of a job (a watch not yet confirmed by Redis); the engine answers it
// without a round trip when it knows the queue to be empty.
func (l *eventLoop) lastLook(c *loopConn, it *Item) {
	if it.stop != nil {
		it.stop()
		it.stop = nil
	}
	it.Deadline = time.Time{} // the look's answer is the last
	l.look(c, it)
}

// giveUp ends c's parked consume now with no job (the client left, the
// deadline passed, or the server stops). A goroutine wait is cancelled and
// answered when it returns.
func (l *eventLoop) giveUp(c *loopConn, now time.Time) {
	it := c.parked
	if it.cancel != nil {
		it.cancel()
		return
	}
	if c.looking {
		it.Deadline = time.Time{} // the look's answer is the last
		return
	}
	if it.stop != nil {
		it.stop()
		it.stop = nil
	}
	it.Deadline = time.Time{}
	it.Jobs, it.Err = nil, nil
	l.answerParked(c, it, now)
}

// answerParked answers c's parked consume with what it holds.
func (l *eventLoop) answerParked(c *loopConn, it *Item, now time.Time) {
	c.out = l.host.Answer(it, l.httpDate(now), c.out)
	c.done(it)
	l.host.Recycle(it)
	c.since, c.last = now, now
	l.touch(c)
}
