//go:build linux

package evloop

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Event loops (Linux). Each loop owns an epoll set of client connections
// and serves the requests of its Table (publishes, consumes and ACKs)
// itself: it reads what every ready connection sent, runs all the fast
// requests it found with one engine call per kind, and writes the answers,
// with no goroutine per connection or per request; a consume that waits is
// parked on its connection (wait_linux.go). The loop waits in the Go runtime's poller, on
// its own epoll descriptor (epoll nests), so it parks like any goroutine.
//
// A connection stays with its loop while it sends fast requests. At its
// first other request (after the loop has answered the earlier ones), the
// loop hands the connection, and the bytes it has read, to net/http, which
// serves it from then on exactly as it serves connections without loops.
//
// Loops apply net/http's limits of the [Kairos] table as net/http does:
// ReadHeaderTimeout and ReadTimeout for a request that is being received,
// from the accept for a connection's first request (so one that never sends
// a byte is closed after ReadHeaderTimeout) and from its first bytes for a
// later one; WriteTimeout for an answer the client does not take;
// IdleTimeout between requests. Timed-out connections are closed, as
// net/http closes them, at most sweepEvery late. A request handed over to
// net/http keeps the time it has already spent (prefixConn).

// Supported is whether this platform has event loops.
const Supported = true

// Group is a server's event loops, the goroutine that accepts their
// connections and the listener through which they hand connections over.
type Group struct {
	loops   []*eventLoop
	ln      net.Listener // the public listener, accepted by acceptLoop
	handoff *handoffListener
	stop    chan struct{}
	wg      sync.WaitGroup // loops and tick
	acc     sync.WaitGroup // accept
	log     logrus.FieldLogger
}

// Start starts cfg.Loops event loops serving ln's connections and returns
// them; net/http must serve g.Handoff().
func Start(ln net.Listener, cfg Config) (*Group, error) {
	if cfg.Host == nil || cfg.Parser == nil || cfg.Context == nil || cfg.Log == nil || cfg.Loops < 1 {
		return nil, errors.New("evloop: Config needs Host, Parser, Context, Log and Loops")
	}
	g := &Group{
		ln:      ln,
		handoff: newHandoffListener(ln.Addr()),
		stop:    make(chan struct{}),
		log:     cfg.Log,
	}
	for range cfg.Loops {
		l, err := newEventLoop(&cfg, g.handoff)
		if err != nil {
			for _, l := range g.loops {
				l.release()
			}
			return nil, err
		}
		g.loops = append(g.loops, l)
	}
	for _, l := range g.loops {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			l.run()
		}()
	}
	g.acc.Add(1)
	go func() {
		defer g.acc.Done()
		g.accept()
	}()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.tick()
	}()
	return g, nil
}

// Handoff is the listener net/http must serve: the connections the loops
// hand over.
func (g *Group) Handoff() net.Listener { return g.handoff }

// Shutdown stops accepting, lets every loop finish its pass (answers
// written), closes the loops' connections and waits for the loops. Handed
// over connections are net/http's to shut down.
func (g *Group) Shutdown() {
	select {
	case <-g.stop:
		return
	default:
	}
	close(g.stop)
	_ = g.ln.Close()
	g.acc.Wait()
	for _, l := range g.loops {
		l.stopping.Store(true)
		l.wake()
	}
	g.wg.Wait()
}

// accept gives each new connection to the next loop, as a descriptor of
// its own: the net.Conn that Accept made is closed once duplicated.
func (g *Group) accept() {
	next := 0
	var delay time.Duration
	for {
		nc, err := g.ln.Accept()
		if err != nil {
			select {
			case <-g.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.log.WithError(err).Warn("accept failed; retrying")
			select {
			case <-time.After(delay):
			case <-g.stop:
				return
			}
			continue
		}
		delay = 0
		fd, ip, err := detach(nc)
		if err != nil {
			// Out of descriptors for its duplicate: net/http serves it
			// on the one it has, rather than it being reset.
			g.log.WithError(err).Warn("event loop: cannot take a connection; net/http serves it")
			g.handoff.give(nc)
			continue
		}
		g.loops[next%len(g.loops)].add(fd, ip)
		next++
	}
}

// sweepEvery is how often the loops look for timed-out connections: how
// late, at most, they close one after net/http would have.
const sweepEvery = 100 * time.Millisecond

// tick wakes every loop each sweepEvery, to close timed-out connections.
func (g *Group) tick() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			for _, l := range g.loops {
				l.wake()
			}
		}
	}
}

