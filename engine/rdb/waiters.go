package rdb

import (
	"container/list"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Waiting consumers do not hold Redis connections. A consumer that finds
// nothing registers in-process under each of its queues' ready channels and
// sleeps. The engine keeps one Pub/Sub connection per pool (on a cluster,
// one sharded Pub/Sub connection per slot group, to the master of the
// group's slot: subscriber), subscribed to the ready channel of every queue
// that has waiters here (plus the groups' wake-up channels); scripts
// PUBLISH (SPUBLISH on a cluster) to a queue's channel when they make jobs ready,
// with the number of jobs (and so does a resume of a paused queue, with the
// number of jobs ready in it), and that many waiters are woken, oldest
// first.
// A woken waiter runs the consume script again; if another server took the
// job, it registers again. A sweep every second re-checks queues with
// waiters (LLEN and ZCARD, pipelined) to cover messages lost while Pub/Sub
// reconnects.
//
// A consumer that may wait need not look when the server already knows its
// queues to be empty: a look found them empty after this server was
// listening to their channels, and no message has come for them since. Any
// job made ready after that look sends a message, and a waiter registered
// before that message is handled is woken by it (the check and the
// registration are one step under the lock). So a long-polling consumer
// that comes back to an empty queue waits without a round trip to Redis.

const (
	sweepEvery      = time.Second
	unsubscribeIdle = 30 * time.Second
	confirmWait     = time.Second
)

type waiter struct {
	ch        chan struct{} // receives one signal (Consume)
	fn        func()        // or is called once (Watch)
	elems     map[string]*list.Element
	signalled string // channel it was woken on, "" while waiting
}

type chanState struct {
	ns, q      string
	waiting    list.List // of *waiter, oldest first
	subscribed bool
	confirmed  chan struct{} // closed once the SUBSCRIBE is confirmed
	closed     bool
	idleSince  time.Time
	// msgs counts the messages (and subscription confirmations, which may
	// follow a reconnection that lost some) handled for the channel;
	// emptyAt is msgs+1 when a look that began at msgs found the queue
	// empty, so that the queue is known empty while emptyAt == msgs+1.
	msgs, emptyAt uint64
}

// chanMark is a channel's message count when a look began.
type chanMark struct {
	st   *chanState
	msgs uint64
}

type waiters struct {
	e *Engine
	// sweepEvery is how often run sweeps (the constant sweepEvery); tests
	// that the sweep must not rescue lengthen it before Run.
	sweepEvery time.Duration

	mu    sync.Mutex
	chans map[string]*chanState
	ps    *subscriber // set while run is running
	// resubscribing marks the slot groups being subscribed again after a
	// slot move (resubscribe).
	resubscribing map[int]bool

	// wakeSubs counts the confirmed subscriptions to the groups' wake-up
	// channels (again after a reconnection), for tests.
	wakeSubs atomic.Int64
}

// subscriber is the pool's Pub/Sub: one connection on one Redis (or
// Sentinel); on a cluster one sharded Pub/Sub (SSUBSCRIBE) per slot group,
// which go-redis connects to the master of the group's slot, and again to
// the new master after a failover (the connection breaks). A group's
// connection carries its wake-up channel and the ready channels of its
// queues that have waiters here, all of one slot, as SSUBSCRIBE requires.
//
// A slot move does not break the connection: the old master unsubscribes
// it from the slot's channels (an SUNSUBSCRIBE nobody asked for) and keeps
// it open, and go-redis neither reconnects nor subscribes again. The
// waiters see that unsubscription and have reconnect open a new
// connection to the slot's new master (lost and resubscribe).
type subscriber struct {
	cluster bool
	cc      *redis.ClusterClient // on a cluster

	mu    sync.Mutex
	conns []*redis.PubSub
	// out merges the connections' messages once messages was called
	// (nil before); ctx ends the forwarding.
	out chan interface{}
	ctx context.Context
	// groupUp has a channel per group being reconnected, closed when the
	// new connection confirms the group's wake-up channel.
	groupUp map[int]chan struct{}
	closed  bool
}

func newSubscriber(c redis.UniversalClient, cluster bool) *subscriber {
	s := &subscriber{cluster: cluster, groupUp: map[int]chan struct{}{}}
	if cc, ok := c.(*redis.ClusterClient); ok && cluster {
		s.cc = cc
		s.conns = make([]*redis.PubSub, slotGroups)
		for g := range s.conns {
			s.conns[g] = cc.SSubscribe(context.Background())
		}
		return s
	}
	s.conns = []*redis.PubSub{c.Subscribe(context.Background())}
	return s
}

// conn returns group g's connection (the only one, off a cluster).
func (s *subscriber) conn(g int) *redis.PubSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[g]
}

