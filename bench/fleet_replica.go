package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/engine"
)

// fleetCompleteBatch is the most runs one completion commits: the dispatcher's completeBatch.
const fleetCompleteBatch = 100

// replicaStats counts what a replica's loops did; every field is safe for concurrent use.
type replicaStats struct {
	claims, emptyClaims, failedClaims atomic.Int64
	takes, emptyTakes, failedTakes    atomic.Int64
	taken                             atomic.Int64 // tickets that came through a take, not a claim
}

// fleetTally is what every replica of one run shares: the tickets completed, the run's end, the
// counts, the first errors, and the lag of each take (admitted_at → taken).
type fleetTally struct {
	n     int64
	done  atomic.Int64
	end   context.CancelFunc // called when the last ticket's completion commits
	stats replicaStats

	mu   sync.Mutex
	errs []string
	lags []float64 // milliseconds
}

// fail records the text of an error a loop survived (a failed claim or take), up to 10 of them.
func (t *fleetTally) fail(what string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errs) < 10 {
		t.errs = append(t.errs, what+": "+err.Error())
	}
}

// lagged records how long each taken ticket waited between its admission and its take.
func (t *fleetTally) lagged(ts []engine.Ticket, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, x := range ts {
		t.lags = append(t.lags, float64(now.Sub(x.AdmittedAt))/float64(time.Millisecond))
	}
}

// replica is one worker process of the fleet as the dispatcher runs it: its own pool, owner and
// queue, a notifier on a connection of its own, and its claim, take and complete loops.
type replica struct {
	owner    string
	pool     *pgxpool.Pool
	q        *engine.Queue
	notifier *engine.Notifier
	batch    int
	tally    *fleetTally

	stopNotifier context.CancelFunc
	notifierDone sync.WaitGroup

	mu      sync.Mutex
	pending []engine.Ticket // finished runs waiting for the completer
	wake    chan struct{}   // cap 1: the completer has work
}