// detach returns a close-on-exec duplicate of nc's descriptor (sharing its
// non-blocking mode) and the client's IP as gin's ClientIP gives it, and
// closes nc; on an error, nc is left open.
func detach(nc net.Conn) (int, string, error) {
	ip, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return -1, "", err
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, "", errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, "", err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(s uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			dupErr = errno
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, "", err
	}
	if dupErr != nil {
		return -1, "", dupErr
	}
	_ = nc.Close()
	return fd, ip, nil
}

// maxIdleBuffer is the largest input or output buffer a connection keeps
// between requests.
const maxIdleBuffer = 64 << 10

// firstRead bounds a read between requests (two heads of the largest
// size, loopRoutes' MaxHead): the most of a body a connection holds while
// its request's admission is decided off the loop, as net/http's 4 KiB
// read buffer bounds its own; a body admitted is then read straight into
// its own buffer (body_linux.go).
const firstRead = 16 << 10

// eventLoop serves its connections' requests of the table.
type eventLoop struct {
	host     Host
	parser   *Parser
	ctx      context.Context // Config.Context
	log      logrus.FieldLogger
	ep       int      // the loop's epoll set
	epFile   *os.File // ep in the Go poller
	epRaw    syscall.RawConn
	wakeR    int // pipe: a byte wakes the loop
	wakeW    int
	handoff  *handoffListener
	timeouts Timeouts
	stopping atomic.Bool

	mu       sync.Mutex
	incoming []*loopConn  // added by accept, adopted by the loop
	signals  []parkSignal // for parked consumes, from other goroutines
	ended    sync.Cond    // on mu: signals grew (for closeAll)
	released bool         // on mu: the wake pipe is closed
	closing  bool         // closeAll runs: read requests are not served
	// admittedq (on mu) are requests admitted off the loop
	// (admit_linux.go); ended is signalled when it grows too.
	admittedq []*Item

	conns     map[int]*loopConn
	events    []syscall.EpollEvent
	rbuf      []byte
	req       Request
	items     []*Item
	touched   []*loopConn
	again     []*loopConn // connections with input to parse without a new event
	relook    []parkSignal
	parked    int // connections whose consume waits
	pass      uint64
	lastSweep time.Time
	dateSec   int64
	date      []byte

	admits int // connections whose request is admitted off the loop
}

// loopConn is one client connection of a loop.
type loopConn struct {
	l        *eventLoop
	fd       int
	ip       string
	events   uint32 // the epoll interest set
	in       []byte // received, not yet served
	out      []byte // answers not yet written, from outOff
	outOff   int
	since    time.Time // when the request in `in` began, or when `out` blocked
	last     time.Time // last activity, for IdleTimeout
	pass     uint64    // the last pass that touched it
	blocked  bool      // waiting for EPOLLOUT; reads are paused
	handoff  bool      // the next request is net/http's
	parked   *Item     // a consume waiting for jobs; reads are paused
	looking  bool      // parked is in a batch, for a new look
	gen      uint64    // counts parked consumes: which one a signal is for
	eof      bool      // the client sent EOF: close once answered
	dead     bool      // failed: close without answering
	released bool

	// consume is the connection's consume in the batch or parked: its
	// next requests are parsed once it is answered (done), so that they
	// never share a batch with it and their answers follow its own.
	consume  *Item
	batched  uint64 // the last pass that put a request of it in the batch
	answered bool   // a request of it was taken (and is answered, or parked)
	// admitting is a request being admitted off the loop
	// (admit_linux.go); reads are paused meanwhile.
	admitting *Item

	// body is the publish whose body is being received (body_linux.go):
	// its head is the first head bytes of in until the body is all in;
	// length is its Content-Length, and discard, when it was refused, how
	// much of it is still to be read and thrown away.
	body                  *Item
	head, length, discard int
	// closeAfter: c closes once its answers are out, after a lingering
	// half-close (lingerClose) if linger; lingerUntil is when it closes.
	closeAfter, linger bool
	lingerUntil        time.Time
}

