package dispatcher

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/internal/store"
)

// enqueueBatch bounds the tickets one statement writes.
const enqueueBatch = 100

// errEnqueuerStopped answers a ticket the enqueuer stopped before writing: the worker is stopping,
// and Temporal retries the activity.
var errEnqueuerStopped = errors.New("sluice: the worker is stopping; the ticket was not written")

// enqueueRequest is one ticket waiting to be written.
type enqueueRequest struct {
	p    store.EnqueueParams
	done chan enqueueResult
}

type enqueueResult struct {
	t   store.Ticket
	err error
}

// Enqueuer writes the tickets of concurrent ExecuteActivity calls. Its loop is a group commit: the
// tickets that arrived while one statement was under way are written together by the next, up to
// enqueueBatch, in one transaction and one multi-row statement. A call returns only once its ticket
// is durable; a lone ticket is written at once.
//
// The transaction that writes the tickets also claims their lines (store.EnqueueClaiming): a ticket
// whose line has nothing ahead of it and whose limits have room is admitted by the commit that
// writes it, and the Enqueuer hands it to the Runner at once, as the Claimer does its own. The
// others wait in line for the claimers, which the commit wakes.
type Enqueuer struct {
	groupCommit[*enqueueRequest]
	*deps
	runner    ticketRunner
	deliverer recordedDeliverer
}

func newEnqueuer(dp *deps, runner ticketRunner, deliverer recordedDeliverer) *Enqueuer {
	e := &Enqueuer{deps: dp, runner: runner, deliverer: deliverer}
	e.groupCommit = groupCommit[*enqueueRequest]{max: enqueueBatch, commit: e.commit,
		refuse: func(r *enqueueRequest) { r.done <- enqueueResult{err: errEnqueuerStopped} }}
	return e
}

// Start starts the loop that writes tickets.
func (e *Enqueuer) Start(ctx context.Context) error { return e.startBatches(ctx) }

// Stop stops accepting tickets and ends the loop; a ticket it has not written is answered
// errEnqueuerStopped.
func (e *Enqueuer) Stop(ctx context.Context) error { return e.stopBatches(ctx) }

// Write writes p's ticket and returns it once it is durable, or why it was not written: p's own
// fault (store.ErrUnknownLimit, a validation error), the database's, or the enqueuer stopping.
func (e *Enqueuer) Write(ctx context.Context, p store.EnqueueParams) (store.Ticket, error) {
	req := &enqueueRequest{p: p, done: make(chan enqueueResult, 1)}
	if !e.send(ctx, req) {
		if err := ctx.Err(); err != nil {
			return store.Ticket{}, err
		}
		return store.Ticket{}, errEnqueuerStopped
	}
	// Once sent, the request is answered promptly (by the statement or by the stop); returning
	// before its answer would leave a ticket nobody holds.
	r := <-req.done
	return r.t, r.err
}

// commit writes batch in one statement and answers each request. A statement that fails for good is
// retried in parts, so that the ticket at fault is refused alone and the others are written (isolate).
// A failure whose commit's outcome is unknown asks for a self-check: a ticket written while its caller
// heard an error is then handed back, and one admitted to running is run, or handed back once its
// caller has let its invocation go.
func (e *Enqueuer) commit(ctx context.Context, batch []*enqueueRequest) {
	isolate(batch, func(part []*enqueueRequest) error {
		ps := make([]store.EnqueueParams, len(part))
		for i, r := range part {
			ps[i] = r.p
		}
		ts, errs, res, err := e.q.EnqueueClaiming(ctx, ps, store.ClaimParams{Max: len(ps), Owner: e.cfg.Owner, MinRemaining: e.cfg.MinRemaining})
		if err != nil && permanent(err) {
			// Postgres refused the statement: the tickets' fault, or the claim's. Written without
			// the claim, the tickets wait for the claimers; a fault of theirs fails again, and
			// isolate finds it.
			e.log.Warn("sluice: enqueue with claim; writing the tickets without it", "error", err)
			ts, errs, err = e.q.EnqueueEach(ctx, ps)
			res = store.ClaimResult{}
		}
		if err != nil {
			return err
		}
		for i, r := range part {
			r.done <- enqueueResult{t: ts[i], err: errs[i]}
		}
		actOnClaim(ctx, e.deps, e.runner, e.deliverer, res)
		return nil
	}, func(part []*enqueueRequest, err error) {
		for _, r := range part {
			r.done <- enqueueResult{err: err}
		}
		e.checkSoon()
	})
}
