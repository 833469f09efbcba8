package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/store"
)

// fleetCompleteBatch is the most runs one completion commits: the dispatcher's completeBatch.
const fleetCompleteBatch = 100

// completeBackoff is the first wait before a refused completion is tried again; it doubles up to 1 s.
const completeBackoff = 100 * time.Millisecond

// replica is one worker process of the fleet as the dispatcher runs it: its own pool, owner and
// queue, a notifier on a connection of its own, and its claim, take and complete loops.
type replica struct {
	owner    string
	pool     *pgxpool.Pool
	q        *store.Queue
	notifier *store.Notifier
	batch    int
	tally    *fleetTally
	poll     time.Duration // the claim and take loops' poll interval
	tolerant bool          // see replicaConfig.tolerant
	// listens says the replica listens for its admissions, as a dispatcher does unless it polls:
	// claims move its tickets straight to running and name them in its notifications, and it reads
	// them rather than take them.
	listens bool

	stopNotifier context.CancelFunc
	notifierDone sync.WaitGroup

	mu      sync.Mutex
	pending []store.Ticket // finished runs waiting for the completer
	// handed holds every ticket handed to the completer, kept after its completion: a read of the
	// owner's running tickets that began before a completion committed returns that ticket again, and
	// it must not run twice (the dispatcher's registry no longer finds a completed invocation, and
	// gives such a ticket back, which finds nothing); with what handed it first (see finished).
	handed map[int64]handedHow
	twice  error         // a claim or a take handed over a ticket again: the run fails with it
	wake   chan struct{} // cap 1: the completer has work
}

// replicaConfig is how a replica connects and behaves.
type replicaConfig struct {
	url, schema, owner string
	poolSize, batch    int
	tracer             pgx.QueryTracer
	tally              *fleetTally
	// listen is how its notifier listens (the zero value: on a connection hijacked from the pool).
	listen store.Listen
	// poll is the claim and take loops' poll interval. Defaults to pollEvery.
	poll time.Duration
	// tolerant makes the completer retry a completion that failed before reaching Postgres (a
	// connection refused, SQLSTATE 53300), where the main figure fails the run at once.
	tolerant bool
	// idle, when > 0, closes the pool's connections idle longer than that (checked every idle/2), so
	// that a replica between polls gives its connections back to a full server.
	idle time.Duration
}

