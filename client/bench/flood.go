package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultFloodPublishers is how many valid publishers the flood scenario
// runs when Config.Publishers is not set.
const DefaultFloodPublishers = 8

// Flood measures Publishers (default 8) keep-alive publishers with the
// configured token for Duration while Concurrency clients flood the same
// server with publishes that each carry a random token, on a new
// connection each: what a flood of bad requests costs the good ones. The
// result is the valid publishers' (jobs, latency); the note counts the
// flood's requests and their answers. Against Kairos, run it with the
// admin Redis behind a DelayProxy: a token the server does not know costs
// it a round trip to the admin Redis.
func Flood(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	pubs := cfg.Publishers
	if pubs <= 0 {
		pubs = DefaultFloodPublishers
	}
	queue := runQueue(cfg.Queue, "flood")
	if err := cfg.prepare(ctx, queue); err != nil {
		return Result{}, err
	}
	path := escQueue(queue)
	body, query := c.body(0), publishQuery(0)

	// The valid publishers start first, so that their tokens are known
	// before the flood begins, as a server's regular clients' are.
	warm := c.conn()
	if err := warm.publish(ctx, path, query, body); err != nil {
		warm.close()
		return Result{}, fmt.Errorf("flood: a valid publish: %w", err)
	}
	warm.close()

	var ops, errs, bad, refused, badOther atomic.Int64
	var firstOther atomic.Value // string: the first answer other than 401
	var lat samples
	cfg.settle(ctx)
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	mark := cfg.cpuMark(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn := c.conn()
			defer cn.close()
			for ctx.Err() == nil {
				t := time.Now()
				if err := cn.publish(ctx, path, query, body); err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				lat.add(time.Since(t))
				ops.Add(1)
			}
		}()
	}
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				publish := c.randomTokenPublish
				if cfg.FloodBody > 0 {
					publish = c.unfinishedPublish
				}
				st, err := publish(ctx, path, query, body)
				if ctx.Err() != nil {
					return
				}
				bad.Add(1)
				switch {
				case err == nil && st == http.StatusUnauthorized:
					refused.Add(1)
				default:
					badOther.Add(1)
					if err != nil {
						firstOther.CompareAndSwap(nil, err.Error())
					} else {
						firstOther.CompareAndSwap(nil, fmt.Sprintf("status %d", st))
					}
				}
			}
		}()
	}
	wg.Wait()
	what := "a random token"
	if cfg.FloodBody > 0 {
		what = fmt.Sprintf("a random token and %d of the %d body bytes it announces", cfg.FloodBody-1, cfg.FloodBody)
	}
	r := Result{Scenario: "flood", Ops: ops.Load(), Errors: errs.Load(), Seconds: time.Since(start).Seconds(),
		Note: fmt.Sprintf("%d valid keep-alive publishers beside %d clients sending %s on a new connection each: "+
			"%d such requests (%.0f/s), %d answered 401, %d otherwise", pubs, cfg.Concurrency, what,
			bad.Load(), float64(bad.Load())/time.Since(start).Seconds(), refused.Load(), badOther.Load())}
	if first, ok := firstOther.Load().(string); ok {
		r.Note += " (the first: " + first + ")"
	}
	r.PerSec = float64(r.Ops) / r.Seconds
	lat.fill(&r)
	r.setCPU(context.WithoutCancel(ctx), &cfg, mark)
	return r, nil
}

// unfinishedPublish sends, on a connection of its own, a publish with a
// random token that announces a body of cfg.FloodBody bytes and sends one
// byte less, and returns the status of the answer, which only a server
// that refuses it before reading the body can give before its read
// timeout; body is unused (the scenario's valid publishes').
func (c *client) unfinishedPublish(ctx context.Context, path, query string, _ []byte) (int, error) {
	if c.tls != nil {
		return 0, errors.New("flood: --flood-body needs a plain http:// server")
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	floodBodyOnce.Do(func() { floodBody = make([]byte, c.cfg.FloodBody-1) })
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", c.dial)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	head := fmt.Sprintf("PUT %s%s?%s HTTP/1.1\r\nHost: %s\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n",
		c.prefix, path, query, c.host, hex.EncodeToString(b[:]), c.cfg.FloodBody)
	go func() {
		// Until the server answers and the connection closes: a server
		// that does not read leaves the write blocked.
		if _, err := io.WriteString(nc, head); err == nil {
			_, _ = nc.Write(floodBody)
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusCreated {
		return resp.StatusCode, errors.New("flood: a random token was accepted")
	}
	return resp.StatusCode, nil
}

// floodBody is what unfinishedPublish sends of its body, shared.
var (
	floodBodyOnce sync.Once
	floodBody     []byte
)

// randomTokenPublish publishes body with a random token on a connection
// of its own, and returns the status.
func (c *client) randomTokenPublish(ctx context.Context, path, query string, body []byte) (int, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	bc := *c
	bc.token = hex.EncodeToString(b[:])
	cn := bc.conn()
	defer cn.close()
	st, err := cn.do(ctx, http.MethodPut, path, nil, query, body, 0)
	if err != nil {
		return 0, err
	}
	if st == http.StatusCreated {
		return st, errors.New("flood: a random token was accepted")
	}
	return st, nil
}
