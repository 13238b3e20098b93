//go:build linux

package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// The differential test: random sequences of requests, sent on one
// connection to a server with event loops and to one without, must get the
// same answers one for one. Fast and net/http routes are mixed, consumes
// are answered at once or wait, requests are pipelined or not, split across
// writes, end with Connection: close or with EOF in the middle of a request.
//
// Each sequence comes from a seed. KAIROS_DIFF_SEED sets the first seed
// (default: the time) and KAIROS_DIFF_N the number of sequences (default
// diffN()), e.g. to replay a failure:
//
//	KAIROS_DIFF_SEED=1234 KAIROS_DIFF_N=1 go test -count=1 -run LoopDifferential -v ./server
//
// or to soak: KAIROS_DIFF_N=200000.

// diffDefaultN is the number of sequences `make test` runs (fewer under
// the race detector, which makes them several times slower).
const diffDefaultN = 2000

func diffN() uint64 {
	if raceEnabled {
		return diffDefaultN / 4
	}
	return diffDefaultN
}

// diffReq is one request of a sequence.
type diffReq struct {
	// raw renders the request; ids are the job IDs the server returned so
	// far, in the order they first appeared, and rcpts the receipts.
	raw func(ids, rcpts []string) string
	// feed, for a consume that waits on a queue of its own, is that queue:
	// a job is published to it once the answers before it are read.
	feed string
	// closes: the request asks for Connection: close, or is one after
	// which the server closes (a publish refused from its head, with a
	// body of 256 KiB or more).
	closes bool
	// what describes the request, for failure reports.
	what string
}

// diffRound is what one write sends: requests, then maybe a truncated one.
type diffRound struct {
	reqs  []diffReq
	chops int // split the bytes into up to chops+1 writes
	// truncate > 0: the round ends with the first truncate bytes of trunc,
	// then EOF (CloseWrite).
	trunc    diffReq
	truncate int
}

// diffSeq is one generated sequence.
type diffSeq struct {
	seed   uint64
	rounds []diffRound
	// eof: the client half-closes after the last round's answers.
	eof bool
}

