package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/server/app"
)

// exampleServer starts a throwaway Kairos server with an embedded
// in-memory Redis, creates a token for namespace "demo", and returns the
// public and admin addresses, the token and a stop function. Real code
// just points the client at its server.
func exampleServer() (addr, adminAddr, token string, stop func()) {
	cfg := config.Default()
	cfg.Host, cfg.Port, cfg.AdminPort = "127.0.0.1", 0, 0
	// No Addr anywhere, and asked for by name: the in-memory store.
	cfg.Kairos.Embedded = true
	cfg.Pool = map[string]config.RedisConf{config.DefaultPoolName: {}}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, app.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	admin, err := client.NewAdmin(a.Server.AdminAddr())
	if err != nil {
		log.Fatal(err)
	}
	token, err = admin.CreateToken(ctx, "demo", client.TokenOptions{Description: "examples"})
	if err != nil {
		log.Fatal(err)
	}
	return a.Server.Addr(), a.Server.AdminAddr(), token, func() { cancel(); <-done }
}

// Publish a job, consume it and ACK it.
func Example() {
	addr, _, token, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(addr, client.WithNamespace("demo"), client.WithToken(token))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Publish(ctx, "emails", []byte("send welcome mail to 42"), client.TTL(time.Hour), client.Tries(3)); err != nil {
		log.Fatal(err)
	}
	// Wait up to 5 s for a job; ACK it within 30 s or it comes back.
	job, err := c.Consume(ctx, "emails", 30*time.Second, 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (tries left: %d)\n", job.Body, job.RemainTries)
	if err := c.Ack(ctx, "emails", job.ID); err != nil {
		log.Fatal(err)
	}
	// Output: send welcome mail to 42 (tries left: 2)
}

// Consume reports "nothing to do" as ErrNoJob; every error of the server
// is an *APIError with the request ID to quote.
func ExampleAPIError() {
	addr, _, token, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.New(addr, client.WithNamespace("demo"), client.WithToken(token))

	_, err := c.Consume(ctx, "empty", 30*time.Second, 0)
	fmt.Println(errors.Is(err, client.ErrNoJob))

	_, err = c.PeekJob(ctx, "empty", "01J00000000000000000000000")
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Message, errors.Is(err, client.ErrNotFound), len(apiErr.RequestID))
	}

	bad, _ := client.New(addr, client.WithNamespace("demo"), client.WithToken("wrong"))
	_, err = bad.Publish(ctx, "emails", []byte("x"))
	fmt.Println(errors.Is(err, client.ErrUnauthorized))
	// Output:
	// true
	// 404 job not found true 26
	// true
}

// BatchPublish sends up to 64 jobs in one atomic request; each element's
// JSON text is one job body.
func ExampleClient_BatchPublish() {
	addr, _, token, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.New(addr, client.WithNamespace("demo"), client.WithToken(token))

	ids, err := c.BatchPublish(ctx, "events", []any{
		map[string]int{"user": 1},
		"plain string",
		[]byte(`{"raw": "kept byte for byte"}`),
	}, client.Delay(0), client.TTL(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	jobs, err := c.BatchConsume(ctx, []string{"events"}, 10, time.Minute, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), "published")
	for _, j := range jobs {
		fmt.Println(string(j.Body))
	}
	// Output:
	// 3 published
	// {"user":1}
	// "plain string"
	// {"raw": "kept byte for byte"}
}

// A worker runs handlers over several queues (the first has priority),
// ACKs what succeeds and retries what fails after the TTR.
func ExampleNewWorker() {
	addr, _, token, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.New(addr, client.WithNamespace("demo"), client.WithToken(token))
	for _, body := range []string{"a", "b", "c"} {
		if _, err := c.Publish(ctx, "work", []byte(body)); err != nil {
			log.Fatal(err)
		}
	}

	var mu sync.Mutex
	var handled []string
	w, err := client.NewWorker(c, client.WorkerConfig{
		Queues:      []string{"urgent", "work"},
		Concurrency: 2,
		TTR:         30 * time.Second,
		PollTimeout: time.Second,
	}, func(ctx context.Context, job *client.Job) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, string(job.Body))
		return nil // ACK
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for w.Stats().Acked < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	sort.Strings(handled)
	fmt.Println(handled)
	// Output: [a b c]
}

// An administrator creates a token limited to one queue and one role.
func ExampleAdmin_CreateToken() {
	addr, adminAddr, _, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	admin, err := client.NewAdmin(adminAddr) // client.WithBasicAuth(user, password) when [Accounts] is set
	if err != nil {
		log.Fatal(err)
	}
	token, err := admin.CreateToken(ctx, "demo", client.TokenOptions{
		Description: "mailer",
		Queues:      []string{"emails"},
		Roles:       []string{"consume"},
	})
	if err != nil {
		log.Fatal(err)
	}
	c, _ := client.New(addr, client.WithNamespace("demo"), client.WithToken(token))
	_, err = c.Publish(ctx, "emails", []byte("x"))
	fmt.Println(errors.Is(err, client.ErrForbidden))
	// Output: true
}

// A server whose certificate comes from a private CA: an https:// address
// and the CA's PEM file, for the public and the admin API alike.
func ExampleWithCAFile() {
	c, err := client.New("https://kairos.internal:7777",
		client.WithNamespace("demo"), client.WithToken("secret"),
		client.WithCAFile("/etc/kairos/ca.crt"))
	if err != nil {
		log.Fatal(err) // the CA file cannot be read or holds no certificate
	}
	admin, err := client.NewAdmin("https://kairos.internal:7778", client.WithCAFile("/etc/kairos/ca.crt"))
	if err != nil {
		log.Fatal(err)
	}
	_, _ = c, admin
}