func newEventLoop(cfg *Config, h *handoffListener) (*eventLoop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		_ = syscall.Close(ep)
		return nil, err
	}
	l := &eventLoop{
		host: cfg.Host, parser: cfg.Parser, ctx: cfg.Context, log: cfg.Log,
		ep: ep, wakeR: p[0], wakeW: p[1], handoff: h, timeouts: cfg.Timeouts,
		conns:  make(map[int]*loopConn),
		events: make([]syscall.EpollEvent, 256),
		rbuf:   make([]byte, 64<<10),
	}
	l.ended.L = &l.mu
	if err := rawEpollCtl(ep, syscall.EPOLL_CTL_ADD, l.wakeR, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.wakeR)}); err != nil {
		l.release()
		return nil, err
	}
	if err := syscall.SetNonblock(ep, true); err != nil {
		l.release()
		return nil, err
	}
	l.epFile = os.NewFile(uintptr(ep), "kairos-event-loop")
	if l.epRaw, err = l.epFile.SyscallConn(); err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// release closes the loop's own descriptors.
func (l *eventLoop) release() {
	l.mu.Lock()
	l.released = true // late signals must not write to a reused descriptor
	l.mu.Unlock()
	if l.epFile != nil {
		_ = l.epFile.Close()
	} else {
		_ = syscall.Close(l.ep)
	}
	_ = syscall.Close(l.wakeR)
	_ = syscall.Close(l.wakeW)
}

// wake makes the loop run a pass soon.
func (l *eventLoop) wake() { _, _ = rawWrite(l.wakeW, []byte{0}) }

// add gives the loop a new connection (from the accept goroutine).
func (l *eventLoop) add(fd int, ip string) {
	const events = syscall.EPOLLIN | syscall.EPOLLRDHUP
	now := time.Now()
	c := &loopConn{l: l, fd: fd, ip: ip, since: now, last: now, events: events}
	l.mu.Lock()
	l.incoming = append(l.incoming, c)
	l.mu.Unlock()
	if err := rawEpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		// The loop will adopt it and see nothing; close it now instead.
		l.mu.Lock()
		for i, o := range l.incoming {
			if o == c {
				l.incoming = append(l.incoming[:i], l.incoming[i+1:]...)
				break
			}
		}
		l.mu.Unlock()
		_ = syscall.Close(fd)
	}
}

// wait returns the ready events, parking in the Go poller until there are
// some unless block is false.
func (l *eventLoop) wait(block bool) (int, error) {
	var n int
	var werr error
	poll := func(uintptr) bool {
		n, werr = rawEpollWait(l.ep, l.events)
		if werr == syscall.EINTR {
			n, werr = 0, nil
		}
		return n > 0 || werr != nil
	}
	if !block {
		poll(0)
		return n, werr
	}
	if err := l.epRaw.Read(poll); err != nil {
		return 0, err
	}
	return n, werr
}

