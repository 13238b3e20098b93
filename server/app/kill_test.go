package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// These tests SIGKILL the real kairos-server binary, or its redis-server
// (AOF with appendfsync always), while publishers and consumers hammer it,
// and check that every publish the server acknowledged with 201 is
// delivered at least once.

// buildServer returns the kairos-server binary of this checkout, built at
// the first call of the test binary into a temporary directory that
// TestMain removes: the tests that run the real binary share one build
// (its link alone takes seconds on a loaded machine).
func buildServer(tb testing.TB) string {
	tb.Helper()
	builtServer.once.Do(func() { builtServer.bin, builtServer.err = goBuildServer() })
	if builtServer.err != nil {
		tb.Fatal(builtServer.err)
	}
	return builtServer.bin
}

// builtServer is buildServer's one build.
var builtServer struct {
	once sync.Once
	dir  string // removed by TestMain
	bin  string
	err  error
}

func goBuildServer() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not in a module")
	}
	dir, err := os.MkdirTemp("", "kairos-app-test-")
	if err != nil {
		return "", err
	}
	builtServer.dir = dir
	bin := filepath.Join(dir, "kairos-server")
	cmd := exec.Command("go", "build", "-o", bin, "./server/cmd/kairos-server")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./server/cmd/kairos-server: %v\n%s", err, out)
	}
	return bin, nil
}

// serverProc runs the kairos-server binary on fixed ports, so that it can
// be killed and started again where clients expect it.
type serverProc struct {
	tb        testing.TB
	bin       string
	config    string
	logPath   string
	api       string // http://127.0.0.1:port
	admin     string
	cmd       *exec.Cmd
	exited    chan struct{}
	starts    int
	readiness *http.Client
}

func newServerProc(tb testing.TB, bin, redisAddr string) *serverProc {
	tb.Helper()
	dir := tb.TempDir()
	port := redistest.FreePort(tb)
	adminPort := redistest.FreePort(tb)
	for adminPort == port {
		adminPort = redistest.FreePort(tb)
	}
	p := &serverProc{
		tb: tb, bin: bin,
		config:    filepath.Join(dir, "kairos.toml"),
		logPath:   filepath.Join(dir, "server.log"),
		api:       fmt.Sprintf("http://127.0.0.1:%d", port),
		admin:     fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		readiness: &http.Client{Timeout: time.Second},
	}
	cfg := fmt.Sprintf(`# kill test
Host = "127.0.0.1"
Port = %d
AdminHost = "127.0.0.1"
AdminPort = %d
LogLevel = "warn"

[AdminRedis]
Addr = %q

[Pool.default]
Addr = %q

[Kairos]
ShutdownTimeoutSecond = 2
`, port, adminPort, redisAddr, redisAddr)
	if err := os.WriteFile(p.config, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.kill)
	return p
}

