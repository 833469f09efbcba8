package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

const (
	insertBatch = 1_000 // tickets per EnqueueMany, jobs per InsertMany
	pollEvery   = time.Second
	// riverWorkers is each River client's MaxWorkers, as River's own benchmark sets it.
	riverWorkers = 2_000
)

// noopArgs is River's job: it does nothing, as Sluice's benchmark activity does nothing.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// run is one measured run: tickets (or jobs) per second, and the statements and transactions each
// cost.
type run struct {
	PerSecond             float64    `json:"per_second"`
	StatementsPerTicket   float64    `json:"statements_per_ticket"`
	TransactionsPerTicket float64    `json:"transactions_per_ticket"`
	LoadAverage           [3]float64 `json:"load_average"`
}

func measured(n int, took time.Duration, c *counter) run {
	return run{PerSecond: float64(n) / took.Seconds(), LoadAverage: loadAvg(),
		StatementsPerTicket:   float64(c.statements.Load()) / float64(n),
		TransactionsPerTicket: float64(c.transactions.Load()) / float64(n)}
}

// sluiceFill writes n tickets over keys lines in batches by EnqueueMany, spread over 100 tenants for
// fair share, and returns the time the writes took.
func sluiceFill(ctx context.Context, q *store.Queue, n, keys int) (time.Duration, error) {
	start := time.Now()
	for at := 0; at < n; at += insertBatch {
		ps := make([]store.EnqueueParams, min(insertBatch, n-at))
		for i := range ps {
			ps[i] = store.EnqueueParams{LimitKeys: []string{fmt.Sprint("k", (at+i)%keys)}, Cost: 100,
				FairnessKey: fmt.Sprint("tenant-", (at+i)%100), Owner: "bench"}
		}
		if _, err := q.EnqueueMany(ctx, ps); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// sluiceLimits creates keys limits that do not bind.
func sluiceLimits(ctx context.Context, q *store.Queue, keys int) error {
	ls := make([]throttle.Limit, keys)
	for i := range ls {
		ls[i] = throttle.Limit{Key: fmt.Sprint("k", i), MaxConcurrent: 1_000_000, TokensPerMinute: 1e12}
	}
	return q.UpsertLimits(ctx, ls...)
}

// riverClient returns a River client on schema over pool; with workers > 0 it works the default queue,
// and with pollOnly it polls for jobs rather than listening for them.
func riverClient(pool *pgxpool.Pool, schema string, workers int, pollOnly bool) (*river.Client[pgxTx], error) {
	return riverClientWith(pool, schema, workers, pollOnly, false)
}

// riverDefaultWorkers is the MaxWorkers of River's documented examples, with which riverClientWith's
// defaults run.
const riverDefaultWorkers = 100

// riverClientWith is riverClient, with River's own defaults when defaults (riverDefaultWorkers
// workers, its default fetch cooldown of 100 ms and fetch poll of 1 s) in place of its benchmark's
// settings and workers.
func riverClientWith(pool *pgxpool.Pool, schema string, workers int, pollOnly, defaults bool) (*river.Client[pgxTx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	// PollOnly: River without LISTEN, as it must run behind a transaction pooler.
	cfg := &river.Config{Schema: schema, Workers: ws, Logger: slog.New(slog.DiscardHandler), PollOnly: pollOnly}
	switch {
	case workers > 0 && defaults:
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverDefaultWorkers}}
	case workers > 0:
		// River's own benchmark's settings (cmd/river/riverbench): River at its fastest. With its
		// defaults (100 workers, a fetch cooldown of 100 ms) one client stops at 1,000 jobs/s.
		cfg.FetchCooldown, cfg.FetchPollInterval = 2*time.Millisecond, 20*time.Millisecond
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// riverFill inserts n noop jobs by InsertMany in batches and returns the time it took.
func riverFill(ctx context.Context, c *river.Client[pgxTx], n int) (time.Duration, error) {
	start := time.Now()
	for at := 0; at < n; at += insertBatch {
		ps := make([]river.InsertManyParams, min(insertBatch, n-at))
		for i := range ps {
			ps[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := c.InsertMany(ctx, ps); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