// byConn splits channels by the connection that carries them.
func (s *subscriber) byConn(channels []string) map[int][]string {
	out := make(map[int][]string, 1)
	for _, c := range channels {
		g := 0
		if s.cluster {
			g = channelGroup(c)
		}
		out[g] = append(out[g], c)
	}
	return out
}

// subscribe subscribes to channels, on their groups' connections at once
// on a cluster (the first subscription of a group dials its node).
func (s *subscriber) subscribe(ctx context.Context, channels []string) error {
	if !s.cluster {
		return s.conn(0).Subscribe(ctx, channels...)
	}
	by := s.byConn(channels)
	errs := make(chan error, len(by))
	for g, cs := range by {
		go func() { errs <- s.conn(g).SSubscribe(ctx, cs...) }()
	}
	var first error
	for range by {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *subscriber) unsubscribe(ctx context.Context, channels []string) {
	for g, cs := range s.byConn(channels) {
		if s.cluster {
			_ = s.conn(g).SUnsubscribe(ctx, cs...)
		} else {
			_ = s.conn(g).Unsubscribe(ctx, cs...)
		}
	}
}

// messages merges the connections' messages and confirmations into one
// channel until ctx is done.
func (s *subscriber) messages(ctx context.Context) <-chan interface{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 1 {
		return s.conns[0].ChannelWithSubscriptions(redis.WithChannelSize(1024))
	}
	s.out, s.ctx = make(chan interface{}, 1024), ctx
	for _, ps := range s.conns {
		s.forward(ps)
	}
	return s.out
}

// forward copies ps's messages to s.out until ps is closed or s.ctx is
// done. s.mu must be held.
func (s *subscriber) forward(ps *redis.PubSub) {
	in := ps.ChannelWithSubscriptions(redis.WithChannelSize(64))
	ctx, out := s.ctx, s.out
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
}

// reconnect replaces group g's connection by a new one subscribed to
// channels (the group's wake-up channel first), after asking go-redis to
// reload the slot map, and reports whether the wake-up channel's
// subscription was confirmed within wait. A stale slot map dials the old
// master, which refuses the SSUBSCRIBE (MOVED): no confirmation, and the
// caller tries again.
func (s *subscriber) reconnect(ctx context.Context, g int, channels []string, wait time.Duration) bool {
	s.cc.ReloadState(ctx)
	up := make(chan struct{})
	// Subscribe before reading: a connection made without channels would
	// go to a random node.
	nps := s.cc.SSubscribe(context.Background())
	_ = nps.SSubscribe(ctx, channels...)
	s.mu.Lock()
	if s.out == nil || s.closed {
		s.mu.Unlock()
		_ = nps.Close()
		return false
	}
	old := s.conns[g]
	s.conns[g] = nps
	s.groupUp[g] = up
	s.forward(nps)
	s.mu.Unlock()
	_ = old.Close()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-up:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	if s.groupUp[g] == up {
		delete(s.groupUp, g)
	}
	s.mu.Unlock()
	return false
}

// confirmed records the confirmation of group g's wake-up channel.
func (s *subscriber) confirmed(g int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if up := s.groupUp[g]; up != nil {
		close(up)
		delete(s.groupUp, g)
	}
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, ps := range s.conns {
		_ = ps.Close()
	}
}

// newWaiters creates the pool's Pub/Sub object; go-redis connects it only
// at the first SUBSCRIBE, so this starts nothing. Waiters may subscribe
// before run starts reading: confirmations and messages wait in the
// connection until then.
func newWaiters(e *Engine) *waiters {
	return &waiters{e: e, sweepEvery: sweepEvery, chans: make(map[string]*chanState), ps: newSubscriber(e.rdb, e.cluster)}
}

// run reads the Pub/Sub connection until ctx is done, then closes it.
func (w *waiters) run(ctx context.Context) {
	w.mu.Lock()
	ps := w.ps
	w.mu.Unlock()
	if ps == nil {
		return
	}
	wake := make([]string, slotGroups)
	for g := range wake {
		wake[g] = wakeChannel(g)
	}
	if err := ps.subscribe(ctx, wake); err != nil {
		w.e.log.WithError(err).Warn("subscribe to the wake-up channels failed; go-redis retries on reconnect")
	}
	msgs := ps.messages(ctx)
	sweep := time.NewTicker(w.sweepEvery)
	defer sweep.Stop()
	defer func() {
		w.mu.Lock()
		w.ps = nil
		w.mu.Unlock()
		ps.close()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			w.sweep(ctx)
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				switch m.Kind {
				case "subscribe", "ssubscribe":
					if isWakeChannel(m.Channel) {
						w.wakeSubs.Add(1)
						if ps.cluster {
							ps.confirmed(channelGroup(m.Channel))
						}
					}
					w.confirm(m.Channel)
				case "sunsubscribe":
					if w.lost(m.Channel) {
						w.resubscribe(ctx, ps, channelGroup(m.Channel))
					}
				}
			case *redis.Message:
				if isWakeChannel(m.Channel) {
					w.e.wakePump()
					continue
				}
				n, err := strconv.Atoi(m.Payload)
				if err != nil || n < 1 {
					n = 1
				}
				w.notify(m.Channel, n)
			}
		}
	}
}

