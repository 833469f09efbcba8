package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/engine"
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
func sluiceFill(ctx context.Context, q *engine.Queue, n, keys int) (time.Duration, error) {
	start := time.Now()
	for at := 0; at < n; at += insertBatch {
		ps := make([]engine.EnqueueParams, min(insertBatch, n-at))
		for i := range ps {
			ps[i] = engine.EnqueueParams{LimitKeys: []string{fmt.Sprint("k", (at+i)%keys)}, Cost: 100,
				FairnessKey: fmt.Sprint("tenant-", (at+i)%100), Owner: "bench"}
		}
		if _, err := q.EnqueueMany(ctx, ps); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// sluiceLimits creates keys limits that do not bind.
func sluiceLimits(ctx context.Context, q *engine.Queue, keys int) error {
	ls := make([]throttle.Limit, keys)
	for i := range ls {
		ls[i] = throttle.Limit{Key: fmt.Sprint("k", i), MaxConcurrent: 1_000_000, TokensPerMinute: 1e12}
	}
	return q.UpsertLimits(ctx, ls...)
}

// sluiceClaimComplete drains n queued tickets with claimers, each a worker process's pair of
// dispatcher loops: a claimer (batches of claimBatch, its own tickets straight to running, a wait for
// a notification after a short claim) and a completer that group-commits what finished.
func sluiceClaimComplete(ctx context.Context, e *env, claimers, keys, n, batch int) (run, error) {
	q, err := e.sluiceQueue(ctx)
	if err != nil {
		return run{}, err
	}
	defer e.dropSchema(ctx, q.Schema())
	if err := sluiceLimits(ctx, q, keys); err != nil {
		return run{}, err
	}
	if _, err := sluiceFill(ctx, q, n, keys); err != nil {
		return run{}, err
	}
	if _, err := q.Pool().Exec(ctx, `ANALYZE `+q.Schema()+`.sluice_ticket`); err != nil {
		return run{}, err
	}
	notifier := q.NewNotifier(nil)
	nctx, stopNotifier := context.WithCancel(ctx)
	var nwg sync.WaitGroup
	nwg.Go(func() { _ = notifier.Run(nctx) })
	defer func() { stopNotifier(); nwg.Wait() }()
	<-notifier.Listening()

	var done atomic.Int64
	e.count.reset()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	// The claimers stop when the last completion is recorded: nothing else would wake them then.
	claiming, allDone := context.WithCancel(gctx)
	defer allDone()
	for c := range claimers {
		owner := fmt.Sprint("claimer-", c)
		finished := make(chan []engine.Ticket, n/batch+1)
		g.Go(func() error { return claimUntil(claiming, q, notifier, owner, batch, finished) })
		g.Go(func() error {
			defer allDone()
			return completeUntil(gctx, q, batch, &done, int64(n), finished)
		})
	}
	if err := g.Wait(); err != nil {
		return run{}, err
	}
	return measured(n, time.Since(start), e.count), nil
}

// claimUntil is the dispatcher Claimer's loop: claim a batch, hand this owner's tickets on (to the
// completer here, as the runner does once each returns), claim again at once after a full batch,
// else wait for a notification. It stops when ctx is done.
func claimUntil(ctx context.Context, q *engine.Queue, notifier *engine.Notifier, owner string, batch int,
	finished chan<- []engine.Ticket) error {
	waiter := notifier.ClaimWaiter()
	defer waiter.Close()
	for {
		res, err := q.Claim(ctx, engine.ClaimParams{Max: batch, Owner: owner})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if len(res.Admitted) > 0 {
			finished <- res.Admitted
		}
		if len(res.Admitted) < batch && !res.More && !waiter.Wait(ctx, res.WaitsOnRelease, pollEvery) {
			return nil
		}
	}
}

// completeUntil is the dispatcher Completer's group commit: it completes, in one transaction, the
// runs that finished while the previous one was under way, up to completeBatch (the dispatcher's is
// 100).
func completeUntil(ctx context.Context, q *engine.Queue, completeBatch int, done *atomic.Int64, n int64, finished <-chan []engine.Ticket) error {
	var pending []engine.Ticket
	for done.Load() < n {
		if len(pending) == 0 {
			select {
			case ts := <-finished:
				pending = ts
			case <-time.After(10 * time.Millisecond): // another claimer's completer may finish the run
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	more:
		for len(pending) < completeBatch {
			select {
			case ts := <-finished:
				pending = append(pending, ts...)
			default:
				break more
			}
		}
		batch := pending[:min(len(pending), completeBatch)]
		ps := make([]engine.CompleteParams, len(batch))
		for i, t := range batch {
			ps[i] = engine.CompleteParams{TicketID: t.ID, ActualCost: 90, OutcomeKind: engine.OutcomeCompleted}
		}
		found, err := q.CompleteMany(ctx, ps)
		if err != nil {
			return err
		}
		// A ticket the completion did not find was not admitted or running: admitted twice and
		// completed by another claimer's batch, or lost. Counting it as done would hide both.
		for i, ok := range found {
			if !ok {
				return fmt.Errorf("complete: ticket %d was not admitted or running when completed (admitted twice, or lost)", ps[i].TicketID)
			}
		}
		pending = pending[len(batch):]
		done.Add(int64(len(ps)))
	}
	return nil
}

// riverClient returns a River client on schema; with workers > 0 it works the default queue.
func riverClient(e *env, schema string, workers int) (*river.Client[pgxTx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	cfg := &river.Config{Schema: schema, Workers: ws, Logger: slog.New(slog.DiscardHandler)}
	if workers > 0 {
		// River's own benchmark's settings (cmd/river/riverbench): River at its fastest. With its
		// defaults (100 workers, a fetch cooldown of 100 ms) one client stops at 1,000 jobs/s.
		cfg.FetchCooldown, cfg.FetchPollInterval = 2*time.Millisecond, 20*time.Millisecond
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	return river.NewClient(riverpgxv5.New(e.riverPool), cfg)
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

// riverWorkComplete drains n inserted noop jobs with clients River clients (each a producer with
// riverWorkers workers), until each job's completion is recorded (River's completed event
// is sent once its completer has written the batch).
func riverWorkComplete(ctx context.Context, e *env, clients, n int) (run, error) {
	schema, err := e.riverSchema(ctx)
	if err != nil {
		return run{}, err
	}
	defer e.dropSchema(ctx, schema)
	inserter, err := riverClient(e, schema, 0)
	if err != nil {
		return run{}, err
	}
	if _, err := riverFill(ctx, inserter, n); err != nil {
		return run{}, err
	}
	if _, err := e.riverPool.Exec(ctx, `ANALYZE `+schema+`.river_job`); err != nil {
		return run{}, err
	}
	var done atomic.Int64
	all := make(chan struct{})
	var cs []*river.Client[pgxTx]
	var wg sync.WaitGroup
	for range clients {
		c, err := riverClient(e, schema, riverWorkers)
		if err != nil {
			return run{}, err
		}
		// A buffer for every job: River drops the events a full buffer cannot take.
		events, cancel := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1})
		defer cancel()
		wg.Go(func() {
			for range events {
				if done.Add(1) == int64(n) {
					close(all)
				}
			}
		})
		cs = append(cs, c)
	}
	e.riverCount.reset()
	start := time.Now()
	for _, c := range cs {
		if err := c.Start(ctx); err != nil {
			return run{}, err
		}
	}
	select {
	case <-all:
	case <-time.After(3 * time.Minute):
		for _, c := range cs {
			_ = c.Stop(ctx)
		}
		return run{}, fmt.Errorf("river completed %d of %d jobs in 3 minutes", done.Load(), n)
	}
	r := measured(n, time.Since(start), e.riverCount)
	for _, c := range cs {
		if err := c.Stop(ctx); err != nil {
			return run{}, err
		}
	}
	return r, nil
}
