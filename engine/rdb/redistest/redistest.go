// Package redistest starts throwaway redis-server processes for tests.
//
// Each server listens on a free 127.0.0.1 port, keeps nothing on disk unless
// asked, and is killed when the test ends (on Linux, also when the test
// binary dies without cleaning up). When the redis-server binary is missing
// the test is skipped, unless REQUIRE_REDIS or CI is set, in which case it
// fails: the real-Redis tier can never be skipped silently in CI.
// scripts/install-redis.sh installs the binary.
//
// StartCluster and SharedCluster start a throwaway Redis Cluster of six
// servers (three masters with one replica each) with redis-cli, which they
// need as well.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options tune a test server.
type Options struct {
	// Port to listen on; 0 picks a free one.
	Port int
	// Dir is the working directory (AOF files); empty uses t.TempDir().
	Dir string
	// AppendOnly turns AOF on, with AppendFsync ("always", "everysec").
	AppendOnly  bool
	AppendFsync string
	// Extra config lines.
	Extra []string
}

// Server is one running redis-server.
type Server struct {
	Addr string
	Port int
	Dir  string
	opts Options
	cmd  *exec.Cmd
	tb   testing.TB
}

// Required reports whether a missing redis-server must fail the test.
func Required() bool {
	return os.Getenv("REQUIRE_REDIS") != "" || os.Getenv("CI") == "true"
}

// Binary returns the redis-server path, skipping or failing the test when
// it is missing.
func Binary(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if Required() {
			tb.Fatalf("redis-server not found and REQUIRE_REDIS/CI is set: run scripts/install-redis.sh")
		}
		tb.Skip("redis-server not found; run scripts/install-redis.sh (set REQUIRE_REDIS=1 to fail instead)")
	}
	return path
}

// Start starts a redis-server for tb with default options.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith starts a redis-server for tb.
func StartWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	bin := Binary(tb)
	if opts.Port == 0 {
		opts.Port = FreePort(tb)
	}
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", opts.Port), Port: opts.Port, Dir: opts.Dir, opts: opts, tb: tb}
	if err := s.start(bin, false); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Kill)
	return s
}

func (s *Server) config() string {
	lines := []string{
		"bind 127.0.0.1",
		fmt.Sprintf("port %d", s.opts.Port),
		fmt.Sprintf("dir %s", s.Dir),
		`save ""`,
		"protected-mode no",
		"maxmemory-policy noeviction",
		"loglevel warning",
		"logfile " + filepath.Join(s.Dir, "redis.log"),
	}
	if s.opts.AppendOnly {
		fsync := s.opts.AppendFsync
		if fsync == "" {
			fsync = "everysec"
		}
		lines = append(lines, "appendonly yes", "appendfsync "+fsync)
	} else {
		lines = append(lines, "appendonly no")
	}
	lines = append(lines, s.opts.Extra...)
	return strings.Join(lines, "\n") + "\n"
}

// start runs redis-server and waits until PING answers, or with loading
// until the server accepts commands at all (PING may answer LOADING).
func (s *Server) start(bin string, loading bool) error {
	cfg := filepath.Join(s.Dir, "redis.conf")
	if err := os.WriteFile(cfg, []byte(s.config()), 0o600); err != nil {
		return err
	}
	s.cmd = exec.Command(bin, cfg)
	s.cmd.Dir = s.Dir
	s.cmd.SysProcAttr = procAttr()
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	go func(c *exec.Cmd) { _ = c.Wait() }(s.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		err := c.Ping(context.Background()).Err()
		_ = c.Close()
		if err == nil || loading && redis.IsLoadingError(err) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s (log: %s)", s.Addr, s.logTail())
}

func (s *Server) logTail() string {
	f, err := os.Open(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var last []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		last = append(last, sc.Text())
		if len(last) > 5 {
			last = last[1:]
		}
	}
	return strings.Join(last, " | ")
}

// Kill stops the server at once (SIGKILL). Safe to call twice.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		s.cmd = nil
		// Wait until the port is free so that a restart can bind it.
		for i := 0; i < 100; i++ {
			c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
			if err != nil {
				return
			}
			_ = c.Close()
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Restart kills and starts the server again on the same port and directory
// (with AOF on, the data comes back).
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	if err := s.start(Binary(s.tb), false); err != nil {
		s.tb.Fatalf("redistest: restart: %v", err)
	}
}

// RestartLoading kills the server and starts it again on the same port and
// directory with extra config lines added for good, and returns as soon as
// it accepts connections: with AOF on it may still be loading its data
// (commands answer LOADING). Lines such as "key-load-delay 50" (µs per
// key, Redis 7) stretch the loading so that tests can observe it.
func (s *Server) RestartLoading(extra ...string) {
	s.tb.Helper()
	s.Kill()
	s.opts.Extra = append(s.opts.Extra, extra...)
	if err := s.start(Binary(s.tb), true); err != nil {
		s.tb.Fatalf("redistest: restart: %v", err)
	}
}

// Client returns a go-redis client for the server, closed at cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The kernel may hand the same free port to the next Listen: a
		// test asking for two ports (a server's API and admin ports) must
		// get two, so a port is given out once per test binary.
		freePortsMu.Lock()
		seen := freePorts[port]
		freePorts[port] = true
		freePortsMu.Unlock()
		if !seen {
			return port
		}
	}
}

var (
	freePortsMu sync.Mutex
	freePorts   = map[int]bool{}
)