// run is the loop: wait, read, parse, publish the batch, write, hand over.
func (l *eventLoop) run() {
	defer l.closeAll()
	for !l.stopping.Load() {
		n, err := l.wait(len(l.again) == 0 && len(l.relook) == 0)
		if err != nil {
			l.log.WithError(err).Error("event loop stopped; its connections are closed")
			return
		}
		l.pass++
		now := time.Now()
		for _, ev := range l.events[:n] {
			if int(ev.Fd) == l.wakeR {
				// Before resume takes the signals: a signal sent after
				// that wakes the next pass.
				var b [64]byte
				_, _ = rawRead(l.wakeR, b[:])
				break
			}
		}
		l.adopt()
		l.resume(now)
		l.readmit(now)
		for _, ev := range l.events[:n] {
			fd := int(ev.Fd)
			if fd == l.wakeR {
				continue
			}
			c := l.conns[fd]
			if c == nil {
				continue
			}
			l.touch(c)
			if c.blocked && ev.Events&syscall.EPOLLOUT != 0 {
				l.flush(c, now)
			}
			if c.admitting != nil {
				continue // answered once admitted; then it reads again
			}
			if c.parked != nil {
				if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
					// The client left or half-closed: as net/http
					// cancels a request's context, end the wait.
					l.giveUp(c, now)
				}
				continue
			}
			if !c.blocked && ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				l.read(c, now)
			}
		}
		again := l.again
		l.again = nil
		for _, c := range again {
			l.touch(c)
			l.parse(c, now)
		}
		if len(l.items) > 0 {
			l.runFast(l.items, l.httpDate(now))
			clear(l.items)
			l.items = l.items[:0]
		}
		for _, c := range l.touched {
			l.finish(c, now)
		}
		clear(l.touched)
		l.touched = l.touched[:0]
		if now.Sub(l.lastSweep) >= sweepEvery/2 {
			l.sweep(now)
			l.lastSweep = now
		}
	}
}

// adopt takes the connections accept added.
func (l *eventLoop) adopt() {
	l.mu.Lock()
	incoming := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, c := range incoming {
		l.conns[c.fd] = c
	}
}

func (l *eventLoop) touch(c *loopConn) {
	if c.pass != l.pass {
		c.pass = l.pass
		l.touched = append(l.touched, c)
	}
}

// read takes what the client sent and parses it.
func (l *eventLoop) read(c *loopConn, now time.Time) {
	if c.dead || c.eof || c.handoff || c.closeAfter {
		// A connection waiting to be handed over keeps its bytes in the
		// socket for net/http; one that closes reads no more.
		return
	}
	if c.body != nil {
		l.readBody(c, now)
		return
	}
	// Between requests, a read takes at most firstRead bytes: what the
	// loop may hold of a body before its admission is decided.
	begin := len(c.in) == 0
	p := l.rbuf
	if begin {
		p = p[:firstRead]
	}
	m, err := rawRead(c.fd, p)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return
	}
	if err != nil {
		c.dead = true
		return
	}
	if m == 0 {
		// The client is done sending; answer what it sent, then close.
		c.eof = true
		return
	}
	if len(c.in) == 0 && c.answered {
		// The request's timeouts run from its first byte, as net/http's
		// from the 4 bytes it waits for between requests; a connection's
		// first request's run from the accept (c.since), as net/http's.
		c.since = now
	}
	c.last = now
	if !begin {
		c.in = append(c.in, l.rbuf[:m]...)
		l.parse(c, now)
		return
	}
	// Parsed where it was read: only what is left (a part of a request,
	// a head whose admission runs off the loop, what follows a consume…)
	// is copied, into a buffer of c's own.
	c.in = l.rbuf[:m]
	l.parse(c, now)
	if len(c.in) > 0 {
		c.in = append([]byte(nil), c.in...)
	} else {
		c.in = nil
	}
}

// batch puts it, a request of c, into this pass's batch, and reports
// whether it is a consume: consumes run last in a batch, and one may
// wait, so what follows it waits until it is answered (done), to keep the
// connection's order. A consume behind requests of c already in the batch
// runs after their engine calls (it.after).
func (l *eventLoop) batch(c *loopConn, it *Item) bool {
	it.after = it.Kind == Consume && c.batched == l.pass
	c.batched = l.pass
	l.items = append(l.items, it)
	if it.Kind == Consume {
		c.consume = it
		return true
	}
	return false
}