// genSeq generates the sequence of seed.
func genSeq(seed uint64) *diffSeq {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &diffSeq{seed: seed}
	qs := []string{fmt.Sprintf("d%dq0", seed), fmt.Sprintf("d%dq1", seed)}
	waits := 0
	tokenIn := func(r *rand.Rand) (header, query string) {
		switch r.IntN(4) {
		case 0:
			return "", "token=" + goodToken
		case 1:
			return "x-token: " + goodToken + "\r\n", ""
		default:
			return "X-Token: " + goodToken + "\r\n", ""
		}
	}
	join := func(path string, params ...string) string {
		var ps []string
		for _, p := range params {
			if p != "" {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			return path
		}
		return path + "?" + strings.Join(ps, "&")
	}
	pickID := func(r *rand.Rand) func(ids []string) string {
		n := r.IntN(1 << 20)
		bogus := r.IntN(5) == 0
		return func(ids []string) string {
			if bogus || len(ids) == 0 {
				return bogusJobID
			}
			return ids[n%len(ids)]
		}
	}
	// ext asks, or not, for the receipts (X-Kairos-Extensions), as the
	// Go client's Worker does; a repeated header is net/http's.
	ext := func(r *rand.Rand) string {
		switch r.IntN(8) {
		case 0, 1, 2:
			return "X-Kairos-Extensions: 1\r\n"
		case 3:
			return "x-kairos-extensions: YES\r\n"
		case 4:
			return "X-Kairos-Extensions: 0\r\n"
		case 5:
			return "X-Kairos-Extensions: 1\r\nX-Kairos-Extensions: 1\r\n"
		}
		return ""
	}
	// receipt is an ACK's receipt parameter: none (lmstfy's ACK), one the
	// server gave (maybe of an older delivery), one it never gave, or a
	// malformed one (net/http's 400).
	receipt := func(r *rand.Rand) func(rcpts []string) string {
		n, k := r.IntN(1<<20), r.IntN(12)
		return func(rcpts []string) string {
			switch {
			case k < 4:
				return ""
			case k < 9 && len(rcpts) > 0:
				return "receipt=" + rcpts[n%len(rcpts)]
			case k == 9:
				return "receipt=00000000000000ff"
			case k == 10:
				return "receipt=xyz"
			}
			return "receipt="
		}
	}
	body := func(r *rand.Rand) string {
		n := 1 + r.IntN(40)
		if r.IntN(40) == 0 {
			n = 70000 + r.IntN(100000) // more than one read
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	gen := func() diffReq {
		q := qs[rng.IntN(len(qs))]
		th, tq := tokenIn(rng)
		conn := ""
		closes := false
		switch rng.IntN(30) {
		case 0:
			conn, closes = "Connection: close\r\n", true
		case 1, 2:
			conn = "Connection: keep-alive\r\n"
		}
		head := func(method, target string, extra string) string {
			return method + " " + target + " HTTP/1.1\r\nHost: kairos\r\n" + th + conn + extra
		}
		var d diffReq
		switch k := rng.IntN(100); {
		case k < 30: // publish
			var ps []string
			if rng.IntN(2) == 0 {
				ps = append(ps, "delay="+[]string{"0", "0", "100"}[rng.IntN(3)])
			}
			if rng.IntN(2) == 0 {
				ps = append(ps, "ttl="+[]string{"0", "60", "3600"}[rng.IntN(3)])
			}
			if rng.IntN(3) == 0 {
				ps = append(ps, "tries="+strconv.Itoa(1+rng.IntN(3)))
			}
			switch rng.IntN(8) {
			case 0, 1: // a group, taken by both
				ps = append(ps, "group="+[]string{"g1", "shop-2", "_x", strings.Repeat("g", 64)}[rng.IntN(4)])
			case 2: // not a group: net/http's 400
				ps = append(ps, "group="+[]string{"", "a.b", "a:b", strings.Repeat("g", 65)}[rng.IntN(4)])
			case 3: // net/http: repeated
				if rng.IntN(4) == 0 {
					ps = append(ps, "group=g1", "group=g2")
				}
			}
			rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
			b := body(rng)
			extra := ""
			switch rng.IntN(12) {
			case 0:
				extra = "Content-Type: text/plain\r\n"
			case 1: // net/http: chunked
				raw := head("PUT", join("/api/ns/"+q, append(ps, tq)...), "Transfer-Encoding: chunked\r\n\r\n") +
					fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b)
				d = diffReq{raw: func([]string, []string) string { return raw }, what: "PUT chunked " + q}
			case 2: // net/http: an encoded parameter
				ps = append(ps, "ttl=%36%30")
			case 3: // a trace context, stored and handed back by both
				extra = fmt.Sprintf("traceparent: 00-%032x-%016x-01\r\n", rng.Uint64()|1, rng.Uint64()|1)
			case 4:
				extra = fmt.Sprintf("Traceparent: 00-%032x-%016x-00\r\nTracestate: k=%d\r\n", rng.Uint64()|1, rng.Uint64()|1, rng.IntN(100))
			case 5: // not valid: ignored by both
				extra = "Traceparent: 00-zz\r\nTracestate: k=v\r\n"
			case 6: // net/http: repeated
				extra = "Tracestate: a=1\r\nTracestate: b=2\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n"
			}
			switch rng.IntN(16) {
			case 0: // refused from its head: its body is read and thrown away
				th, tq = "X-Token: not-a-token\r\n", ""
			case 1: // refused from its head, 256 KiB or more: answered at once, then closed
				th, tq = "X-Token: not-a-token\r\n", ""
				n := 256<<10 + rng.IntN(1<<19)
				raw := head("PUT", join("/api/ns/"+q, ps...), extra+"Content-Length: "+strconv.Itoa(n)+"\r\n\r\n") + b[:min(len(b), n-1)]
				d = diffReq{raw: func([]string, []string) string { return raw }, closes: true, what: fmt.Sprintf("PUT %s bad token, %d of %d bytes", q, min(len(b), n-1), n)}
			}
			if d.raw == nil {
				raw := head("PUT", join("/api/ns/"+q, append(ps, tq)...), extra+"Content-Length: "+strconv.Itoa(len(b))+"\r\n\r\n") + b
				d = diffReq{raw: func([]string, []string) string { return raw }, what: "PUT " + q + " " + strings.Join(ps, "&")}
			}
		case k < 55: // consume, answered at once
			var ps []string
			ps = append(ps, "timeout=0")
			if rng.IntN(3) == 0 {
				ps = append(ps, "count="+strconv.Itoa(1+rng.IntN(3)))
			}
			if rng.IntN(3) == 0 {
				ps = append(ps, "ttr="+[]string{"30", "600"}[rng.IntN(2)])
			}
			target := "/api/ns/" + q
			if rng.IntN(15) == 0 {
				target = "/api/ns/" + qs[0] + "," + qs[1] // net/http: two queues
			}
			rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
			x := ext(rng)
			worker := ""
			switch rng.IntN(6) {
			case 0: // the worker's name, read by both
				worker = "X-Kairos-Worker: host-" + strconv.Itoa(rng.IntN(9)) + ":42\r\n"
			case 1: // a name with bytes the history replaces
				worker = "x-kairos-worker: a|b c\r\n"
			case 2: // net/http: repeated
				worker = "X-Kairos-Worker: a\r\nX-Kairos-Worker: b\r\n"
			}
			raw := head("GET", join(target, append(ps, tq)...), x+worker+"\r\n")
			d = diffReq{raw: func([]string, []string) string { return raw }, what: "GET " + target + " " + strings.Join(ps, "&") + " " + strings.TrimSpace(x) + " " + strings.TrimSpace(worker)}
		case k < 65: // consume that waits, on a queue of its own
			w := fmt.Sprintf("d%dw%d", seed, waits)
			waits++
			feed := w
			if rng.IntN(60) == 0 {
				feed = "" // it waits its whole timeout
			}
			// A fed consume gets its job at once, but may wait longer
			// on a loaded machine: it has room (3 s was missed on either
			// side, loops or net/http, at load average 30 under -race;
			// an answer that comes sooner costs nothing of it).
			timeout := "timeout=20"
			if feed == "" {
				timeout = "timeout=1"
			}
			x := ext(rng)
			raw := head("GET", join("/api/ns/"+w, timeout, tq), x+"\r\n")
			d = diffReq{raw: func([]string, []string) string { return raw }, feed: feed, what: "GET " + w + " " + timeout + " feed=" + strconv.FormatBool(feed != "") + " " + strings.TrimSpace(x)}
		case k < 80: // ACK
			id, rc := pickID(rng), receipt(rng)
			d = diffReq{raw: func(ids, rcpts []string) string {
				return head("DELETE", join("/api/ns/"+q+"/job/"+id(ids), rc(rcpts), tq), "\r\n")
			}, what: "DELETE " + q + " " + rc([]string{"R"})}
		default: // net/http routes
			var target, method = "", "GET"
			switch rng.IntN(9) {
			case 6, 7, 8: // release (nack) with an error text: net/http's on both
				id := pickID(rng)
				extra := "\r\n"
				ps := []string{"receipt=" + []string{"0123456789abcdef", "zz"}[rng.IntN(2)]}
				switch rng.IntN(3) {
				case 0:
					ps = append(ps, "error=db%20timeout")
				case 1:
					b := `{"error":"card declined\nat charge()"}`
					extra = "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b
				case 2:
					extra = "Content-Length: 5\r\n\r\n{nope"
				}
				d = diffReq{raw: func(ids, _ []string) string {
					return head("PUT", join("/api/ns/"+q+"/job/"+id(ids)+"/release", append(ps, tq)...), extra)
				}, what: "PUT release " + q + " " + strings.Join(ps, "&")}
			case 0:
				target = "/api/ns/" + q + "/size"
			case 1:
				target = "/api/ns/" + q + "/peek"
			case 2:
				id := pickID(rng)
				d = diffReq{raw: func(ids, rcpts []string) string {
					return head("GET", join("/api/ns/"+q+"/job/"+id(ids), tq), "\r\n")
				}, what: "GET job " + q}
			case 3:
				target = "/nope"
			case 4: // a bad token
				th, tq = "X-Token: not-a-token\r\n", ""
				target, method = "/api/ns/"+q+"?timeout=0", "GET"
			case 5: // a bad parameter
				target = "/api/ns/" + q + "?timeout=x"
			}
			if d.raw == nil {
				raw := head(method, join(target, tq), "\r\n")
				d = diffReq{raw: func([]string, []string) string { return raw }, what: method + " " + target}
			}
		}
		closes = closes || d.closes
		d.closes = closes
		if closes {
			d.what += " (close)"
		}
		return d
	}
	for n := 1 + rng.IntN(6); n > 0; n-- {
		var r diffRound
		size := 1
		if rng.IntN(2) == 0 {
			size = 1 + rng.IntN(5) // pipelined
		}
		closed := false
		for range size {
			d := gen()
			r.reqs = append(r.reqs, d)
			if d.closes {
				closed = true
				break
			}
		}
		if rng.IntN(3) == 0 {
			r.chops = 1 + rng.IntN(4)
		}
		s.rounds = append(s.rounds, r)
		if closed {
			return s
		}
	}
	switch rng.IntN(8) {
	case 0:
		s.eof = true
	case 1: // EOF in the middle of a request
		d := gen()
		if d.closes {
			break
		}
		raw := d.raw(nil, nil)
		s.rounds = append(s.rounds, diffRound{trunc: d, truncate: 1 + rng.IntN(len(raw)-1)})
	}
	return s
}

// diffAnswer is one answer, normalised.
type diffAnswer string

// diffRun is what one server answered to a sequence: the answers, then
// how the connection ended.
type diffRun struct {
	answers []diffAnswer
	end     string
}

func (r *diffRun) String() string {
	var b strings.Builder
	for i, a := range r.answers {
		fmt.Fprintf(&b, "  %d: %s\n", i, a)
	}
	fmt.Fprintf(&b, "  end: %s\n", r.end)
	return b.String()
}

// diffTimeout bounds the wait for one answer: above the 3 s waits, with
// room for a loaded machine.
const diffTimeout = 5 * time.Second

// runSeq sends s to srv on a new connection and returns its answers.
func runSeq(srv *diffServer, s *diffSeq) *diffRun {
	run := &diffRun{}
	conn, err := net.Dial("tcp", srv.addr)
	if err != nil {
		run.end = "dial: " + err.Error()
		return run
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	rng := rand.New(rand.NewPCG(s.seed, 7))
	var ids, rcpts []string
	known := map[string]string{}
	knownR := map[string]string{}
	feeds := 0
	norm := func(resp *http.Response, body []byte) diffAnswer {
		var b strings.Builder
		fmt.Fprintf(&b, "%d", resp.StatusCode)
		var keys []string
		for k := range resp.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := strings.Join(resp.Header[k], ",")
			switch k {
			case "Date":
				continue
			case "X-Request-Id":
				if len(v) == 26 {
					v = "*"
				}
			case "Content-Length":
				continue // the bodies are compared
			}
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
		if resp.Close {
			b.WriteString(" (Connection: close)") // ReadResponse drops the header
		}
		var doc any
		if json.Unmarshal(body, &doc) == nil {
			doc = normJSON(doc, func(id string) string {
				if n, ok := known[id]; ok {
					return n
				}
				ids = append(ids, id)
				n := "J" + strconv.Itoa(len(ids))
				known[id] = n
				return n
			}, func(r string) string {
				if n, ok := knownR[r]; ok {
					return n
				}
				rcpts = append(rcpts, r)
				n := "R" + strconv.Itoa(len(rcpts))
				knownR[r] = n
				return n
			})
			nb, _ := json.Marshal(doc)
			fmt.Fprintf(&b, " json:%s", nb)
		} else {
			fmt.Fprintf(&b, " body:%q", body)
		}
		return diffAnswer(b.String())
	}
	readOne := func() bool {
		_ = conn.SetReadDeadline(time.Now().Add(diffTimeout))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			run.end = endOf(err)
			return false
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			run.end = "body: " + endOf(err)
			return false
		}
		run.answers = append(run.answers, norm(resp, body))
		return true
	}
	write := func(raw []byte, chops int) <-chan error {
		errc := make(chan error, 1)
		cuts := make([]int, 0, chops)
		for range chops {
			cuts = append(cuts, rng.IntN(len(raw)+1))
		}
		sort.Ints(cuts)
		go func() {
			prev := 0
			for _, c := range append(cuts, len(raw)) {
				if c > prev {
					if _, err := conn.Write(raw[prev:c]); err != nil {
						errc <- err
						return
					}
					prev = c
					time.Sleep(time.Duration(rng2(c)) * 500 * time.Microsecond)
				}
			}
			errc <- nil
		}()
		return errc
	}
	for _, r := range s.rounds {
		var raw []byte
		for _, d := range r.reqs {
			raw = append(raw, d.raw(ids, rcpts)...)
		}
		if r.truncate > 0 {
			t := d2raw(r.trunc, ids, rcpts)
			raw = append(raw, t[:min(r.truncate, len(t)-1)]...)
		}
		errc := write(raw, r.chops)
		for _, d := range r.reqs {
			if d.feed != "" {
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				feeds++
				_, err := srv.eng.Publish(context.Background(), &engine.PublishRequest{
					Namespace: "ns", Queue: d.feed, Body: []byte("fed-" + strconv.Itoa(feeds)), Tries: 1,
				})
				if err != nil {
					run.end = "feed: " + err.Error()
					return run
				}
			}
			if !readOne() {
				return run
			}
		}
		if err := <-errc; err != nil {
			run.end = "write: " + endOf(err)
			return run
		}
		if r.truncate > 0 {
			_ = conn.(*net.TCPConn).CloseWrite()
			for readOne() {
			}
			return run
		}
	}
	last := s.rounds[len(s.rounds)-1].reqs
	switch {
	case len(last) > 0 && last[len(last)-1].closes:
	case s.eof:
		_ = conn.(*net.TCPConn).CloseWrite()
	default:
		run.end = "open"
		return run
	}
	_ = conn.SetReadDeadline(time.Now().Add(diffTimeout))
	n, err := br.Read(make([]byte, 1))
	if n > 0 {
		run.end = "more bytes"
	} else {
		run.end = endOf(err)
	}
	return run
}

// rng2 spreads the pauses between writes: mostly none.
func rng2(c int) int {
	if c%3 == 0 {
		return 1
	}
	return 0
}

func d2raw(d diffReq, ids, rcpts []string) []byte { return []byte(d.raw(ids, rcpts)) }

// endOf names how a read ended.
func endOf(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout (no answer)"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	}
	return "error: " + err.Error()
}

// normJSON replaces what differs between two equal servers: job IDs and
// receipts (numbered by first appearance), times and TTLs.
func normJSON(v any, id, receipt func(string) string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch k {
			case "job_id":
				if s, ok := x.(string); ok && s != "" {
					v[k] = id(s)
				}
			case "receipt":
				if s, ok := x.(string); ok && s != "" {
					v[k] = receipt(s)
				}
			case "elapsed_ms", "ttl":
				v[k] = "*"
			default:
				v[k] = normJSON(x, id, receipt)
			}
		}
	case []any:
		for i := range v {
			v[i] = normJSON(v[i], id, receipt)
		}
	}
	return v
}

