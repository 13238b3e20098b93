package client_test

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/kairos-dev/kairos/client"
)

// The client's cost per request (issue #34): the hot calls — Publish,
// BatchPublish, Consume and AckJob, what a Worker sends — against a
// canned loopback server that allocates nothing itself, so that what the
// process allocates per call is the client's. TestHotCallAllocs holds the
// counts (a regression shows there, at once and without timing);
// BenchmarkHotCalls gives the CPU.
//
//	go test -run '^$' -bench HotCalls -benchmem ./client

// cannedServer answers every request on 127.0.0.1 by its method: PUT a
// publish's 201 (a bulk's when the path ends in /bulk), GET a consumed
// job, DELETE 204, each as the server's event loops write it.
func cannedServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	const (
		published = `{"job_id":"01JD5Q0M4W4C0V7H3X5B2R9K8T","msg":"published"}`
		job       = `{"attributes":null,"data":"eyJzZXEiOjEsInBhZCI6Inh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4In0=","elapsed_ms":12,"job_id":"01JD5Q0M4W4C0V7H3X5B2R9K8T","msg":"new job","namespace":"ns","queue":"q","receipt":"0123456789abcdef","remain_tries":2,"ttl":3600}`
		head      = "Content-Type: application/json; charset=utf-8\r\nX-Request-Id: 01JD5Q0M4W4C0V7H3X5B2R9K8V\r\nDate: Mon, 07 Dec 2026 23:00:00 GMT\r\n"
	)
	bulk := []byte(`{"job_ids":[` + "\"01JD5Q0M4W4C0V7H3X5B2R9K8T\"" + `],"msg":"published"}`)
	answer := func(status, body string) []byte {
		return []byte("HTTP/1.1 " + status + "\r\n" + head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	put, get := answer("201 Created", published), answer("200 OK", job)
	putBulk := answer("201 Created", string(bulk))
	del := []byte("HTTP/1.1 204 No Content\r\nX-Request-Id: 01JD5Q0M4W4C0V7H3X5B2R9K8V\r\nDate: Mon, 07 Dec 2026 23:00:00 GMT\r\n\r\n")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				n := 0
				for {
					end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
					if end < 0 {
						m, err := c.Read(buf[n:])
						if err != nil {
							return
						}
						n += m
						continue
					}
					reqHead := buf[:end]
					length := 0
					if i := bytes.Index(reqHead, []byte("Content-Length: ")); i >= 0 {
						for _, d := range reqHead[i+16:] {
							if d < '0' || d > '9' {
								break
							}
							length = length*10 + int(d-'0')
						}
					}
					total := end + 4 + length
					for n < total {
						m, err := c.Read(buf[n:])
						if err != nil {
							return
						}
						n += m
					}
					var out []byte
					switch {
					case bytes.HasPrefix(reqHead, []byte("PUT ")) && bytes.Contains(reqHead[:bytes.IndexByte(reqHead, '\n')], []byte("/bulk")):
						out = putBulk
					case bytes.HasPrefix(reqHead, []byte("PUT ")):
						out = put
					case bytes.HasPrefix(reqHead, []byte("GET ")):
						out = get
					default:
						out = del
					}
					if _, err := c.Write(out); err != nil {
						return
					}
					n = copy(buf, buf[total:n])
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// hotCalls are the calls measured, on a client of addr.
func hotCalls(tb testing.TB, addr string) map[string]func(ctx context.Context) {
	c, err := client.New(addr, client.WithNamespace("ns"), client.WithToken("0123456789abcdefghij"))
	if err != nil {
		tb.Fatal(err)
	}
	body := []byte(`{"seq":1,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	job := &client.Job{ID: "01JD5Q0M4W4C0V7H3X5B2R9K8T", Queue: "q", Receipt: "0123456789abcdef"}
	bulk := []any{string(body)}
	check := func(what string, err error) {
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	}
	return map[string]func(ctx context.Context){
		"Publish": func(ctx context.Context) {
			_, err := c.Publish(ctx, "q", body)
			check("Publish", err)
		},
		"BatchPublish": func(ctx context.Context) {
			_, err := c.BatchPublish(ctx, "q", bulk)
			check("BatchPublish", err)
		},
		"Consume": func(ctx context.Context) {
			_, err := c.Consume(ctx, "q", 0, 0)
			check("Consume", err)
		},
		"AckJob": func(ctx context.Context) {
			check("AckJob", c.AckJob(ctx, job))
		},
	}
}

func TestHotCallAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	// The counts measured when they were set (2026-12-07), for the call
	// with a context that can be cancelled (a Worker's, a request's):
	// before, 34 for a publish. Publish: the response's body, the job
	// ID, the response; Consume: those, the Job, its strings' copy and
	// its body; AckJob: the request ID's copy, the response.
	limits := map[string]float64{"Publish": 4, "BatchPublish": 12, "Consume": 6, "AckJob": 3}
	calls := hotCalls(t, cannedServer(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, call := range calls {
		call(ctx) // the connection, its buffers
		// As testing.AllocsPerRun, without its GOMAXPROCS(1), under
		// which the loopback exchanges of a loaded machine took
		// hundreds of milliseconds each.
		const runs = 200
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			call(ctx)
		}
		runtime.ReadMemStats(&after)
		got := float64(after.Mallocs-before.Mallocs) / runs
		t.Logf("%s: %.1f allocations", name, got)
		if got > limits[name] {
			t.Errorf("%s: %.1f allocations per call, want at most %v", name, got, limits[name])
		}
	}
}

func BenchmarkHotCalls(b *testing.B) {
	calls := hotCalls(b, cannedServer(b))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range []string{"Publish", "BatchPublish", "Consume", "AckJob"} {
		call := calls[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call(ctx)
				}
			})
		})
	}
}