// parse takes the table's requests at the head of c's input into the
// batch, up to the first request that is net/http's. A request with a body
// is admitted from its head, before its body is read (body_linux.go).
func (l *eventLoop) parse(c *loopConn, now time.Time) {
	for !(c.released || c.dead || c.handoff || c.blocked || c.parked != nil || c.consume != nil ||
		c.admitting != nil || c.body != nil || c.closeAfter || l.closing) {
		used := 0
		var body *Item
		later := false // body is being admitted off the loop (not to be touched)
		for used < len(c.in) {
			res := l.parser.Parse(c.in[used:], &l.req)
			if res == More {
				break
			}
			if res == Other {
				c.handoff = true
				break
			}
			it, ok := l.host.Take(&l.req, c.ip, now)
			if !ok {
				c.handoff = true
				break
			}
			it.conn = c
			c.answered = true
			if l.req.Length > 0 && res == Done && !it.Later && !it.Refused {
				// Admitted, and its body is all here: into its own
				// buffer, allocated once at its length.
				it.Pub.Body = make([]byte, l.req.Length)
				copy(it.Pub.Body, l.req.Body)
			} else if l.req.Length > 0 {
				// Admitted (or sent to be), or refused, from its head;
				// its head stays in c.in until its body is in.
				body = it
				c.body, c.head, c.length = it, l.req.HeadSize, l.req.Length
				if it.Later {
					later = true
					l.admitLater(c, it)
				}
				break
			}
			used += l.req.Size
			if it.Later {
				// Its admission needs the admin Redis: it leaves the loop,
				// and what follows waits for its answer.
				l.admitLater(c, it)
				break
			}
			if l.batch(c, it) {
				break
			}
		}
		if used > 0 {
			c.in = c.in[:copy(c.in, c.in[used:])]
			c.since = now
			if len(c.in) == 0 && cap(c.in) > maxIdleBuffer {
				c.in = nil // a large buffer is not kept
			}
		}
		if body == nil || later || !l.startBody(c, now) {
			return
		}
		// The body was all in: on with what follows it.
	}
}

// runFast runs a batch — one engine call per kind and engine (batch.go) —
// and appends each answer to its connection's output in the order the
// requests came; a consume that found nothing and may wait is parked on
// its connection instead (wait_linux.go).
func (l *eventLoop) runFast(items []*Item, date []byte) {
	if len(items) == 0 {
		return
	}
	runBatch(context.Background(), items)
	for _, it := range items {
		c := it.conn
		if it.mayWait() {
			c.wait(it)
			continue
		}
		c.out = l.host.Answer(it, date, c.out)
		c.done(it)
		l.host.Recycle(it)
	}
}

// finish writes c's answers and, once they are out, hands c over or
// closes it as it asked.
func (l *eventLoop) finish(c *loopConn, now time.Time) {
	if c.released || !c.lingerUntil.IsZero() {
		return
	}
	if c.body != nil && c.eof && !c.dead && c.admitting == nil {
		l.abandonBody(c, now) // the body will not come whole
	}
	if !c.dead && len(c.out) > c.outOff {
		l.flush(c, now)
	}
	if c.parked != nil && c.dead {
		l.giveUp(c, now) // the answer has nowhere to go
	}
	if c.parked != nil || c.admitting != nil {
		l.arm(c)
		return
	}
	switch {
	case c.dead:
		l.drop(c)
	case c.closeAfter && c.blocked:
	case c.closeAfter && c.linger:
		l.lingerClose(c, now)
	case c.closeAfter:
		l.drop(c)
	case c.handoff && !c.blocked:
		l.handOver(c)
	case c.eof && !c.blocked && len(c.in) >= 4, c.eof && !c.blocked && len(c.in) > 0 && !c.answered:
		// The client sent EOF behind requests the loop has not served
		// (a part of one, or what followed a consume): net/http answers
		// them as it would have, EOF included. (Between requests, it
		// waits for 4 bytes before it reads one: fewer and EOF, it closes
		// without a word.)
		l.handOver(c)
	case c.eof && !c.blocked:
		l.drop(c)
	}
}

