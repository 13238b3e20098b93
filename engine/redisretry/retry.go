// Package redisretry is the bounded retry Kairos gives Redis calls that a
// Redis Cluster refuses for a moment: during a failover (a slot without a
// master for about cluster-node-timeout), a slot migration, or a node that
// loads its data. The job engine (engine/rdb) and the token store and
// throttler (auth) share it, so that a token check rides out a failover of
// the admin Redis exactly as a publish rides out one of its pool.
//
// What may be retried depends on the call: Refused errors ran nothing and
// may be retried for any command; Unsent errors were never sent; a broken
// or timed-out connection (Unreachable) may have run the command, so only
// reads retry it. Dialer keeps go-redis itself from sending a command
// again after its connection broke (conn.go).
package redisretry

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pauses between tries: they double from firstPause up to maxPause.
const (
	firstPause = 10 * time.Millisecond
	maxPause   = 250 * time.Millisecond
)

// Refused reports whether err is an error that Redis answers before running
// a command: TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING, and a MOVED or ASK
// that go-redis gave up following (its slot map is being rebuilt). A
// script refused with one of them wrote nothing, so a retry never applies
// a write twice.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, p := range [...]string{"TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "MOVED ", "ASK "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Unsent reports whether err means the command never left the client: no
// connection could be made (a killed node: connection refused), or none
// was free in the pool in time.
func Unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// Unreachable reports whether err is a connection failure after which the
// command may or may not have run: a connection that broke or timed out
// (a LostError, or its cause from a connection that Dialer did not make),
// on top of Unsent. Only an idempotent command (a read) is retried on it.
// A context that ended is not one: the caller gave up.
func Unreachable(err error) bool {
	switch {
	case err == nil:
		return false
	case Unsent(err), Lost(err): // a dial error may wrap the dial's own deadline
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Failover reports whether err is what a Redis that fails over answers:
// Refused or Unreachable, or READONLY (a master demoted to a replica that
// a client still writes to). It is the condition under which a caller may
// fall back on a recent answer (auth's token grace), never one where Redis
// said something about the data.
func Failover(err error) bool {
	return Refused(err) || Unreachable(err) || redis.IsReadOnlyError(err)
}

// Do runs try and, while it fails with an error retryable accepts, runs it
// again with a growing pause (10 ms to 250 ms), for at most limit in all
// (limit <= 0: once). It returns try's last error; a done ctx ends the
// pauses (try sees ctx itself).
func Do(ctx context.Context, limit time.Duration, retryable func(error) bool, try func() error) error {
	err := try()
	if limit <= 0 || !retryable(err) {
		return err
	}
	deadline := time.Now().Add(limit)
	for pause := firstPause; retryable(err) && time.Now().Add(pause).Before(deadline); pause = min(2*pause, maxPause) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = try()
	}
	return err
}

// Cmds sends again, with a growing pause (as Do), the commands of cmds (a
// pipeline's, already sent) whose error retryable accepts, in one pipeline
// of c per pass, for at most limit in all, and returns the first error
// among cmds afterwards (as go-redis's Pipelined does: redis.Nil
// included). The other commands ran and are not sent twice.
func Cmds(ctx context.Context, c redis.UniversalClient, limit time.Duration, retryable func(error) bool, cmds []redis.Cmder) error {
	if limit > 0 {
		var failed []redis.Cmder
		for _, cmd := range cmds {
			if retryable(cmd.Err()) {
				failed = append(failed, cmd)
			}
		}
		// The first try only reports what the pipeline left refused, so
		// that Do pauses before the first resend.
		sent := false
		_ = Do(ctx, limit, func(err error) bool { return err == errPending }, func() error {
			if sent {
				p := c.Pipeline()
				for _, cmd := range failed {
					// go-redis keeps an earlier error when the whole
					// pipeline fails (a broken connection): clear it, so
					// that such a failure, after which the command may have
					// run, is not taken for a refusal and sent once more.
					cmd.SetErr(nil)
					_ = p.Process(ctx, cmd)
				}
				_, _ = p.Exec(ctx)
				failed = slices.DeleteFunc(failed, func(cmd redis.Cmder) bool { return !retryable(cmd.Err()) })
			}
			sent = true
			if len(failed) > 0 {
				return errPending
			}
			return nil
		})
	}
	return FirstErr(cmds)
}

// errPending is Cmds's note to Do that commands are still refused.
var errPending = errors.New("redisretry: refused commands pending")

// FirstErr is the first error among cmds.
func FirstErr(cmds []redis.Cmder) error {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}
