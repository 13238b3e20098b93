package main

import (
	"context"
	"log"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqVersion is the version go.mod pins.
const asynqVersion = "v0.26.0"

// asynqPeer drives asynq as its README and wiki show it: one asynq.Client
// shared by the producers (Enqueue; asynq has no batch enqueue), and an
// asynq.Server with Config.Concurrency handlers over one queue, a handler
// returning nil acknowledges (the task is deleted: Retention is 0). Every
// other setting is asynq's default (MaxRetry 25, Timeout 30 min,
// TaskCheckInterval 1 s, DelayedTaskCheckInterval 5 s, go-redis's pool).
type asynqPeer struct {
	opt asynq.RedisClientOpt
	c   *asynq.Client
	rdb *redis.Client
}

func newAsynq(cfg config) (peer, error) {
	opt := asynq.RedisClientOpt{Addr: cfg.redis}
	return &asynqPeer{opt: opt, c: asynq.NewClient(opt), rdb: redis.NewClient(&redis.Options{Addr: cfg.redis})}, nil
}

func (a *asynqPeer) name() string    { return "asynq" }
func (a *asynqPeer) version() string { return asynqVersion }

func (a *asynqPeer) enqueue(ctx context.Context, queue string, body []byte, due time.Time) error {
	opts := []asynq.Option{asynq.Queue(queue)}
	if !due.IsZero() {
		opts = append(opts, asynq.ProcessAt(due))
	}
	_, err := a.c.EnqueueContext(ctx, asynq.NewTask("bench", body), opts...)
	return err
}

func (a *asynqPeer) batch(context.Context, string, [][]byte, time.Time) error { return errNoBatch }

func (a *asynqPeer) work(_ context.Context, queue string, concurrency int, h func([]byte)) (func(), error) {
	srv := asynq.NewServer(a.opt, asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{queue: 1},
		Logger:      quietLogger{},
		LogLevel:    asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench", func(_ context.Context, t *asynq.Task) error {
		h(t.Payload())
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return nil, err
	}
	return srv.Shutdown, nil
}

// clean flushes Redis: asynq keeps nothing else there that a run needs.
func (a *asynqPeer) clean(ctx context.Context) error { return a.rdb.FlushAll(ctx).Err() }

func (a *asynqPeer) storeBytes(ctx context.Context) (int64, error) { return usedMemory(ctx, a.rdb) }

func (a *asynqPeer) close() {
	_ = a.c.Close()
	_ = a.rdb.Close()
}

// quietLogger sends asynq's errors to the standard logger and drops the rest.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(args ...any) {
	log.Print(append([]any{"asynq: "}, args...)...)
}
func (quietLogger) Fatal(args ...any) { log.Fatal(append([]any{"asynq: "}, args...)...) }

func splitLines(s string) []string { return strings.Split(strings.ReplaceAll(s, "\r", ""), "\n") }
