package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ceiling is a do-nothing server of the lmstfy API: it answers publish,
// bulk publish, consume, ACK and size with canned responses of the right
// shape, storing nothing. Benchmarked the same way as a real server, it
// shows what the machine and the load generator allow.
type Ceiling struct{ n atomic.Int64 }

var (
	ceilPublished = []byte(`{"job_id":"01M7Z12284MKPEZK2N8C000000","msg":"published"}`)
	ceilJob       = []byte(`{"attributes":null,"data":"eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4","elapsed_ms":1,"job_id":"01M7Z12284MKPEZK2N8C000000","msg":"new job","namespace":"bench","queue":"bench","remain_tries":2,"ttl":3600}`)
	ceilSize      = []byte(`{"namespace":"bench","queue":"bench","size":0}`)
	ceilBulk      = []byte(`{"job_ids":["01M7Z12284MKPEZK2N8C000000"],"msg":"published"}`)
)

// ServeHTTP implements http.Handler.
func (c *Ceiling) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	switch {
	case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/bulk"):
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(ceilBulk)
	case r.Method == http.MethodPut:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(ceilPublished)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case strings.HasSuffix(r.URL.Path, "/size"):
		_, _ = w.Write(ceilSize)
	default:
		_, _ = w.Write(ceilJob)
	}
}

// Requests returns how many requests the ceiling server answered.
func (c *Ceiling) Requests() int64 { return c.n.Load() }

// ServeCeiling serves a Ceiling on ln until ctx ends.
func ServeCeiling(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: &Ceiling{}, ReadHeaderTimeout: time.Minute}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("bench: ceiling server: %w", err)
	}
	return nil
}

// CeilingProcess is a ceiling server running in a child process, so that it
// is measured the way a real server is: over loopback, with its CPU time
// apart from the load generator's.
type CeilingProcess struct {
	// Addr is the server's base URL (http://127.0.0.1:PORT).
	Addr   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	once   sync.Once
	err    error
}

// StartCeilingProcess starts name with args — a command that serves a
// Ceiling, prints its listening address (HOST:PORT) on a line of its
// standard output, and exits when its standard input closes (`kairos bench
// ceiling-server --exit-on-stdin-eof`) — and waits up to 10 s for the
// address.
func StartCeilingProcess(ctx context.Context, name string, args ...string) (*CeilingProcess, error) {
	cmd := exec.Command(name, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: ceiling process: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: ceiling process: %w", err)
	}
	p := &CeilingProcess{cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: ceiling process: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	var addr string
	select {
	case addr = <-line:
	case <-timer.C:
	case <-ctx.Done():
	}
	if _, _, err := net.SplitHostPort(addr); err != nil || addr == "" {
		_ = p.Close()
		return nil, fmt.Errorf("bench: ceiling process printed no address (%q): %s", addr, strings.TrimSpace(p.stderr.String()))
	}
	p.Addr = "http://" + addr
	return p, nil
}

// PID is the child's process ID.
func (p *CeilingProcess) PID() int { return p.cmd.Process.Pid }

// CPU meters the child's CPU time.
func (p *CeilingProcess) CPU() CPUMeter { return ProcessCPU(p.PID()) }

// Close stops the child (closing its standard input, then killing it after
// 2 s) and waits for it; safe to call twice.
func (p *CeilingProcess) Close() error {
	p.once.Do(func() {
		_ = p.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				p.err = fmt.Errorf("bench: ceiling process: %w: %s", err, strings.TrimSpace(p.stderr.String()))
			}
		case <-time.After(2 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
	return p.err
}
