//go:build linux

package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
)

// Admission before buffering (issue #29 item 6): the loops admit a publish
// from its head, before they read its body, and do with a refused one's
// body what net/http does after gin's guard refused it.

// Tokens of these tests: refusedToken is unknown and in the cache (refused
// on the loop), laterToken unknown and not in the cache (refused off the
// loop).
const (
	refusedToken = "refused-token-0123456789"
	laterToken   = "later-token-0123456789"
)

// putHead is the head of a publish with token announcing a body of n bytes.
func putHead(token string, n int) string {
	return fmt.Sprintf("PUT /api/ns/q HTTP/1.1\r\nHost: k\r\nX-Token: %s\r\nContent-Length: %d\r\n\r\n", token, n)
}

// startBodyServers starts a server with event loops and one without, with
// laterToken not in their token cache.
func startBodyServers(t *testing.T) []*diffServer {
	t.Helper()
	servers := []*diffServer{startDiffServer(t, "loops", 2), startDiffServer(t, "net/http", -1)}
	for _, s := range servers {
		s.env.tokens.mu.Lock()
		s.env.tokens.uncached = map[string]bool{laterToken: true}
		s.env.tokens.mu.Unlock()
	}
	return servers
}

// bodyStep is what a client of TestLoopRefusedBeforeBody does: send bytes,
// check that no answer comes for a while, read answers, or half-close.
type bodyStep struct {
	send    string
	quiet   time.Duration // no answer within this long
	read    int           // answers to read
	closeWr bool
}

// bodyAnswer is an answer, as compared: status, Connection: close, body.
type bodyAnswer struct {
	status int
	closes bool
	body   string
	after  time.Duration // since the step began
}

func (a bodyAnswer) String() string {
	return fmt.Sprintf("%d close=%v %s", a.status, a.closes, a.body)
}

// runBodySteps runs steps against addr and returns the answers and how the
// connection ended once the steps were done: "open" when it did not end
// within wait.
func runBodySteps(t *testing.T, addr string, steps []bodyStep, wait time.Duration) ([]bodyAnswer, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	var answers []bodyAnswer
	for _, st := range steps {
		start := time.Now()
		if st.send != "" {
			// A writer of its own: a server that does not read may leave
			// the write blocked.
			go func() { _, _ = io.WriteString(conn, st.send) }()
		}
		if st.closeWr {
			time.Sleep(50 * time.Millisecond) // after the bytes above
			_ = conn.(*net.TCPConn).CloseWrite()
		}
		if st.quiet > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(st.quiet))
			if _, err := br.Peek(1); err == nil {
				return answers, "answered too early"
			}
		}
		for range st.read {
			_ = conn.SetReadDeadline(time.Now().Add(diffTimeout))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return answers, endOf(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, bodyAnswer{status: resp.StatusCode, closes: resp.Close, body: string(body), after: time.Since(start)})
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	n, err := br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case n > 0:
		return answers, "more bytes"
	case err == nil, errors.As(err, &ne) && ne.Timeout():
		return answers, "open"
	}
	return answers, endOf(err)
}