// flush writes as much of c's output as the socket takes; the rest waits
// for EPOLLOUT, and reads pause meanwhile.
func (l *eventLoop) flush(c *loopConn, now time.Time) {
	for c.outOff < len(c.out) {
		m, err := rawWrite(c.fd, c.out[c.outOff:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			if !c.blocked {
				c.blocked, c.since = true, now
				l.arm(c)
			}
			return
		}
		if err != nil {
			c.dead = true
			return
		}
		c.outOff += m
	}
	c.out, c.outOff = c.out[:0], 0
	if cap(c.out) > maxIdleBuffer {
		c.out = nil
	}
	c.last = now
	if c.blocked {
		c.blocked, c.since = false, now
		l.arm(c)
		if len(c.in) > 0 {
			l.again = append(l.again, c)
		}
	}
}

// arm sets c's epoll interest for its state: writable while an answer is
// blocked; only the client's leaving, once, while a consume is parked;
// readable otherwise.
func (l *eventLoop) arm(c *loopConn) {
	var events uint32
	switch {
	case c.dead, !c.lingerUntil.IsZero():
		events = syscall.EPOLLONESHOT // errors at most once more
	case c.blocked:
		events = syscall.EPOLLOUT
	case c.parked != nil, c.admitting != nil:
		events = syscall.EPOLLRDHUP | syscall.EPOLLONESHOT
	default:
		events = syscall.EPOLLIN | syscall.EPOLLRDHUP
	}
	if events == c.events {
		return // a one-shot interest that fired stays off
	}
	c.events = events
	if err := rawEpollCtl(l.ep, syscall.EPOLL_CTL_MOD, c.fd, &syscall.EpollEvent{Events: events, Fd: int32(c.fd)}); err != nil {
		c.dead = true
	}
}

// handOver gives c, with the bytes read and not served, to net/http. A
// request begun in the loop keeps its timeouts: net/http's read deadlines
// for it are moved back by the time it spent in the loop (prefixConn).
func (l *eventLoop) handOver(c *loopConn) {
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		l.log.WithError(err).Warn("event loop: cannot hand a connection to net/http")
		return
	}
	pc := &prefixConn{Conn: nc, pre: c.in}
	if len(c.in) > 0 {
		pc.shift.Store(int64(time.Since(c.since)))
	}
	l.handoff.give(pc)
}

// drop closes c.
func (l *eventLoop) drop(c *loopConn) {
	l.forget(c)
	_ = syscall.Close(c.fd)
}

// forget removes c from the loop without closing its descriptor.
func (l *eventLoop) forget(c *loopConn) {
	_ = rawEpollCtl(l.ep, syscall.EPOLL_CTL_DEL, c.fd, nil)
	delete(l.conns, c.fd)
	c.released = true
	if it := c.body; it != nil && c.admitting != it {
		// Its body never came: what its admission took goes back (one
		// being admitted off the loop is readmit's).
		c.body = nil
		l.host.Drop(it)
		l.host.Recycle(it)
	}
}

