package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

// completeRetryFor bounds how long a finished run keeps trying to record its outcome while the
// database is unreachable. Past it, Temporal's timeouts take over.
const completeRetryFor = 2 * time.Minute

// Completer records finished runs' outcomes in Postgres, releasing their reservations, the first
// step of a completion (the runner then has the Deliverer report them). It starts no goroutine of its own: it runs on the goroutine of the run that
// finished, and Stop ends the retries of every completion under way.
type Completer struct {
	*deps

	mu      sync.Mutex
	stopped chan struct{} // closed by Stop; nil before Start
}

// Start makes the completer accept completions.
func (c *Completer) Start(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped != nil {
		return errStarted
	}
	c.stopped = make(chan struct{})
	return nil
}

// Stop ends the retries of completions under way: an outcome not yet recorded stays with its
// ticket, which the stop hands back.
func (c *Completer) Stop(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped != nil {
		close(c.stopped)
		c.stopped = nil
	}
	return nil
}

// done returns a channel closed once the completer is stopped.
func (c *Completer) done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.stopped
}

// Record records a finished run's outcome, releasing its reservation, and reports whether it did.
// While the database is unreachable it retries with backoff, for up to completeRetryFor, or until
// ctx is done or the completer stops: until the outcome is recorded the ticket holds its
// reservation, and the outcome exists only in this process.
func (c *Completer) Record(ctx context.Context, t engine.Ticket, actual int64) bool {
	err := c.record(ctx, engine.CompleteParams{TicketID: t.ID, ActualCost: actual, OutcomeKind: t.OutcomeKind, Outcome: t.Outcome})
	switch {
	case errors.Is(err, engine.ErrNotFound):
		// Handed back while it ran (this process lost its lease, or stopped): Temporal already has
		// a failure.
		return false
	case err != nil:
		c.log.Error("sluice: record outcome", "ticket_id", t.ID, "error", err)
		return false
	}
	return true
}

func (c *Completer) record(ctx context.Context, p engine.CompleteParams) error {
	stopped := c.done()
	deadline := time.Now().Add(completeRetryFor)
	backoff := 100 * time.Millisecond
	for {
		err := c.q.Complete(ctx, p)
		if err == nil || errors.Is(err, engine.ErrNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		c.log.Warn("sluice: record outcome; retrying", "ticket_id", p.TicketID, "error", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-stopped:
			t.Stop()
			return err
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