// TestLoopRefusedBeforeBody: a publish refused from its head is answered
// by the loops as net/http answers it, and its body is handled alike: at
// 256 KiB or more, answered at once (long before the read timeout, with
// most of the body never sent) with Connection: close, and the connection
// ends; below, answered once the body is in, on a connection that goes on
// (Connection: close and the end when the body is cut short). An admitted
// body that comes in parts or is cut short is served alike too.
func TestLoopRefusedBeforeBody(t *testing.T) {
	servers := startBodyServers(t)
	big := 1 << 20
	part := strings.Repeat("b", 1000)
	small := strings.Repeat("s", 3000)
	good := putWith(goodToken, "g")
	const invalid = `{"error":"invalid token"}`
	type want struct {
		status []int
		closes bool   // the last answer says Connection: close
		end    string // "" for EOF or reset
	}
	tests := []struct {
		name  string
		steps []bodyStep
		want  want
		// fast: the first answer comes before this long (most of the
		// body is never sent).
		fast time.Duration
	}{
		{"large, refused on the loop", []bodyStep{{send: putHead(refusedToken, big) + part, read: 1}},
			want{status: []int{401}, closes: true}, 3 * time.Second},
		{"large, refused off the loop", []bodyStep{{send: putHead(laterToken, big) + part, read: 1}},
			want{status: []int{401}, closes: true}, 3 * time.Second},
		{"large and whole, refused", []bodyStep{{send: putHead(refusedToken, 300<<10) + strings.Repeat("w", 300<<10) + good, read: 1}},
			want{status: []int{401}, closes: true}, 3 * time.Second},
		{"small, refused, then a publish", []bodyStep{{send: putHead(refusedToken, len(small)) + small + good, read: 2}},
			want{status: []int{401, 201}, end: "open"}, 0},
		{"small, refused off the loop, then a publish", []bodyStep{{send: putHead(laterToken, len(small)) + small + good, read: 2}},
			want{status: []int{401, 201}, end: "open"}, 0},
		{"small, refused, body in two parts", []bodyStep{
			{send: putHead(refusedToken, len(small)) + small[:1000], quiet: 300 * time.Millisecond},
			{send: small[1000:] + good, read: 2}},
			want{status: []int{401, 201}, end: "open"}, 0},
		{"small, refused, body cut short", []bodyStep{
			{send: putHead(refusedToken, len(small)) + small[:1000], quiet: 300 * time.Millisecond},
			{closeWr: true, read: 1}},
			want{status: []int{401}, closes: true}, 0},
		{"admitted, body in parts", []bodyStep{
			{send: putHead(goodToken, len(small)) + small[:10], quiet: 200 * time.Millisecond},
			{send: small[10:2000], quiet: 200 * time.Millisecond},
			{send: small[2000:] + good, read: 2}},
			want{status: []int{201, 201}, end: "open"}, 0},
		{"admitted, body cut short", []bodyStep{
			{send: putHead(goodToken, len(small)) + small[:1000], quiet: 200 * time.Millisecond},
			{closeWr: true, read: 1}},
			want{status: []int{400}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var runs [][]bodyAnswer
			for _, s := range servers {
				wait := diffTimeout // for the end
				if tc.want.end == "open" {
					wait = 300 * time.Millisecond // and it stays open
				}
				answers, end := runBodySteps(t, s.addr, tc.steps, wait)
				t.Logf("%s: %v, then %s", s.name, answers, end)
				var status []int
				for _, a := range answers {
					status = append(status, a.status)
				}
				if !slices.Equal(status, tc.want.status) {
					t.Fatalf("%s: answers %v, then %s; want %v", s.name, answers, end, tc.want.status)
				}
				if last := answers[len(answers)-1]; last.closes != tc.want.closes {
					t.Errorf("%s: last answer Connection: close = %v, want %v", s.name, last.closes, tc.want.closes)
				}
				switch {
				case tc.want.end == "" && end != "EOF" && end != "reset":
					t.Errorf("%s: the connection ended with %q, want it closed", s.name, end)
				case tc.want.end != "" && end != tc.want.end:
					t.Errorf("%s: the connection ended with %q, want %q", s.name, end, tc.want.end)
				}
				if tc.fast > 0 && answers[0].after > tc.fast {
					t.Errorf("%s: answered after %v, want before %v", s.name, answers[0].after, tc.fast)
				}
				if answers[0].status == 401 && answers[0].body != invalid {
					t.Errorf("%s: body %s, want %s", s.name, answers[0].body, invalid)
				}
				runs = append(runs, answers)
			}
			for i := range runs[0] {
				a, b := runs[0][i], runs[1][i]
				if a.status != b.status || a.closes != b.closes || a.status != 201 && a.body != b.body {
					t.Errorf("answer %d: loops %v, net/http %v", i, a, b)
				}
			}
		})
	}
}

