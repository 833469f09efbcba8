package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// completeRetryFor bounds how long a finished run keeps trying to record its outcome while the
// database is unreachable. Past it, Temporal's timeouts take over.
const completeRetryFor = 2 * time.Minute

// completeBatch bounds the runs one transaction completes.
const completeBatch = 100

// errCompleterStopped answers a completion the completer stopped before recording.
var errCompleterStopped = errors.New("sluice: completer stopped")

// completion is one finished run waiting for its outcome to be recorded.
type completion struct {
	p    store.CompleteParams
	done chan error // receives nil, store.ErrNotFound, or why it was not recorded
}

// Completer completes finished runs in Postgres, releasing their reservations: the second step of a
// completion, once the runner has had the Deliverer report the outcome. A run whose outcome Temporal
// took is deleted; one whose outcome it did not take is recorded for the delivery loop. Its loop is a
// group commit: the runs that finished while one transaction was under way are completed together by
// the next, up to completeBatch, so that each limit row is locked once for all of them and claimers
// are woken once. A run's Record returns only once its completion is durable.
type Completer struct {
	groupCommit[*completion]
	*deps
}

func newCompleter(dp *deps) *Completer {
	c := &Completer{deps: dp}
	c.groupCommit = groupCommit[*completion]{max: completeBatch, commit: c.commit,
		refuse: func(req *completion) { req.done <- errCompleterStopped }}
	return c
}

// Start starts the loop that records outcomes.
func (c *Completer) Start(ctx context.Context) error { return c.startBatches(ctx) }

// Stop stops accepting completions, ends the retries of those under way (an outcome not yet recorded
// stays with its ticket, which the stop hands back) and ends the loop.
func (c *Completer) Stop(ctx context.Context) error { return c.stopBatches(ctx) }

// Record records a finished run's outcome, releasing its reservation, and reports whether it did.
// While the database is unreachable the completer retries with backoff, for up to completeRetryFor,
// or until it stops: until the outcome is recorded the ticket holds its reservation, and the outcome
// exists only in this process.
func (c *Completer) Record(ctx context.Context, t store.Ticket, rep runReport, delivered bool) bool {
	req := &completion{done: make(chan error, 1),
		p: store.CompleteParams{TicketID: t.ID, ActualCost: rep.actual, ActualOutput: rep.output, ActualMoney: rep.money,
			OutcomeKind: t.OutcomeKind, Outcome: t.Outcome, Delivered: delivered}}
	if !c.send(ctx, req) {
		return false
	}
	switch err := <-req.done; {
	case errors.Is(err, store.ErrNotFound):
		// Handed back while it ran (this process lost its lease, or stopped): Temporal already has
		// a failure.
		return false
	case err != nil:
		c.log.Error("sluice: record outcome", "ticket_id", t.ID, "error", err)
		return false
	}
	return true
}

// commit completes batch, answering each completion. A ticket given twice is answered at once, its
// first completion going on; the rest are completed in one transaction, or, when that fails for good,
// in parts, so that the completion at fault is answered alone and the others are recorded (isolate).
// While the database fails, each transaction is retried with backoff, for up to completeRetryFor.
func (c *Completer) commit(ctx context.Context, batch []*completion) {
	seen := make(map[int64]bool, len(batch))
	unique := make([]*completion, 0, len(batch))
	for _, req := range batch {
		if seen[req.p.TicketID] {
			req.done <- fmt.Errorf("sluice: ticket %d was completed twice in one batch; the first completion stands", req.p.TicketID)
			continue
		}
		seen[req.p.TicketID] = true
		unique = append(unique, req)
	}
	deadline := time.Now().Add(completeRetryFor)
	isolate(unique, func(part []*completion) error { return c.commitRetrying(ctx, part, deadline) },
		func(part []*completion, err error) {
			for _, req := range part {
				req.done <- err
			}
			// The outcome of what failed may still be unknown: the self-check settles it.
			c.checkSoon()
		})
}

// commitRetrying completes batch in one transaction, retrying with backoff while the database fails
// in a way that may pass, until deadline or the stop; it answers each completion when it commits.
func (c *Completer) commitRetrying(ctx context.Context, batch []*completion, deadline time.Time) error {
	ps := make([]store.CompleteParams, len(batch))
	for i, req := range batch {
		ps[i] = req.p
	}
	backoff := 100 * time.Millisecond
	for {
		found, err := c.q.CompleteMany(ctx, ps)
		if err == nil {
			for i, req := range batch {
				if found[i] {
					req.done <- nil
				} else {
					req.done <- store.ErrNotFound
				}
			}
			return nil
		}
		if permanent(err) || time.Now().After(deadline) || !wait(ctx, nil, backoff) {
			return err
		}
		c.log.Warn("sluice: record outcomes; retrying", "runs", len(batch), "error", err, "backoff", backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}
