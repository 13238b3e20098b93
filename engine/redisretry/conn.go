package redisretry

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis sends a command again (MaxRetries on a client, MaxRedirects on
// a cluster client, a whole pipeline or transaction at a time) when its
// connection broke (io.EOF, a reset) or timed out after the command was
// written. Redis may have run it then: an ACK sent again answers "job not
// found" for the job the first one deleted, a token created again "token
// exists", a bucket charged twice; and the error finally returned (a
// refused dial while Redis restarts) says the command was never sent.
// Dialer's connections hide such errors from go-redis, which then returns
// them at once: *LostError, Unreachable and not Unsent. go-redis still
// retries what ran nothing: a refused dial, a pool timeout, and the replies
// Redis gives before running a command (LOADING, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN, READONLY, NOREPLICAS), and a cluster client still follows
// MOVED and ASK. Which calls may be retried after a LostError is the
// caller's decision (package doc: reads only).

// DialTimeout is go-redis's default dial timeout, which Dialer keeps.
const DialTimeout = 5 * time.Second

// Dialer returns a dialer for go-redis's Options.Dialer,
// ClusterOptions.Dialer and FailoverOptions.Dialer (which it calls with
// the master's address): go-redis's own (timeout, TCP keep-alive), whose
// connections report a failed read or write as a *LostError.
func Dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := redis.NewDialer(&redis.Options{DialTimeout: timeout})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if sc, ok := c.(syscallConn); ok {
			// go-redis checks an idle connection through its file
			// descriptor before using it (a Redis that restarted closed
			// it): keep that possible.
			return &lostConnFD{lostConn{c}, sc}, nil
		}
		return &lostConn{c}, nil
	}
}

// syscallConn is a connection that gives access to its file descriptor.
type syscallConn interface {
	net.Conn
	syscall.Conn
}

// lostConn is a connection whose failed reads and writes are LostErrors.
type lostConn struct{ net.Conn }

func (c *lostConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		err = &LostError{Op: "read", Err: err}
	}
	return n, err
}

func (c *lostConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		err = &LostError{Op: "write", Err: err}
	}
	return n, err
}

// lostConnFD is a lostConn that keeps its connection's SyscallConn.
type lostConnFD struct {
	lostConn
	sc syscall.Conn
}

func (c *lostConnFD) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// LostError is a read or a write that failed on a connection to Redis
// already made (a connection that broke or timed out): the command may
// have run. It has no Unwrap: go-redis would find its cause (an io.EOF, a
// reset, a net.Error timeout) and send the command again.
type LostError struct {
	Op  string // "read" or "write"
	Err error  // the connection's error
}

func (e *LostError) Error() string {
	return "redis connection lost (the command may have run): " + e.Op + ": " + e.Err.Error()
}

// Lost reports whether err is (or wraps) a *LostError.
func Lost(err error) bool {
	var l *LostError
	return errors.As(err, &l)
}
