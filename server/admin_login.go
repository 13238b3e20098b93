package server

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// loginGuard slows down password guessing on the admin listener
// ([Accounts], doc/config.md#accounts):
//
//   - a client address that failed loginFailMax logins (credentials sent
//     and refused) within loginFailWindow is answered 429 with
//     Retry-After, its password not compared at all, until that window
//     has passed; the window starts at its first failure. A login that
//     sends no credentials (a browser's first request, which asks for the
//     login dialog) is not a failure. Addresses are counted one by one for
//     IPv4 and by /64 for IPv6 (what one host holds);
//   - at most half the CPUs (at least one) compare bcrypt hashes at once,
//     the others wait their turn (within the request's context), so that
//     a flood of logins from many addresses cannot take every core from
//     the job routes: a bcrypt comparison costs tens of milliseconds of
//     CPU by design.
//
// The failures are kept in memory, per server, for at most
// loginGuardMax addresses (expired entries are dropped first; a map still
// full is started over).
type loginGuard struct {
	mu    sync.Mutex
	fails map[string]*loginFails
	limit int           // failures that block an address: loginFailMax
	slots chan struct{} // bcrypt comparisons under way
	now   func() time.Time
}

type loginFails struct {
	n     int
	start time.Time
}

const (
	loginFailMax    = 10
	loginFailWindow = time.Minute
	loginGuardMax   = 10000
)

func newLoginGuard() *loginGuard {
	return &loginGuard{fails: map[string]*loginFails{}, limit: loginFailMax, slots: make(chan struct{}, max(1, runtime.NumCPU()/2)), now: time.Now}
}

// clientKey is the address failures are counted by: the connection's
// IPv4 address, or its IPv6 address's /64.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip4 := ip.To4(); ip4 != nil {
		return ip4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// blocked reports how long the client at key must wait before its next
// login is looked at (0: it may try now).
func (g *loginGuard) blocked(key string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.fails[key]
	if f == nil {
		return 0
	}
	left := loginFailWindow - g.now().Sub(f.start)
	if left <= 0 {
		delete(g.fails, key)
		return 0
	}
	if f.n < g.limit {
		return 0
	}
	return left
}

// failed counts a refused login of the client at key.
func (g *loginGuard) failed(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	f := g.fails[key]
	if f != nil && now.Sub(f.start) >= loginFailWindow {
		f = nil
	}
	if f == nil {
		if len(g.fails) >= loginGuardMax {
			for k, o := range g.fails {
				if now.Sub(o.start) >= loginFailWindow {
					delete(g.fails, k)
				}
			}
			if len(g.fails) >= loginGuardMax {
				g.fails = map[string]*loginFails{}
			}
		}
		f = &loginFails{start: now}
		g.fails[key] = f
	}
	f.n++
}

// slot waits for a turn to compare a bcrypt hash; release gives it back.
// It fails only when ctx ends first.
func (g *loginGuard) slot(ctx context.Context) (release func(), err error) {
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// retryAfter is d in whole seconds, at least 1, for a Retry-After header.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
