package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// Health and readiness, served on both listeners without a token:
//
//   - GET /healthz answers 200 while the process serves HTTP (liveness);
//   - GET /readyz answers 200 only when every ReadyCheck passes within
//     readyTimeout and the server is not shutting down, else 503 with the
//     failed checks by name (readiness); a full Redis (ErrFull) passes,
//     its check reading "full", and so does a pool in its memory reserve
//     (ErrReserve), its check reading "reserve". It names no address and no Redis
//     error text: the public port is unauthenticated. The full error goes
//     to the server log.

// ReadyCheck is one dependency /readyz checks: a pool's Redis, the admin
// Redis. Check returns nil when the dependency can serve now; ErrNotMaster,
// ErrLoading or ErrClusterDown say why not, other errors read
// "unreachable". ErrFull says that it serves all but the writes that
// take memory: the check reads "full" and the server stays ready.
type ReadyCheck struct {
	// Name names the check in /readyz's body, e.g. "pool default".
	Name  string
	Check func(ctx context.Context) error
}

// Errors a ReadyCheck returns for a Redis that answers but cannot serve.
var (
	// ErrNotMaster means the Redis is a replica (INFO replication role):
	// it cannot take writes.
	ErrNotMaster = errors.New("server: redis is not a master")
	// ErrLoading means the Redis is loading its dataset (AOF or RDB) and
	// refuses commands until done.
	ErrLoading = errors.New("server: redis is loading")
	// ErrClusterDown means a Redis Cluster does not serve every hash slot
	// (CLUSTER INFO cluster_state:fail): some keys have no master.
	ErrClusterDown = errors.New("server: redis cluster is down")
	// ErrFull means the Redis is at maxmemory under noeviction: it refuses
	// publishes (507) but serves consume, ACK, delete and release, which
	// drain it. A server that sends traffic elsewhere would stop the drain
	// too, so a full Redis leaves the server ready, its check "full".
	ErrFull = errors.New("server: redis is full")
	// ErrReserve means a node of the pool is in its memory reserve
	// ([Pool.NAME] MemoryReserve): the publishes of the namespaces holding
	// at least their share are refused (507), the others' go on until
	// Redis is full. The server stays ready, its check "reserve".
	ErrReserve = errors.New("server: pool is in its memory reserve")
)

const (
	// readyTimeout bounds all checks of one /readyz.
	readyTimeout = time.Second
	// readyCacheFor is how long a /readyz result is reused, so that a
	// flood of probes on the unauthenticated port costs Redis at most a
	// few commands per second.
	readyCacheFor = 250 * time.Millisecond
)

// readyState is the result of the last /readyz, shared by its callers.
type readyState struct {
	mu     sync.Mutex
	at     time.Time
	ready  bool
	checks map[string]string
}

// readyBody is /readyz's answer.
type readyBody struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

// healthz serves GET /healthz: the process serves.
func (s *Server) healthz(c *gin.Context) {
	c.Data(http.StatusOK, jsonContentType, []byte(`{"status":"ok"}`))
}

// readyz serves GET /readyz.
func (s *Server) readyz(c *gin.Context) {
	ready, checks := s.ready(c.Request.Context())
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
		c.Header("Retry-After", "1")
	}
	c.Header("Cache-Control", "no-store")
	writeJSON(c, status, readyBody{Ready: ready, Checks: checks})
}

// ready runs the checks (or reuses a result younger than readyCacheFor)
// and reports whether all pass, with each check's state.
func (s *Server) ready(ctx context.Context) (bool, map[string]string) {
	if s.draining.Load() {
		return false, map[string]string{"server": "shutting down"}
	}
	r := &s.readiness
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < readyCacheFor {
		return r.ready, r.checks
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	states := make([]string, len(s.readyChecks))
	var wg sync.WaitGroup
	for i, rc := range s.readyChecks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rc.Check(ctx)
			states[i] = checkState(err)
			switch {
			case errors.Is(err, ErrFull):
				s.log.WithError(err).WithField("check", rc.Name).Warn("redis is full: publishes are refused (507) until consumers make room")
			case errors.Is(err, ErrReserve):
				s.log.WithError(err).WithField("check", rc.Name).Warn("pool in its memory reserve: the publishes of the namespaces holding at least their share are refused (507)")
			case err != nil:
				s.log.WithError(err).WithField("check", rc.Name).Warn("not ready")
			}
		}()
	}
	wg.Wait()
	ready, checks := true, make(map[string]string, len(states))
	for i, rc := range s.readyChecks {
		checks[rc.Name] = states[i]
		ready = ready && (states[i] == "ok" || states[i] == "full" || states[i] == "reserve")
	}
	r.at, r.ready, r.checks = time.Now(), ready, checks
	return ready, checks
}

// checkState is a check's state as /readyz shows it: short words, no
// addresses nor Redis texts.
func checkState(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotMaster), redis.IsReadOnlyError(err):
		return "not master"
	case errors.Is(err, ErrLoading), redis.IsLoadingError(err):
		return "loading"
	case errors.Is(err, ErrClusterDown), redis.IsClusterDownError(err):
		return "cluster down"
	case errors.Is(err, ErrFull):
		return "full"
	case errors.Is(err, ErrReserve):
		return "reserve"
	}
	// Refused, reset, timed out (go-redis retries its dials until the
	// deadline): did not answer in time.
	return "unreachable"
}