// floodFigures is what one server did under TestLoopBadTokenFloodMemory's
// flood.
type floodFigures struct {
	heap     uint64        // peak heap in use above the baseline
	p99      time.Duration // of the valid publishes
	valid    int           // valid publishes answered 201
	answered int           // flood requests answered 401
	failed   int64         // requests without the answer expected
	firstErr any           // the first of them
}

// floodServer floods addr with conns connections, each sending rounds
// publishes with a bad token (half of them not in the cache) announcing
// 1 MiB and sending 1 MiB - 1 byte, while 4 valid clients publish on
// keep-alive connections, and samples the heap meanwhile.
func floodServer(t *testing.T, addr string, conns, rounds int) floodFigures {
	t.Helper()
	const announced = 1 << 20
	body := []byte(strings.Repeat("f", announced-1)) // shared: the client allocates nothing per request
	heads := [][]byte{[]byte(putHead(refusedToken, announced)), []byte(putHead(laterToken, announced))}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	var answered, failed atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	var flood sync.WaitGroup
	for i := range conns {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for r := range rounds {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					fail(err)
					return
				}
				go func() {
					if _, err := conn.Write(heads[(i+r)%2]); err == nil {
						_, _ = conn.Write(body)
					}
				}()
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					fail(fmt.Errorf("flood: %w", err))
				} else {
					resp.Body.Close()
					if resp.StatusCode == 401 {
						answered.Add(1)
					} else {
						fail(fmt.Errorf("flood: status %d", resp.StatusCode))
					}
				}
				conn.Close()
			}
		}()
	}
	var lat []time.Duration
	var latMu sync.Mutex
	done := make(chan struct{})
	var valid sync.WaitGroup
	for range 4 {
		valid.Add(1)
		go func() {
			defer valid.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				_ = conn.SetDeadline(start.Add(10 * time.Second))
				if _, err := io.WriteString(conn, putWith(goodToken, "v")); err != nil {
					fail(err)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					fail(fmt.Errorf("valid: %w", err))
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					fail(fmt.Errorf("valid: status %d", resp.StatusCode))
					return
				}
				latMu.Lock()
				lat = append(lat, time.Since(start))
				latMu.Unlock()
			}
		}()
	}
	flood.Wait()
	close(done)
	valid.Wait()
	close(stop)
	<-sampled
	slices.Sort(lat)
	f := floodFigures{heap: peak.Load(), valid: len(lat), answered: int(answered.Load()),
		failed: failed.Load(), firstErr: firstErr.Load()}
	if len(lat) > 0 {
		f.p99 = lat[len(lat)*99/100]
	}
	return f
}

// TestLoopBadTokenFloodMemory: connections with a bad token, each sending
// 1 MiB - 1 byte of a 1 MiB body, cost the server with event loops about
// the memory they cost net/http, which answers them at once without
// reading the body (the loops used to read each whole and hold it until
// the read timeout), and the valid clients beside them are still served.
func TestLoopBadTokenFloodMemory(t *testing.T) {
	servers := startBodyServers(t)
	conns, rounds := 200, 2
	if raceEnabled {
		conns = 100
	}
	figures := map[string]floodFigures{}
	for _, i := range []int{1, 0} { // net/http first: its figures bound the loops'
		s := servers[i]
		f := floodServer(t, s.addr, conns, rounds)
		t.Logf("%s: heap peak +%.1f MiB, %d flood requests answered 401, %d valid publishes, p99 %v",
			s.name, float64(f.heap)/(1<<20), f.answered, f.valid, f.p99)
		if f.failed > 0 {
			t.Errorf("%s: %d requests failed; the first: %v", s.name, f.failed, f.firstErr)
		}
		if f.answered != conns*rounds {
			t.Errorf("%s: %d of %d flood requests answered 401", s.name, f.answered, conns*rounds)
		}
		if f.valid == 0 {
			t.Errorf("%s: no valid publish during the flood", s.name)
		}
		figures[s.name] = f
	}
	loops, plain := figures["loops"], figures["net/http"]
	// Generous margins (a loaded machine; the two servers share this
	// process): the loops used to need about conns MiB.
	const slack = 16 << 20
	if loops.heap > 2*plain.heap+slack {
		t.Errorf("heap: loops +%.1f MiB, net/http +%.1f MiB: want at most twice net/http's (+16 MiB)",
			float64(loops.heap)/(1<<20), float64(plain.heap)/(1<<20))
	}
	if loops.p99 > 2*plain.p99+500*time.Millisecond {
		t.Errorf("valid publishes' p99: loops %v, net/http %v: want at most twice net/http's (+500 ms)", loops.p99, plain.p99)
	}
}