// newReplica connects a replica's pool of poolSize connections to schema, starts its notifier (which
// hijacks one connection of the pool) and opens every connection of the pool, so that connecting is
// not part of the measured run.
func newReplica(ctx context.Context, url, schema, owner string, poolSize, batch int, tracer pgx.QueryTracer, tally *fleetTally) (*replica, error) {
	pool, err := fleetPool(ctx, url, poolSize, "sluice-fleet", tracer)
	if err != nil {
		return nil, err
	}
	q, err := engine.New(pool, engine.Options{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	r := &replica{owner: owner, pool: pool, q: q, notifier: q.NewNotifier(nil), batch: batch, tally: tally,
		wake: make(chan struct{}, 1)}
	nctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stopNotifier = stop
	r.notifierDone.Go(func() { _ = r.notifier.Run(nctx) })
	select {
	case <-r.notifier.Listening():
	case <-ctx.Done():
		r.close()
		return nil, ctx.Err()
	}
	if err := warm(ctx, pool); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// fleetPool returns a pool of size connections, each tagged with application_name app so that the
// connection sampler counts the fleet's connections alone.
func fleetPool(ctx context.Context, url string, size int, app string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.ConnConfig.Tracer = tracer
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = int32(size)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// warm opens every connection the pool may hold, by holding them all at once.
func warm(ctx context.Context, pool *pgxpool.Pool) error {
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// close stops the notifier and closes the pool.
func (r *replica) close() {
	r.stopNotifier()
	r.notifierDone.Wait()
	r.pool.Close()
}

// run runs the replica's claim, take and complete loops until ctx is done. Only a completion that
// fails, or finds a ticket not admitted or running, ends it early with an error.
func (r *replica) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { r.claimLoop(gctx); return nil })
	g.Go(func() error { r.takeLoop(gctx); return nil })
	g.Go(func() error { return r.completeLoop(gctx) })
	return g.Wait()
}

// claimLoop is internal/dispatcher's Claimer.loop: claim a batch as this owner (its own tickets come
// back running, and go to the completer as the runner's goroutines would once their runs return),
// claim again at once after a full batch or More, else wait for work, for a release when the claim
// left tickets waiting for room, for the earliest RetryAt, or for the poll.
func (r *replica) claimLoop(ctx context.Context) {
	waiter := r.notifier.ClaimWaiter()
	defer waiter.Close()
	st := &r.tally.stats
	for {
		res, err := r.q.Claim(ctx, engine.ClaimParams{Max: r.batch, Owner: r.owner})
		next, onRelease := pollEvery, res.WaitsOnRelease
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// A claim must never fail here: count it, keep its text, and go on as the dispatcher does.
			st.failedClaims.Add(1)
			r.tally.fail("claim", err)
			onRelease = true
		case len(res.Admitted) == r.batch || res.More:
			next = 0
		case !res.RetryAt.IsZero():
			next = min(next, max(0, res.RetryAt.Sub(res.Now)))
		}
		st.claims.Add(1)
		if len(res.Admitted) == 0 {
			st.emptyClaims.Add(1)
		}
		var own []engine.Ticket
		for _, t := range res.Admitted {
			if t.State == engine.TicketStateRunning {
				own = append(own, t)
			}
		}
		r.finished(own)
		if next > 0 && !waiter.Wait(ctx, onRelease, next) {
			return
		}
	}
}

// takeLoop is internal/dispatcher's Runner.loop over deps.takeLoop: take up to a batch of this
// owner's admitted tickets, again at once while batches come back full, else after the owner's
// admission is notified or the poll. One take at a time: notifications coalesce.
func (r *replica) takeLoop(ctx context.Context) {
	admitted, unsubscribe := r.notifier.Subscribe(engine.TopicAdmitted(r.owner))
	defer unsubscribe()
	st := &r.tally.stats
	for {
		ts, err := r.q.TakeAdmitted(ctx, r.owner, r.batch)
		if ctx.Err() != nil {
			return
		}
		st.takes.Add(1)
		if err != nil {
			st.failedTakes.Add(1)
			r.tally.fail("take", err)
		}
		if len(ts) == 0 {
			st.emptyTakes.Add(1)
		}
		st.taken.Add(int64(len(ts)))
		r.tally.lagged(ts, time.Now())
		r.finished(ts)
		if len(ts) == r.batch {
			continue
		}
		t := time.NewTimer(pollEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-admitted:
		case <-t.C:
		}
		t.Stop()
	}
}

// finished hands runs that returned to the completer, never blocking the caller (the dispatcher's
// runs each wait in their own goroutine).
func (r *replica) finished(ts []engine.Ticket) {
	if len(ts) == 0 {
		return
	}
	r.mu.Lock()
	r.pending = append(r.pending, ts...)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next returns up to fleetCompleteBatch of the pending runs, removing them.
func (r *replica) next() []engine.Ticket {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.pending), fleetCompleteBatch)
	batch := r.pending[:n:n]
	r.pending = r.pending[n:]
	return batch
}

// completeLoop is the dispatcher's Completer, a group commit: it completes, in one CompleteMany, the
// runs that finished while the previous commit was under way, up to fleetCompleteBatch. When the
// fleet's last ticket commits it ends the run.
func (r *replica) completeLoop(ctx context.Context) error {
	for {
		batch := r.next()
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
				continue
			}
		}
		ps := make([]engine.CompleteParams, len(batch))
		for i, t := range batch {
			ps[i] = engine.CompleteParams{TicketID: t.ID, ActualCost: 90, OutcomeKind: engine.OutcomeCompleted}
		}
		found, err := r.q.CompleteMany(ctx, ps)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: complete %d runs: %w", r.owner, len(ps), err)
		}
		// A ticket the completion did not find was not admitted or running: admitted twice and
		// completed by another batch, or lost. Counting it as done would hide both.
		for i, ok := range found {
			if !ok {
				return fmt.Errorf("%s: complete: ticket %d was not admitted or running when completed (admitted twice, or lost)", r.owner, ps[i].TicketID)
			}
		}
		if r.tally.done.Add(int64(len(ps))) >= r.tally.n {
			r.tally.end()
		}
	}
}
