package redisretry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeRedis is a RESP server that answers +OK to every command but HELLO
// (an error: go-redis then speaks RESP2) and COMMAND, and lets a test decide, per
// command, to close the connection instead of answering.
type fakeRedis struct {
	ln net.Listener
	// hangUp is called with each command's words; true closes the
	// connection without an answer.
	hangUp func(args []string) bool
	// closed receives when the server closed a connection after its
	// answer to BYE.
	closed chan struct{}

	mu   sync.Mutex
	seen map[string]int // commands received, by name
}

func startFakeRedis(t *testing.T, hangUp func(args []string) bool) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{ln: ln, hangUp: hangUp, closed: make(chan struct{}, 1), seen: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { f.serve(c) })
		}
	})
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return f
}

func (f *fakeRedis) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[name]
}

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(args[0])
		f.mu.Lock()
		f.seen[name]++
		f.mu.Unlock()
		switch {
		case f.hangUp(args):
			return
		case name == "HELLO":
			_, err = io.WriteString(c, "-ERR unknown command 'HELLO'\r\n")
		case name == "COMMAND": // a cluster client's command table: none
			_, err = io.WriteString(c, "*0\r\n")
		case name == "BYE":
			_, _ = io.WriteString(c, "+OK\r\n")
			_ = c.Close()
			f.closed <- struct{}{}
			return
		default:
			_, err = io.WriteString(c, "+OK\r\n")
		}
		if err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		s, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args[i] = strings.TrimSuffix(s, "\r\n")
	}
	return args, nil
}

// TestDialerLost: a command whose connection breaks after it was sent is
// sent once, alone, in a pipeline or in a transaction, by a client or a
// cluster client, and fails with a LostError (Unreachable, not Unsent),
// where go-redis's own dialer has it sent again (a client's MaxRetries, a
// cluster client's MaxRedirects). A connection that the server closed while idle
// is still dropped before use (go-redis checks its file descriptor, which
// Dialer's connections keep reachable).
func TestDialerLost(t *testing.T) {
	f := startFakeRedis(t, func(args []string) bool {
		return strings.EqualFold(args[0], "INCR")
	})
	ctx := context.Background()
	newClient := func(dialer func(context.Context, string, string) (net.Conn, error)) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: f.ln.Addr().String(), Dialer: dialer, DisableIdentity: true, MaxRetries: 3})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// go-redis's own dialer: the INCR is sent again and again.
	err := newClient(nil).Incr(ctx, "k").Err()
	if n := f.count("INCR"); n != 4 || Lost(err) {
		t.Fatalf("default dialer: INCR sent %d times (%v), want 4 (MaxRetries 3): did go-redis change?", n, err)
	}

	// A cluster client sends it again on its own (MaxRedirects), on one
	// node that holds every slot here.
	newCluster := func(dialer func(context.Context, string, string) (net.Conn, error)) *redis.ClusterClient {
		host, port, _ := net.SplitHostPort(f.ln.Addr().String())
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Dialer: dialer, DisableIdentity: true,
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{ID: "n", Addr: net.JoinHostPort(host, port)}}}}, nil
			},
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	before := f.count("INCR")
	err = newCluster(nil).Incr(ctx, "k").Err()
	if n := f.count("INCR") - before; n < 2 || Lost(err) {
		t.Fatalf("default dialer: a cluster client sent INCR %d times (%v), want it sent again: did go-redis change?", n, err)
	}

	c := newClient(Dialer(DialTimeout))
	cc := newCluster(Dialer(DialTimeout))
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"command", func() error { return c.Incr(ctx, "k").Err() }},
		{"pipeline", func() error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "a", "1", 0)
				p.Incr(ctx, "k")
				return nil
			})
			return err
		}},
		{"transaction", func() error {
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "k")
				return nil
			})
			return err
		}},
		{"cluster command", func() error { return cc.Incr(ctx, "k").Err() }},
		{"cluster pipeline", func() error {
			_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "a", "1", 0)
				p.Incr(ctx, "k")
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.count("INCR")
			err := tc.run()
			if n := f.count("INCR") - before; n != 1 {
				t.Fatalf("INCR sent %d times, want once", n)
			}
			var l *LostError
			if !errors.As(err, &l) || l.Err == nil {
				t.Fatalf("error %v (%T), want a *LostError", err, err)
			}
			if !Unreachable(err) || Unsent(err) || Refused(err) || !Failover(err) {
				t.Fatalf("%v: Unreachable %v Unsent %v Refused %v Failover %v; want Unreachable and Failover only",
					err, Unreachable(err), Unsent(err), Refused(err), Failover(err))
			}
			if errors.Is(err, io.EOF) {
				t.Fatalf("%v unwraps to io.EOF: go-redis would send it again", err)
			}
		})
	}

	// A connection that the server closed while idle in the pool is not
	// used: PING gets a new one and its answer.
	if err := c.Do(ctx, "BYE").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not close the connection")
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the server closed the idle connection: %v", err)
	}
}