// TestLoopOutOfDescriptors: a connection the loops accept with the last
// descriptor, so that they cannot make their duplicate of it, is served by
// net/http on the one it has, as net/http would serve it, instead of being
// reset.
func TestLoopOutOfDescriptors(t *testing.T) {
	_, fake, addr := serveLoops(t)
	var served atomic.Value // the body net/http published
	fake.publish = func(_ context.Context, r *engine.PublishRequest) (string, error) {
		served.Store(string(r.Body))
		return "job-by-net-http", nil
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// The two lowest free descriptors: the client's socket and the
	// server's accepted one; the duplicate then finds none.
	var free [2]int
	for i := range free {
		fd, err := syscall.Dup(0)
		if err != nil {
			t.Fatal(err)
		}
		free[i] = fd
	}
	for _, fd := range free {
		_ = syscall.Close(fd)
	}
	low := lim
	low.Cur = uint64(free[1] + 1)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Error(err)
			}
		}
	}
	defer restore()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		restore()
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, putWith(goodToken, "last-fd")); err != nil {
		restore()
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	restore()
	if err != nil {
		t.Fatalf("with the last descriptor: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("with the last descriptor: %d %s, want 201", resp.StatusCode, body)
	}
	if b, _ := served.Load().(string); b != "last-fd" {
		t.Errorf("net/http published %q, want last-fd", b)
	}
}

// TestLoopBodyReadTimeout: a body that stops coming is given up at the
// read timeout as net/http gives it up: refused, the refusal is answered
// then and the connection closed; admitted, net/http answers 400 "failed
// to read body" and closes it. Both answers say Connection: close.
func TestLoopBodyReadTimeout(t *testing.T) {
	timeouts := withConfig(func(c *config.Config) {
		c.Kairos.ReadHeaderTimeoutSecond, c.Kairos.ReadTimeoutSecond = 1, 1
	})
	_, _, loops := serveLoops(t, timeouts)
	plain := servePlain(t, timeouts)
	part := strings.Repeat("p", 1000)
	tests := []struct {
		name   string
		token  string
		status int
		closes bool
	}{
		{"refused", refusedToken, 401, true},
		{"admitted", goodToken, 400, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []bodyAnswer
			for _, s := range []struct{ name, addr string }{{"loops", loops}, {"net/http", plain}} {
				answers, end := runBodySteps(t, s.addr, []bodyStep{{send: putHead(tc.token, 3000) + part, read: 1}}, diffTimeout)
				t.Logf("%s: %v, then %s", s.name, answers, end)
				if len(answers) != 1 || answers[0].status != tc.status || answers[0].closes != tc.closes {
					t.Fatalf("%s: %v, then %s; want %d (Connection: close %v)", s.name, answers, end, tc.status, tc.closes)
				}
				if a := answers[0].after; a < 700*time.Millisecond || a > 4*time.Second {
					t.Errorf("%s: answered after %v, want about the read timeout (1 s)", s.name, a)
				}
				if end != "EOF" && end != "reset" {
					t.Errorf("%s: the connection ended with %q, want it closed", s.name, end)
				}
				got = append(got, answers[0])
			}
			if got[0].body != got[1].body {
				t.Errorf("loops %v, net/http %v", got[0], got[1])
			}
		})
	}
}
