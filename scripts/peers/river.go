package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverVersion is the version go.mod pins.
const riverVersion = "v0.51.2"

// riverPeer drives River as its documentation shows it: a pgx v5 pool,
// its migrations run with rivermigrate, an insert-only river.Client for the
// producers (Insert, InsertMany), and for the handlers a river.Client with
// one queue of QueueConfig.MaxWorkers workers; a Work returning nil
// completes the job (River's completer marks it completed in batches, and
// its cleaner deletes completed jobs after 24 h). FetchCooldown is 2 ms and
// FetchPollInterval 20 ms, as River's own benchmark (cmd/river bench) sets
// them "to maximize job throughput": with the defaults (100 ms and 1 s) a
// queue of 64 workers fetches at most 64 jobs every 100 ms, 640 jobs/s
// (-river-defaults measures that). Every other setting is River's default
// (LISTEN/NOTIFY on, the scheduler moving scheduled jobs every 5 s,
// MaxAttempts 25). The pool's MaxConns is -c (pgxpool's default, max(4,
// CPUs), would let only 4 of the 64 producers insert at once).
type riverPeer struct {
	pool    *pgxpool.Pool
	workers *river.Workers
	ins     *river.Client[pgx5Tx]
	log     *slog.Logger
	// defaults: River's own FetchCooldown and FetchPollInterval.
	defaults bool
}

type pgx5Tx = pgx.Tx

// benchArgs carries the body as raw JSON (the body is a JSON string).
type benchArgs struct {
	B json.RawMessage `json:"b"`
}

func (benchArgs) Kind() string { return "bench" }

// riverHandler is the running scenario's handler (one work at a time).
var riverHandler atomic.Pointer[func([]byte)]

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (benchWorker) Work(_ context.Context, job *river.Job[benchArgs]) error {
	if h := riverHandler.Load(); h != nil {
		(*h)(job.Args.B)
	}
	return nil
}

func newRiver(ctx context.Context, cfg config) (peer, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.pg)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(cfg.conc)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Workers: workers, Logger: lg})
	if err != nil {
		return nil, err
	}
	return &riverPeer{pool: pool, workers: workers, ins: ins, log: lg, defaults: cfg.riverDefaults}, nil
}

func (r *riverPeer) name() string {
	if r.defaults {
		return "river-defaults"
	}
	return "river"
}
func (r *riverPeer) version() string { return riverVersion }

func (r *riverPeer) opts(queue string, due time.Time) *river.InsertOpts {
	o := &river.InsertOpts{Queue: queue}
	if !due.IsZero() {
		o.ScheduledAt = due
	}
	return o
}

func (r *riverPeer) enqueue(ctx context.Context, queue string, body []byte, due time.Time) error {
	_, err := r.ins.Insert(ctx, benchArgs{B: body}, r.opts(queue, due))
	return err
}

func (r *riverPeer) batch(ctx context.Context, queue string, bodies [][]byte, due time.Time) error {
	ps := make([]river.InsertManyParams, len(bodies))
	for i, b := range bodies {
		ps[i] = river.InsertManyParams{Args: benchArgs{B: b}, InsertOpts: r.opts(queue, due)}
	}
	_, err := r.ins.InsertMany(ctx, ps)
	return err
}

func (r *riverPeer) work(ctx context.Context, queue string, concurrency int, h func([]byte)) (func(), error) {
	riverHandler.Store(&h)
	cfg := &river.Config{
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: concurrency}},
		Workers:           r.workers,
		Logger:            r.log,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
	}
	if r.defaults {
		cfg.FetchCooldown, cfg.FetchPollInterval = 0, 0
	}
	c, err := river.NewClient(riverpgxv5.New(r.pool), cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
		riverHandler.Store(nil)
	}, nil
}

// clean empties the job table.
func (r *riverPeer) clean(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

// storeBytes is the job table's size with its indexes and TOAST.
func (r *riverPeer) storeBytes(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, "SELECT pg_total_relation_size('river_job')").Scan(&n)
	return n, err
}

func (r *riverPeer) close() { r.pool.Close() }
