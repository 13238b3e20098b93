// Package lmstfytest runs a real lmstfy server (v1.0.16, built from the Go
// module proxy by scripts/build-lmstfy.sh and cached in ~/.cache/kairos)
// for tests that need data written by lmstfy itself: the import of
// lmstfy's jobs (issue #30). When lmstfy cannot be built the test is
// skipped, unless CI=true or REQUIRE_LMSTFY is set: then it fails.
package lmstfytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bitleak/lmstfy/client"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// Required reports whether a missing lmstfy build must fail the test
// rather than skip it: in CI (CI=true) and with REQUIRE_LMSTFY set.
func Required() bool {
	return os.Getenv("REQUIRE_LMSTFY") != "" || os.Getenv("CI") == "true"
}

// Binary returns the path of lmstfy's server, building it with
// scripts/build-lmstfy.sh when the cached one is missing or of another
// version (a minute or two, once per machine).
func Binary(tb testing.TB) string {
	tb.Helper()
	root := repoRoot(tb)
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "scripts", "build-lmstfy.sh"))
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		msg := fmt.Sprintf("scripts/build-lmstfy.sh: %v\n%s", err, errOut.String())
		if Required() {
			tb.Fatalf("lmstfy could not be built and CI/REQUIRE_LMSTFY is set: %s", msg)
		}
		tb.Skipf("lmstfy could not be built (set REQUIRE_LMSTFY=1 to fail instead): %s", msg)
	}
	return strings.TrimSpace(out.String())
}

// repoRoot is the directory of the go.mod above the test's directory.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			tb.Fatal("lmstfytest: no go.mod above the test's directory")
		}
		dir = up
	}
}

// Server is a running lmstfy server on a test's Redis.
type Server struct {
	Admin   string // http://127.0.0.1:port of the admin API
	APIHost string
	APIPort int
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *bytes.Buffer
}

// Start runs lmstfy with one pool (default) and its admin data on the
// Redis at redisAddr, and waits until its admin API answers; it is
// stopped at the test's cleanup, or earlier by Stop.
func Start(tb testing.TB, redisAddr string) *Server {
	tb.Helper()
	bin := Binary(tb)
	dir := tb.TempDir()
	api, admin := redistest.FreePort(tb), redistest.FreePort(tb)
	conf := fmt.Sprintf(`Host = "127.0.0.1"
Port = %d
AdminHost = "127.0.0.1"
AdminPort = %d
LogLevel = "warn"
[AdminRedis]
Addr = %q
[Pool.default]
Addr = %q
`, api, admin, redisAddr, redisAddr)
	path := filepath.Join(dir, "lmstfy.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	s := &Server{Admin: fmt.Sprintf("http://127.0.0.1:%d", admin), APIHost: "127.0.0.1", APIPort: api,
		exited: make(chan struct{}), log: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, "-c", path, "-p", filepath.Join(dir, "lmstfy.pid"))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("start lmstfy: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	tb.Cleanup(func() { s.Stop(tb) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(s.Admin + "/version")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.exited:
			tb.Fatalf("lmstfy exited at start: %s", s.log)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("lmstfy's admin API did not answer within 20 s: %v; log: %s", err, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops lmstfy (SIGTERM; it shuts down gracefully) and waits for it.
func (s *Server) Stop(tb testing.TB) {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		tb.Errorf("lmstfy did not stop within 15 s of SIGTERM")
	}
}

// Token creates a token of namespace ns through lmstfy's admin API.
func (s *Server) Token(tb testing.TB, ns string) string {
	tb.Helper()
	var out struct{ Token string }
	s.AdminDo(tb, http.MethodPost, "/token/"+ns+"?description=import", "", http.StatusCreated, &out)
	if out.Token == "" {
		tb.Fatalf("lmstfy gave no token")
	}
	return out.Token
}

// AdminDo sends a request to lmstfy's admin API, checks its status and
// decodes its JSON answer into out (unless out is nil).
func (s *Server) AdminDo(tb testing.TB, method, path, body string, status int, out any) {
	tb.Helper()
	req, err := http.NewRequest(method, s.Admin+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("lmstfy %s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != status {
		tb.Fatalf("lmstfy %s %s: %d %s, want %d", method, path, res.StatusCode, b, status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			tb.Fatalf("lmstfy %s %s: %s: %v", method, path, b, err)
		}
	}
}

// Client returns lmstfy's own Go client for namespace ns against this
// lmstfy server.
func (s *Server) Client(ns, token string) *client.LmstfyClient {
	return client.NewLmstfyClient(s.APIHost, s.APIPort, ns, token)
}

// WaitFor polls cond every 50 ms until it holds, for at most d.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: not within %v", what, d)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
