package bench

import (
	"errors"
	"net"
	"sync"
	"time"
)

// DelayProxy is a TCP proxy that delays every byte it forwards by a fixed
// time in each direction, without limiting throughput (what it read is
// stamped and written once its delay passed, while it goes on reading): a
// dependency "1 ms away" on one machine, such as the admin Redis of the
// flood scenario.
type DelayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartDelayProxy listens on listen (host:port; port 0 picks one) and
// forwards each connection to target, delaying by delay each way.
func StartDelayProxy(listen, target string, delay time.Duration) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{ln: ln, target: target, delay: delay, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes every connection it forwards.
func (p *DelayProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track registers c, or reports false once the proxy is closed.
func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *DelayProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(in)
		}()
	}
}

// serve forwards one connection both ways until either side ends.
func (p *DelayProxy) serve(in net.Conn) {
	if !p.track(in) {
		_ = in.Close()
		return
	}
	defer p.untrack(in)
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(out) {
		_ = out.Close()
		return
	}
	defer p.untrack(out)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(out, in) }()
	go func() { defer wg.Done(); p.pump(in, out) }()
	wg.Wait()
}

// chunk is what one read got, and when it may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst, each read delayed by p.delay; when it ends
// (either side failed or closed) it closes both.
func (p *DelayProxy) pump(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	ch := make(chan chunk, 4096)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				select {
				case ch <- chunk{b[:n], time.Now().Add(p.delay)}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