// start starts the binary and waits until its public API answers.
func (p *serverProc) start() {
	p.tb.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.tb.Fatal(err)
	}
	defer logf.Close()
	p.starts++
	fmt.Fprintf(logf, "=== start %d\n", p.starts)
	cmd := exec.Command(p.bin, "-c", p.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("start kairos-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := p.readiness.Get(p.api + "/api/ready/q/size")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			p.tb.Fatalf("kairos-server exited at start %d:\n%s", p.starts, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("kairos-server not ready 10 s after start %d (last error %v):\n%s", p.starts, err, p.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill SIGKILLs the server and waits for the process to be gone.
func (p *serverProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

func (p *serverProc) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 30 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// ledger records what the clients saw.
type ledger struct {
	mu        sync.Mutex
	acked     map[string]bool // bodies answered 201
	attempted map[string]bool // bodies sent, answer unknown or not 201
	delivered map[string]int  // body → deliveries
	missing   atomic.Int64    // acknowledged bodies not delivered yet
}

func newLedger() *ledger {
	return &ledger{acked: map[string]bool{}, attempted: map[string]bool{}, delivered: map[string]int{}}
}

func (l *ledger) published(body string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		l.attempted[body] = true
		return
	}
	delete(l.attempted, body)
	l.acked[body] = true
	if l.delivered[body] == 0 {
		l.missing.Add(1)
	}
}

func (l *ledger) deliver(body string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered[body]++
	if l.delivered[body] == 1 && l.acked[body] {
		l.missing.Add(-1)
	}
}

// chaos runs 4 publishers and 4 consumers against api while disrupt runs
// (it kills and restarts something); then it stops the publishers, calls
// settle, and drains until every acknowledged job was delivered or 15 s
// passed. It fails if an acknowledged job was never delivered.
func chaos(t *testing.T, api, token string, disrupt, settle func()) {
	const ns, queue = "kill", "jobs"
	// Short timeouts: a request to a killed server must fail, not hang.
	hc := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost:   16,
			ResponseHeaderTimeout: 4 * time.Second,
		},
	}
	defer hc.CloseIdleConnections()
	base := api + "/api/" + ns + "/" + queue
	led := newLedger()
	var seq atomic.Int64
	var publishErrs, consumeErrs, ackErrs atomic.Int64

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubCtx, stopPublishers := context.WithCancel(ctx)
	defer stopPublishers()
	var pubs, cons sync.WaitGroup
	for range 4 {
		pubs.Go(func() {
			for pubCtx.Err() == nil {
				body := strconv.FormatInt(seq.Add(1), 10)
				// tries=1000: a delivery lost with a killed connection comes back after its TTR.
				r, err := tryHTTP(context.Background(), hc, http.MethodPut, base+"?tries=1000&ttl=0", token, []byte(body), nil)
				ok := err == nil && r.Status == http.StatusCreated
				led.published(body, ok)
				if !ok {
					publishErrs.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	for range 4 {
		cons.Go(func() {
			for ctx.Err() == nil {
				r, err := tryHTTP(ctx, hc, http.MethodGet, base+"?ttr=1&timeout=1", token, nil, nil)
				if err != nil || (r.Status != http.StatusOK && r.Status != http.StatusNotFound) {
					if ctx.Err() == nil {
						consumeErrs.Add(1)
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if r.Status == http.StatusNotFound {
					continue
				}
				var j jobJSON
				if err := json.Unmarshal(r.Body, &j); err != nil {
					t.Errorf("consume: %v: %s", err, r.Body)
					return
				}
				led.deliver(string(j.Data))
				for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
					r, err := tryHTTP(ctx, hc, http.MethodDelete, base+"/job/"+j.JobID, token, nil, nil)
					if err == nil && r.Status == http.StatusNoContent {
						break
					}
					ackErrs.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}

	start := time.Now()
	disrupt()
	stopPublishers()
	pubs.Wait()
	settle()
	t.Logf("chaos phase: %v, %d publishes acknowledged; draining %d", time.Since(start).Round(time.Millisecond), len(led.acked), led.missing.Load())
	drainStart := time.Now()
	for led.missing.Load() > 0 && time.Since(drainStart) < 15*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	cons.Wait()

	led.mu.Lock()
	defer led.mu.Unlock()
	var lost []string
	dups, unackedDelivered := 0, 0
	for body := range led.acked {
		if led.delivered[body] == 0 {
			lost = append(lost, body)
		}
	}
	for body, n := range led.delivered {
		if n > 1 {
			dups += n - 1
		}
		if !led.acked[body] {
			unackedDelivered++
			if !led.attempted[body] {
				t.Errorf("delivered body %q was never published", body)
			}
		}
	}
	t.Logf("acknowledged %d, delivered %d distinct, duplicates %d (at-least-once), unacknowledged publishes delivered anyway %d of %d; errors: publish %d, consume %d, ack %d; drained in %v",
		len(led.acked), len(led.delivered), dups, unackedDelivered, len(led.attempted)+unackedDelivered,
		publishErrs.Load(), consumeErrs.Load(), ackErrs.Load(), time.Since(drainStart).Round(time.Millisecond))
	if len(led.acked) < 100 {
		t.Errorf("only %d publishes acknowledged: the test did not exercise the server", len(led.acked))
	}
	if len(lost) > 0 {
		if len(lost) > 20 {
			lost = lost[:20]
		}
		t.Errorf("LOST: acknowledged jobs never delivered within 15 s (lost must be 0): %d, e.g. %v", int(led.missing.Load()), lost)
	}
	dl, err := tryHTTP(context.Background(), hc, http.MethodGet, base+"/deadletter", token, nil, nil)
	if err == nil {
		t.Logf("dead letter: %s", dl.Body)
	}
}

func randomPause() time.Duration { return 300*time.Millisecond + rand.N(500*time.Millisecond) }

// TestKillServer SIGKILLs kairos-server at random moments, at least 5
// times, while jobs flow; no acknowledged job may be lost.
func TestKillServer(t *testing.T) {
	t.Parallel() // a Redis and a server of its own; mostly waits on restarts
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "always"})
	bin := buildServer(t)
	p := newServerProc(t, bin, rs.Addr)
	p.start()
	r := doHTTP(t, http.MethodPost, p.admin+"/token/kill?description=kill", "", nil, nil)
	r.wantStatus(t, http.StatusCreated)
	var tok struct{ Token string }
	r.decode(t, &tok)

	kills := 0
	chaos(t, p.api, tok.Token, func() {
		for kills < 6 {
			time.Sleep(randomPause())
			p.kill()
			kills++
			p.start()
		}
	}, func() {
		p.kill()
		kills++
		p.start()
	})
	t.Logf("server SIGKILLed %d times", kills)
}

// TestKillRedis SIGKILLs the redis-server (AOF, appendfsync always) 3
// times while jobs flow and restarts it; no acknowledged job may be lost.
func TestKillRedis(t *testing.T) {
	t.Parallel() // a Redis and a server of its own; mostly waits on restarts
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true, AppendFsync: "always"})
	bin := buildServer(t)
	p := newServerProc(t, bin, rs.Addr)
	p.start()
	r := doHTTP(t, http.MethodPost, p.admin+"/token/kill?description=kill", "", nil, nil)
	r.wantStatus(t, http.StatusCreated)
	var tok struct{ Token string }
	r.decode(t, &tok)

	chaos(t, p.api, tok.Token, func() {
		for i := range 3 {
			time.Sleep(randomPause())
			rs.Kill()
			if c, err := net.DialTimeout("tcp", rs.Addr, 100*time.Millisecond); err == nil {
				c.Close()
				t.Fatalf("redis-server still accepts connections after Kill")
			}
			// Redis stays down a while; the last time longer than
			// go-redis's retries, so that clients see 5xx answers.
			down := 200*time.Millisecond + rand.N(500*time.Millisecond)
			if i == 2 {
				down = 1500 * time.Millisecond
			}
			time.Sleep(down)
			rs.Restart()
			t.Logf("redis-server SIGKILLed and restarted after %v", down.Round(time.Millisecond))
		}
		time.Sleep(randomPause())
	}, func() {})
	select {
	case <-p.exited:
		t.Fatalf("kairos-server died while its Redis restarted:\n%s", p.logTail())
	default:
	}
}