// envUint reads a number from the environment, def when unset.
func envUint(t *testing.T, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// TestLoopDifferential compares the answers of a server with event loops
// and one without to the same random sequences (see the top of the file).
func TestLoopDifferential(t *testing.T) {
	loops := startDiffServer(t, "loops", 2)
	plain := startDiffServer(t, "net/http", -1)
	first := envUint(t, "KAIROS_DIFF_SEED", uint64(time.Now().UnixNano())&(1<<40-1))
	n := envUint(t, "KAIROS_DIFF_N", diffN())
	t.Logf("seeds %d to %d (KAIROS_DIFF_SEED, KAIROS_DIFF_N)", first, first+n-1)

	var failed atomic.Int32
	var next atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() < 3 {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				s := genSeq(first + i)
				var a, b *diffRun
				var two sync.WaitGroup
				two.Add(2)
				go func() { defer two.Done(); a = runSeq(loops, s) }()
				go func() { defer two.Done(); b = runSeq(plain, s) }()
				two.Wait()
				if !equalRuns(s, a, b) {
					if failed.Add(1) <= 3 {
						t.Errorf("seed %d: the loops answered differently (replay: KAIROS_DIFF_SEED=%d KAIROS_DIFF_N=1)\nrequests:\n%sloops:\n%snet/http:\n%s",
							s.seed, s.seed, s.describe(), a, b)
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d sequences in %v", n, time.Since(start))
}

// equalRuns compares two runs of s. After a request that closes the
// connection, EOF, a reset and a write that fails (broken pipe, reset) are
// the same end: net/http closes such a connection with the bytes of a body
// it rejected unread whenever they arrived after it read the headers, and
// the kernel then resets it, or refuses the client's further writes (the
// loops do so too, as net/http, by timing); the answers before it are
// compared all the same.
func equalRuns(s *diffSeq, a, b *diffRun) bool {
	if len(a.answers) != len(b.answers) {
		return false
	}
	if a.end != b.end {
		last := s.rounds[len(s.rounds)-1].reqs
		closes := len(last) > 0 && last[len(last)-1].closes
		if !closes || !closedEnd[a.end] || !closedEnd[b.end] {
			return false
		}
	}
	for i := range a.answers {
		if a.answers[i] != b.answers[i] {
			return false
		}
	}
	return true
}

// closedEnd are the ends of a connection the server closed after its last
// answer, one for another (equalRuns).
var closedEnd = map[string]bool{"EOF": true, "reset": true, "write: broken pipe": true, "write: reset": true}

func (s *diffSeq) describe() string {
	var b bytes.Buffer
	for i, r := range s.rounds {
		fmt.Fprintf(&b, "  round %d (%d writes):\n", i, r.chops+1)
		for _, d := range r.reqs {
			fmt.Fprintf(&b, "    %s\n", d.what)
		}
		if r.truncate > 0 {
			fmt.Fprintf(&b, "    first %d bytes of %s, then EOF\n", r.truncate, r.trunc.what)
		}
	}
	if s.eof {
		b.WriteString("  then EOF\n")
	}
	return b.String()
}