// sweep closes the connections that exceeded a timeout.
func (l *eventLoop) sweep(now time.Time) {
	t := l.timeouts
	for _, c := range l.conns {
		if c.parked != nil || c.admitting != nil {
			// Bounded by MaxTimeoutSecond, or by the admin Redis's
			// timeouts; timeouts apply once answered.
			continue
		}
		if !c.lingerUntil.IsZero() {
			if now.After(c.lingerUntil) {
				l.drop(c)
			}
			continue
		}
		var limit time.Duration
		from := c.since
		switch {
		case c.blocked:
			limit = t.Write
		case c.body != nil:
			// A body that is late: abandoned as net/http's read of it
			// fails at its read deadline (body_linux.go).
			if t.Read > 0 && now.Sub(from) > t.Read {
				l.abandonBody(c, now)
				l.finish(c, now)
			}
			continue
		case len(c.in) > 0:
			limit = t.Read
			if l.parser.Parse(c.in, &l.req) == Head {
				// A fast publish whose body is late: net/http answers it
				// (400 "failed to read body") as it would have, its read
				// deadline already past.
				if limit > 0 && now.Sub(from) > limit {
					l.handOver(c)
				}
				continue
			}
			if !bytes.Contains(c.in, []byte("\r\n\r\n")) {
				limit = t.ReadHeader
			}
		case !c.answered:
			// net/http gives a new connection ReadHeaderTimeout for its
			// first request from the accept, not IdleTimeout.
			limit = t.ReadHeader
		default:
			limit, from = t.Idle, c.last
		}
		if limit > 0 && now.Sub(from) > limit {
			l.drop(c)
		}
	}
}

// closeAll answers the parked consumes (their waits end: the server's
// pollCtx is cancelled before the loops stop), then closes every
// connection and the loop's descriptors.
func (l *eventLoop) closeAll() {
	l.adopt()
	l.closing = true
	now := time.Now()
	for _, c := range l.conns {
		if c.parked != nil {
			l.giveUp(c, now)
		}
	}
	for l.parked > 0 || l.admits > 0 { // goroutine waits and admissions, ending
		l.mu.Lock()
		for len(l.signals) == 0 && len(l.admittedq) == 0 {
			l.ended.Wait()
		}
		l.mu.Unlock()
		l.pass++
		l.resume(time.Now())
		l.readmit(time.Now())
	}
	for _, c := range l.conns {
		if c.blocked || len(c.out) > c.outOff {
			// One last try for answers already made.
			_, _ = rawWrite(c.fd, c.out[c.outOff:])
		}
		l.drop(c)
	}
	l.release()
}

// httpDate returns the Date header's value for now, made once a second.
func (l *eventLoop) httpDate(now time.Time) []byte {
	if sec := now.Unix(); sec != l.dateSec || l.date == nil {
		l.dateSec = sec
		l.date = now.UTC().AppendFormat(l.date[:0], http.TimeFormat)
	}
	return l.date
}

// handoffListener is the listener net/http serves when loops run: Accept
// returns the connections the loops hand over.
type handoffListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn, 64), closed: make(chan struct{})}
}

// give passes nc to net/http, or closes it once the listener is closed.
func (h *handoffListener) give(nc net.Conn) {
	select {
	case h.conns <- nc:
	case <-h.closed:
		_ = nc.Close()
	}
}

// Accept implements net.Listener.
func (h *handoffListener) Accept() (net.Conn, error) {
	select {
	case nc := <-h.conns:
		return nc, nil
	case <-h.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (h *handoffListener) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

// Addr implements net.Listener: the public listener's address.
func (h *handoffListener) Addr() net.Addr { return h.addr }

var _ net.Conn = (*prefixConn)(nil)

// prefixConn is a handed-over connection: its reads return first the bytes
// the loop had read, and it half-closes as net/http's own connections do.
type prefixConn struct {
	net.Conn
	pre []byte
	// shift, while > 0, is how long the request net/http reads first had
	// been in the loop: the read deadlines net/http sets for it (header,
	// then whole request) are moved back by it, so that they run from
	// when the request began, as they would have without the loop. It
	// ends with the first answer or the first deadline cleared.
	shift atomic.Int64
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *prefixConn) Write(p []byte) (int, error) {
	if c.shift.Load() != 0 {
		c.shift.Store(0)
	}
	return c.Conn.Write(p)
}

func (c *prefixConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.shift.Store(0)
	} else if d := c.shift.Load(); d > 0 {
		t = t.Add(-time.Duration(d))
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *prefixConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// CloseWrite half-closes the connection, as net/http does before it closes
// one whose request it did not read to the end (a 413…): the client then
// reads the answer and EOF, not a reset.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
