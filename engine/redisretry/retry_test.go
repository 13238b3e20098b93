package redisretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisError is an error reply as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestClassify: which errors each predicate accepts. An error about the
// data (WRONGTYPE, a script error, redis.Nil) is none of them, nor is a
// context the caller ended.
func TestClassify(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}
	for _, tc := range []struct {
		err                                    error
		refused, unsent, unreachable, failover bool
	}{
		{nil, false, false, false, false},
		{redisError("CLUSTERDOWN The cluster is down"), true, false, false, true},
		{redisError("TRYAGAIN Multiple keys request during rehashing of slot"), true, false, false, true},
		{redisError("MOVED 3999 127.0.0.1:6381"), true, false, false, true},
		{redisError("ASK 3999 127.0.0.1:6381"), true, false, false, true},
		{redisError("LOADING Redis is loading the dataset in memory"), true, false, false, true},
		{redisError("MASTERDOWN Link with MASTER is down"), true, false, false, true},
		{redisError("READONLY You can't write against a read only replica."), false, false, false, true},
		{dial, false, true, true, true},
		{fmt.Errorf("auth: verify: %w", dial), false, true, true, true},
		{redis.ErrPoolTimeout, false, true, true, true},
		{read, false, false, true, true},
		{io.EOF, false, false, true, true},
		{timeout, false, false, true, true},
		{fmt.Errorf("ack: %w", &LostError{Op: "read", Err: io.EOF}), false, false, true, true},
		{&LostError{Op: "read", Err: timeout}, false, false, true, true},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false, false, false, false},
		{redisError("ERR Error running script"), false, false, false, false},
		{redis.Nil, false, false, false, false},
		{context.Canceled, false, false, false, false},
		{context.DeadlineExceeded, false, false, false, false},
		{fmt.Errorf("%w: %w", context.DeadlineExceeded, dial), false, true, true, true},
		{errors.New("MOVEDX"), false, false, false, false},
	} {
		if got := Refused(tc.err); got != tc.refused {
			t.Errorf("Refused(%v) = %v", tc.err, got)
		}
		if got := Unsent(tc.err); got != tc.unsent {
			t.Errorf("Unsent(%v) = %v", tc.err, got)
		}
		if got := Unreachable(tc.err); got != tc.unreachable {
			t.Errorf("Unreachable(%v) = %v", tc.err, got)
		}
		if got := Failover(tc.err); got != tc.failover {
			t.Errorf("Failover(%v) = %v", tc.err, got)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestDo: a retryable error is retried until it stops or the limit runs
// out; another error, or a limit of 0, is returned at once.
func TestDo(t *testing.T) {
	refused := redisError("CLUSTERDOWN down")
	for _, tc := range []struct {
		name      string
		limit     time.Duration
		failFirst int // tries that fail
		err       error
		wantTries int
		wantErr   bool
	}{
		{"recovers", 5 * time.Second, 3, refused, 4, false},
		{"no limit", 0, 3, refused, 1, true},
		{"not retryable", 5 * time.Second, 3, redisError("ERR boom"), 1, true},
		// 10+20+40 ms of pauses fit in 100 ms, the next 80 does not.
		{"limit runs out", 100 * time.Millisecond, 1000, refused, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			err := Do(context.Background(), tc.limit, Refused, func() error {
				tries++
				if tries <= tc.failFirst {
					return tc.err
				}
				return nil
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Do = %v, want error %v", err, tc.wantErr)
			}
			// A loaded machine may fit fewer pauses in the limit, never more.
			if tries > tc.wantTries || !tc.wantErr && tries != tc.wantTries || tries < 1 {
				t.Fatalf("%d tries, want %d", tries, tc.wantTries)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tries := 0
	start := time.Now()
	err := Do(ctx, time.Minute, Refused, func() error { tries++; return refused })
	if err == nil || tries != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("Do with a done context: %v after %d tries in %v; want the error after one", err, tries, time.Since(start))
	}
}