// lost reports whether an SUNSUBSCRIBE of channel c was not asked for
// (the group's wake-up channel, or a ready channel still subscribed here):
// the slot moved to another master. A ready channel is then no longer
// listened to (so its queue is not known empty, and a consumer looks)
// until the new connection confirms it.
func (w *waiters) lost(c string) bool {
	if isWakeChannel(c) {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.chans[c]
	if st == nil || !st.subscribed {
		return false // unsubscribed by the sweep
	}
	st.msgs++
	if st.closed {
		st.closed = false
		st.confirmed = make(chan struct{})
	}
	return true
}

// resubscribe subscribes group g's channels again on a new connection to
// the slot's new master (subscriber.reconnect), in the background, trying
// until a confirmation comes or ctx ends; one at a time per group (every
// channel of the group reports its unsubscription).
func (w *waiters) resubscribe(ctx context.Context, ps *subscriber, g int) {
	w.mu.Lock()
	if w.resubscribing == nil {
		w.resubscribing = map[int]bool{}
	}
	if w.resubscribing[g] {
		w.mu.Unlock()
		return
	}
	w.resubscribing[g] = true
	w.mu.Unlock()
	w.e.log.WithField("group", g).Info("a slot group's channels moved to another node (slot migration): subscribing there")
	go func() {
		defer func() {
			w.mu.Lock()
			delete(w.resubscribing, g)
			w.mu.Unlock()
		}()
		// The first tries may find go-redis's slot map not reloaded yet
		// (it reloads in the background): short waits first.
		wait := 100 * time.Millisecond
		for pause := 20 * time.Millisecond; ctx.Err() == nil; pause, wait = min(2*pause, time.Second), min(2*wait, confirmWait) {
			channels := []string{wakeChannel(g)}
			w.mu.Lock()
			for c, st := range w.chans {
				if st.subscribed && channelGroup(c) == g {
					channels = append(channels, c)
				}
			}
			w.mu.Unlock()
			if ps.reconnect(ctx, g, channels, wait) {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}()
}

func (w *waiters) confirm(c string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.chans[c]
	if st == nil {
		return
	}
	st.msgs++ // a re-subscription may follow lost messages
	if st.subscribed && !st.closed {
		st.closed = true
		close(st.confirmed)
		// Watchers registered before the confirmation look now.
		for e := st.waiting.Front(); e != nil; {
			wt := e.Value.(*waiter)
			e = e.Next()
			if wt.fn != nil {
				w.signal(wt, c)
			}
		}
	}
}

// notify wakes up to n waiters of channel c.
func (w *waiters) notify(c string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.chans[c]
	if st == nil {
		return
	}
	st.msgs++
	for ; n > 0 && st.waiting.Len() > 0; n-- {
		w.signal(st.waiting.Front().Value.(*waiter), c)
	}
}

// signal wakes wt for channel c. w.mu must be held.
func (w *waiters) signal(wt *waiter, c string) {
	w.detach(wt)
	wt.signalled = c
	if wt.fn != nil {
		wt.fn()
		return
	}
	wt.ch <- struct{}{}
}

// detach removes wt from every list it is in. w.mu must be held.
func (w *waiters) detach(wt *waiter) {
	now := time.Now()
	for c, el := range wt.elems {
		st := w.chans[c]
		st.waiting.Remove(el)
		if st.waiting.Len() == 0 {
			st.idleSince = now
		}
	}
	wt.elems = nil
}

// listening reports whether this server receives the ready messages of all
// of queues already (subscribed and confirmed), so that a waiter registered
// now would miss none.
func (w *waiters) listening(ns string, queues []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listeningLocked(ns, queues)
}

func (w *waiters) listeningLocked(ns string, queues []string) bool {
	if w.ps == nil {
		return false
	}
	for _, q := range queues {
		st := w.chans[w.e.names.get([3]string{ns, q}).channel]
		if st == nil || !st.subscribed || !st.closed {
			return false
		}
	}
	return true
}

// knownEmptyLocked reports whether all of queues are known to be empty
// (see the top of this file). w.mu must be held.
func (w *waiters) knownEmptyLocked(ns string, queues []string) bool {
	if !w.listeningLocked(ns, queues) {
		return false
	}
	for _, q := range queues {
		st := w.chans[w.e.names.get([3]string{ns, q}).channel]
		if st.emptyAt != st.msgs+1 {
			return false
		}
	}
	return true
}

// knownEmpty reports whether all of queues are known to be empty.
func (w *waiters) knownEmpty(ns string, queues []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.knownEmptyLocked(ns, queues)
}

// mark returns the message counts of queues' channels before a look, or
// nil when this server does not listen to them all (then an empty look
// teaches nothing).
func (w *waiters) mark(ns string, queues []string) []chanMark {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.listeningLocked(ns, queues) {
		return nil
	}
	marks := make([]chanMark, len(queues))
	for i, q := range queues {
		st := w.chans[w.e.names.get([3]string{ns, q}).channel]
		marks[i] = chanMark{st: st, msgs: st.msgs}
	}
	return marks
}

// sawEmpty records that a look begun at marks found its queues empty.
func (w *waiters) sawEmpty(marks []chanMark) {
	if marks == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range marks {
		if m.st.msgs == m.msgs { // (a state dropped meanwhile is no longer read)
			m.st.emptyAt = m.msgs + 1
		}
	}
}

// add registers a waiter under channels, subscribing to the ones this
// server does not listen to yet and waiting (bounded) for confirmation. It
// reports whether the queues were known to be empty when the waiter was
// registered: then there is no need to look. deadline is closed when the
// wait's time is up (a closed channel: waiting on it here must not use up
// the wait's own deadline).
func (w *waiters) add(ctx context.Context, ns string, queues []string, deadline <-chan struct{}) (*waiter, bool) {
	wt := &waiter{ch: make(chan struct{}, 1), elems: make(map[string]*list.Element, len(queues))}
	w.mu.Lock()
	empty := w.knownEmptyLocked(ns, queues)
	subscribe, confirms := w.registerLocked(wt, ns, queues)
	ps := w.ps
	w.mu.Unlock()
	w.subscribe(ctx, ps, subscribe)
	if len(confirms) > 0 {
		limit := time.NewTimer(confirmWait)
		defer limit.Stop()
		for _, c := range confirms {
			select {
			case <-c:
			case <-limit.C:
				return wt, false
			case <-deadline:
				return wt, false
			case <-ctx.Done():
				return wt, false
			}
		}
	}
	return wt, empty
}

// watch registers a waiter that calls fn (engine.Watcher), subscribing to
// the channels this server does not listen to yet without waiting for the
// confirmation: confirm calls fn then. It returns whether the caller must
// look now, and false for ok when Run is not running (nothing would call
// fn).
func (w *waiters) watch(ns string, queues []string, fn func()) (stop func(), look, ok bool) {
	wt := &waiter{fn: fn, elems: make(map[string]*list.Element, len(queues))}
	w.mu.Lock()
	if w.ps == nil {
		w.mu.Unlock()
		return nil, false, false
	}
	look = w.listeningLocked(ns, queues) && !w.knownEmptyLocked(ns, queues)
	subscribe, _ := w.registerLocked(wt, ns, queues)
	ps := w.ps
	w.mu.Unlock()
	w.subscribe(context.Background(), ps, subscribe)
	return func() { w.remove(wt) }, look, true
}

// registerLocked puts wt at the back of the waiting lists of queues' ready
// channels.
// It returns the channels to subscribe to (those this server does not
// listen to, while Run runs; marked subscribed here) and the confirmations
// still pending among wt's channels. w.mu must be held.
func (w *waiters) registerLocked(wt *waiter, ns string, queues []string) (subscribe []string, pending []chan struct{}) {
	for _, q := range queues {
		c := readyChannel(ns, q)
		if _, dup := wt.elems[c]; dup {
			continue
		}
		st := w.chans[c]
		if st == nil {
			st = &chanState{ns: ns, q: q}
			w.chans[c] = st
		}
		if !st.subscribed && w.ps != nil {
			st.subscribed = true
			st.closed = false
			st.confirmed = make(chan struct{})
			subscribe = append(subscribe, c)
		}
		if st.subscribed && !st.closed {
			pending = append(pending, st.confirmed)
		}
		wt.elems[c] = st.waiting.PushBack(wt)
	}
	return subscribe, pending
}

// subscribe sends the SUBSCRIBE for channels that registerLocked returned.
func (w *waiters) subscribe(ctx context.Context, ps *subscriber, channels []string) {
	if len(channels) == 0 {
		return
	}
	if err := ps.subscribe(ctx, channels); err != nil {
		w.e.log.WithError(err).Warn("subscribe to ready channels failed; the sweep will cover")
	}
}

// remove unregisters wt. If wt had been woken without using the wake-up,
// the signal is passed on to another waiter of the same channel.
func (w *waiters) remove(wt *waiter) {
	w.mu.Lock()
	c := wt.signalled
	if c == "" {
		w.detach(wt)
	}
	w.mu.Unlock()
	if c != "" {
		w.notify(c, 1)
	}
}

// wait long-polls for req (checked; its queues as the caller named them:
// wait spreads a sharded queue over its shards at every look): it returns
// jobs, or nil at the timeout or when ctx is done (a shutting-down server
// cancels waits so that consumers are answered at once).
func (w *waiters) wait(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	// The deadline is a channel closed at the timeout, not a timer's: add
	// may wait on it too (for a slow subscription confirmation), and a
	// timer's single tick taken there left this wait without a deadline.
	expired := make(chan struct{})
	deadline := time.AfterFunc(req.Timeout, func() { close(expired) })
	defer deadline.Stop()
	orig := req
	for {
		// A sharded queue's shards as the engine knows them now (more
		// after a change of K wakes this wait: wakeGrown).
		req := w.e.routeConsume(orig)
		wt, empty := w.add(ctx, req.Namespace, req.Queues, expired)
		if !empty {
			jobs, err := w.e.consumeNow(ctx, req)
			if err != nil || len(jobs) > 0 {
				w.remove(wt)
				return jobs, err
			}
		}
		w.mu.Lock()
		running := w.ps != nil
		w.mu.Unlock()
		var poll <-chan time.Time
		if !running {
			// Run has not started (or stopped): nothing will signal us.
			t := time.NewTimer(w.e.maxWait)
			defer t.Stop()
			poll = t.C
		}
		select {
		case <-wt.ch:
			w.mu.Lock()
			wt.signalled = ""
			w.mu.Unlock()
		case <-poll:
			w.remove(wt)
		case <-expired:
			w.remove(wt)
			return nil, nil
		case <-ctx.Done():
			w.remove(wt)
			return nil, nil
		}
	}
}

// sweep wakes waiters of queues that have jobs (in the ready list or the
// priority set) although no message came, and drops subscriptions idle for
// a while.
func (w *waiters) sweep(ctx context.Context) {
	type probe struct {
		c          string
		ready, pri *redis.IntCmd
	}
	var probes []probe
	var idle []string
	now := time.Now()
	w.mu.Lock()
	for c, st := range w.chans {
		if st.waiting.Len() > 0 {
			probes = append(probes, probe{c: c})
			continue
		}
		if now.Sub(st.idleSince) > unsubscribeIdle {
			if st.subscribed {
				idle = append(idle, c)
			}
			delete(w.chans, c)
		}
	}
	ps := w.ps
	queues := make([][2]string, len(probes))
	for i, p := range probes {
		st := w.chans[p.c]
		queues[i] = [2]string{st.ns, st.q}
	}
	w.mu.Unlock()
	if len(idle) > 0 && ps != nil {
		ps.unsubscribe(ctx, idle)
	}
	if len(probes) == 0 {
		return
	}
	_, err := w.e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, nq := range queues {
			probes[i].ready = p.LLen(ctx, readyKey(nq[0], nq[1]))
			probes[i].pri = p.ZCard(ctx, prioKey(nq[0], nq[1]))
		}
		return nil
	})
	if err != nil {
		return
	}
	for _, p := range probes {
		if n := p.ready.Val() + p.pri.Val(); n > 0 {
			w.notify(p.c, int(n))
		}
	}
}
