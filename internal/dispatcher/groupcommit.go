package dispatcher

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// groupCommit is the loop of a service that writes in batches: callers send requests, and the loop
// commits, in one go, the requests that arrived while it committed the previous batch, up to max.
// Nothing waits for a batch to fill, so a lone request costs no more latency than before, and under
// load the batches grow by themselves. Every request sent is answered: by commit, or by refuse once
// the service stops.
type groupCommit[R any] struct {
	loops
	max    int
	commit func(ctx context.Context, batch []R) // answers every request of batch
	refuse func(R)                              // answers a request left when the loop stops

	mu        sync.RWMutex // held for reading while sending, for writing to stop accepting
	in        chan R
	accepting bool
}

// startBatches starts the loop.
func (g *groupCommit[R]) startBatches(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.in == nil {
		g.in = make(chan R, g.max)
	}
	if err := g.start(ctx, g.loop); err != nil {
		return err
	}
	g.accepting = true
	return nil
}

// stopBatches stops accepting requests, ends the loop, and refuses what it left.
func (g *groupCommit[R]) stopBatches(ctx context.Context) error {
	g.mu.Lock()
	g.accepting = false
	g.mu.Unlock()
	return g.stop(ctx)
}

// send hands r to the loop, waiting while a full batch is queued, and reports whether it did: not
// when the service is stopped or ctx is done first. A request sent is answered.
func (g *groupCommit[R]) send(ctx context.Context, r R) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.accepting {
		return false
	}
	select {
	case g.in <- r:
		return true
	case <-ctx.Done():
		return false
	}
}

// queued returns how many requests wait for the next batch.
func (g *groupCommit[R]) queued() int { return len(g.in) }

func (g *groupCommit[R]) loop(ctx context.Context) {
	for {
		var first R
		select {
		case <-ctx.Done():
			// Stop has ended the sends: what is left is all there will be.
			for {
				select {
				case r := <-g.in:
					g.refuse(r)
				default:
					return
				}
			}
		case first = <-g.in:
		}
		batch := []R{first}
	more:
		for len(batch) < g.max {
			select {
			case r := <-g.in:
				batch = append(batch, r)
			default:
				break more
			}
		}
		g.commit(ctx, batch)
	}
}

// isolate commits batch with try, which answers the requests of a batch it commits. When try fails
// with an error that retrying cannot cure (permanent) and the batch holds more than one request, the
// fault may be one request's: each half is committed apart, down to the request at fault, which fail
// answers alone while the rest commit. Any other failure is the whole batch's.
func isolate[R any](batch []R, try func([]R) error, fail func([]R, error)) {
	err := try(batch)
	switch {
	case err == nil:
	case permanent(err) && len(batch) > 1:
		mid := len(batch) / 2
		isolate(batch[:mid], try, fail)
		isolate(batch[mid:], try, fail)
	default:
		fail(batch, err)
	}
}

// permanent reports whether err is one that retrying the same statement cannot cure: Postgres refused
// what the statement asked (a constraint, bad data, a check of Sluice's own, SQLSTATE SL001). A
// broken connection, a timeout, a commit whose outcome is unknown, and Postgres's transient classes
// (08 connection, 40 rollback, 53 resources, 55 lock not available, 57 operator intervention such as
// a shutdown, 58 and XX system errors) are not.
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "40", "53", "55", "57", "58", "XX":
		return false
	}
	return true
}