// newReplica connects a replica's pool of poolSize connections to schema, starts its notifier (which
// hijacks one connection of the pool) and opens every connection of the pool, so that connecting is
// not part of the measured run.
func newReplica(ctx context.Context, c replicaConfig) (*replica, error) {
	r, err := openReplica(ctx, c)
	if err != nil {
		return nil, err
	}
	r.startNotifier(ctx)
	select {
	case <-r.notifier.Listening():
	case <-ctx.Done():
		r.close()
		return nil, ctx.Err()
	}
	if err := warm(ctx, r.pool); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// openReplica makes a replica without connecting: its pool opens connections as its loops need
// them, and its notifier does not run until startNotifier.
func openReplica(ctx context.Context, c replicaConfig) (*replica, error) {
	pool, err := fleetPool(ctx, c.url, c.poolSize, c.idle, "sluice-fleet", c.tracer)
	if err != nil {
		return nil, err
	}
	q, err := store.New(pool, store.Options{Schema: c.schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	logger := slog.New(&listenFailures{tally: c.tally})
	return &replica{owner: c.owner, pool: pool, q: q, notifier: q.NewNotifier(logger).WithListen(c.listen),
		batch: c.batch, tally: c.tally, poll: cmp.Or(c.poll, pollEvery), tolerant: c.tolerant, listens: !c.listen.Off,
		stopNotifier: func() {}, handed: map[int64]handedHow{}, wake: make(chan struct{}, 1)}, nil
}

// startNotifier runs the replica's notifier until close.
func (r *replica) startNotifier(ctx context.Context) {
	nctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stopNotifier = stop
	r.notifierDone.Go(func() { _ = r.notifier.Run(nctx) })
}

// fleetPool returns a pool of size connections, each tagged with application_name app so that the
// connection sampler counts the fleet's connections alone; idle, when > 0, is how long a connection
// may stay idle before the pool closes it.
func fleetPool(ctx context.Context, url string, size int, idle time.Duration, app string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.ConnConfig.Tracer = tracer
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = int32(size)
	if idle > 0 {
		cfg.MaxConnIdleTime, cfg.HealthCheckPeriod = idle, idle/2
	}
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
	if r.listens {
		// As the dispatcher's lease renewal says it, once at start. A tolerant replica that cannot
		// connect goes on unrecorded: claims then admit its tickets for its take, as for a poller.
		if _, err := r.q.RenewListening(ctx, r.owner, time.Hour, true); err != nil {
			if !r.tolerant || !refused(err) {
				return fmt.Errorf("%s: renew lease: %w", r.owner, err)
			}
			r.tally.fail("renew lease", err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { r.claimLoop(gctx); return nil })
	g.Go(func() error { r.takeLoop(gctx); return nil })
	g.Go(func() error { return r.completeLoop(gctx) })
	if err := g.Wait(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.twice // raised after the completer had ended
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
		res, err := r.q.Claim(ctx, store.ClaimParams{Max: r.batch, Owner: r.owner})
		next, onRelease := r.poll, res.WaitsOnRelease
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
		var own []store.Ticket
		for _, t := range res.Admitted {
			if t.State == store.TicketStateRunning && t.Owner == r.owner {
				own = append(own, t)
			}
		}
		r.finished(own, false)
		if next > 0 && !waiter.Wait(ctx, onRelease, next) {
			return
		}
	}
}

// finished hands runs that returned to the completer, never blocking the caller (the dispatcher's
// runs each wait in their own goroutine). read says ts came from a read of the owner's running
// tickets, which returns those under way, or completed since the read began, or that this replica's
// own claim has just moved to running and not yet handed over: a read hands over only what nothing
// handed before. A claim or a take moves each ticket it returns, so one that returns a ticket another
// claim or take handed over admitted it twice, and ends the run (completeLoop returns twice).
func (r *replica) finished(ts []store.Ticket, read bool) {
	if len(ts) == 0 {
		return
	}
	r.mu.Lock()
	for _, t := range ts {
		by, seen := r.handed[t.ID]
		switch {
		case !seen:
			r.handed[t.ID] = handedBy(read)
			r.pending = append(r.pending, t)
		case read:
		case by == handedByMove && r.twice == nil:
			r.twice = fmt.Errorf("%s: ticket %d was handed over twice by a claim or a take (admitted twice)", r.owner, t.ID)
		default:
			r.handed[t.ID] = handedByMove // a read handed it first; this is the move that admitted it
		}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// handedHow is what handed a ticket to the completer first.
type handedHow uint8

const (
	handedByRead handedHow = iota + 1 // a read of the owner's running tickets
	handedByMove                      // a claim or a take, which moved it
)

// handedBy is handedByRead for a read, handedByMove for a claim or a take.
func handedBy(read bool) handedHow {
	if read {
		return handedByRead
	}
	return handedByMove
}

// requeue puts runs whose completion failed back in front of the pending ones.
func (r *replica) requeue(ts []store.Ticket) {
	r.mu.Lock()
	r.pending = append(ts[:len(ts):len(ts)], r.pending...)
	r.mu.Unlock()
}

// next returns up to fleetCompleteBatch of the pending runs, removing them, and the error of a
// ticket handed over twice.
func (r *replica) next() ([]store.Ticket, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.pending), fleetCompleteBatch)
	batch := r.pending[:n:n]
	r.pending = r.pending[n:]
	return batch, r.twice
}

// completeLoop is the dispatcher's Completer, a group commit: it completes, in one CompleteMany, the
// runs that finished while the previous commit was under way, up to fleetCompleteBatch. When the
// fleet's last ticket commits it ends the run. A tolerant replica tries again, after a backoff of at
// most 1 s, a completion refused before it reached Postgres; any other failure ends the run.
func (r *replica) completeLoop(ctx context.Context) error {
	backoff := completeBackoff
	for {
		batch, twice := r.next()
		if twice != nil {
			return twice
		}
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
				continue
			}
		}
		ps := make([]store.CompleteParams, len(batch))
		for i, t := range batch {
			// The dispatcher's runner delivers an outcome to Temporal before it records it, and a
			// delivered outcome's completion deletes its ticket (CompleteParams.Delivered).
			ps[i] = store.CompleteParams{TicketID: t.ID, ActualCost: 90, OutcomeKind: store.OutcomeCompleted, Delivered: true}
		}
		found, err := r.q.CompleteMany(ctx, ps)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && r.tolerant && refused(err) {
			// Nothing reached Postgres: the runs go back to the front of the line, for the next try.
			r.tally.stats.failedCompletes.Add(1)
			r.tally.fail("complete", err)
			r.requeue(batch)
			if !sleepCtx(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: complete %d runs: %w", r.owner, len(ps), err)
		}
		backoff = completeBackoff
		// A ticket the completion did not find was not admitted or running: admitted twice and
		// completed by another batch, or lost. Counting it as done would hide both.
		for i, ok := range found {
			if !ok {
				return fmt.Errorf("%s: complete: ticket %d was not admitted or running when completed (admitted twice, or lost)", r.owner, ps[i].TicketID)
			}
		}
		r.tally.admitted(batch)
		if r.tally.done.Add(int64(len(ps))) >= r.tally.n {
			r.tally.end()
		}
	}
}
