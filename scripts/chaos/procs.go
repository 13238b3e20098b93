package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisor owns every process a scenario starts. Each child runs in its
// own process group (so that a SIGKILL reaches everything it forked) and
// with a parent-death signal (so that it dies with this program even when
// this program is SIGKILLed); killAll ends them all.
type supervisor struct {
	dir string

	mu    sync.Mutex
	procs []*proc
}

func newSupervisor(dir string) *supervisor { return &supervisor{dir: dir} }

// newProc registers a process; it is not started.
func (s *supervisor) newProc(name, bin string, args ...string) *proc {
	p := &proc{name: name, bin: bin, args: args, logPath: filepath.Join(s.dir, name+".log")}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}

// killAll SIGKILLs every process still running (SIGCONT first, so that a
// stopped one dies too) and waits for them.
func (s *supervisor) killAll() {
	s.mu.Lock()
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

// proc is one child process that can be killed and started again.
type proc struct {
	name    string
	bin     string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// starts counts the starts, for the log.
	starts int
}

// errExited reports a process that ended on its own.
var errExited = errors.New("process exited")

// start starts the process; its output is appended to its log file.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	defer logf.Close()
	p.starts++
	fmt.Fprintf(logf, "=== chaos: start %d at %s\n", p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start %s: %w", p.name, p.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// kill SIGKILLs the process group and waits for the process to be gone.
// Safe to call when the process is not running.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		// Cannot happen for SIGKILL short of a kernel problem; do not hang.
	}
}

// signal sends sig to the process group (SIGSTOP, SIGCONT).
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.name, sig, err)
	}
	return nil
}

// pid is the running process's id, 0 when none runs.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited returns a channel closed when the running process ends, or nil
// when none runs.
func (p *proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return nil
	}
	return p.done
}

// alive reports whether the process was started and has not ended.
func (p *proc) alive() bool {
	ch := p.exited()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string { return fileTail(p.logPath, n) }

func fileTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago,
// never one of avoid.
func freePort(avoid map[int]bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if claimPorts(avoid, port) {
			return port, nil
		}
	}
	return 0, errors.New("free port: no new port after 20 tries")
}

// claimed holds every port this process handed out, so that two runs in
// one process (the package's tests run in parallel) never pick the same
// one: a run leaves a killed process's port free until it restarts it
// there.
var claimed struct {
	sync.Mutex
	ports map[int]bool
}

// claimPorts marks ports as taken, in avoid and for the whole process, and
// reports whether none of them was taken before (then nothing is marked).
func claimPorts(avoid map[int]bool, ports ...int) bool {
	claimed.Lock()
	defer claimed.Unlock()
	for _, p := range ports {
		if avoid[p] || claimed.ports[p] {
			return false
		}
	}
	if claimed.ports == nil {
		claimed.ports = make(map[int]bool)
	}
	for _, p := range ports {
		avoid[p], claimed.ports[p] = true, true
	}
	return true
}

// waitFor calls check every interval until it returns nil, ctx ends or
// limit passes; it returns check's last error in the last two cases.
func waitFor(ctx context.Context, limit, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", limit, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
