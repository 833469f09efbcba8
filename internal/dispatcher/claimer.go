package dispatcher

import (
	"context"

	"github.com/sluicehq/sluice/internal/store"
)

// Claimer admits queued tickets of every owner: it runs the throttled dequeue whenever work is
// notified, when completions make room that its last claim left tickets waiting for, when the
// earliest blocked line can admit again, and every PollInterval. The tickets of
// this process it admits it hands to the Runner at once; other owners' wait for their own take.
type Claimer struct {
	loops
	*deps
	notifier  claimWaiters
	runner    ticketRunner
	deliverer recordedDeliverer
}

// claimWaiters gives a claimer what it waits on between claims: the dispatcher's store.Notifier.
type claimWaiters interface {
	ClaimWaiter() *store.ClaimWaiter
}

// ticketRunner runs an admitted ticket of this owner, already running in Postgres, in a goroutine
// of its own: the Runner, for the Claimer and the SelfChecker.
type ticketRunner interface {
	run(t store.Ticket)
}

// Start starts the claim loop.
func (c *Claimer) Start(ctx context.Context) error { return c.start(ctx, c.loop) }

// Stop ends the claim loop; a claim under way is rolled back.
func (c *Claimer) Stop(ctx context.Context) error { return c.stop(ctx) }

func (c *Claimer) loop(ctx context.Context) {
	waiter := c.notifier.ClaimWaiter()
	defer waiter.Close()
	for {
		res, err := c.q.Claim(ctx, store.ClaimParams{Max: c.cfg.ClaimBatch, MinRemaining: c.cfg.MinRemaining, Owner: c.cfg.Owner})
		next, onRelease := c.cfg.PollInterval, res.WaitsOnRelease
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.log.Warn("sluice: claim", "error", err)
			onRelease = true
			// A claim that failed after its COMMIT was sent may have admitted this process's
			// tickets to running: the self-check finds them and runs them.
			c.checkSoon()
		case len(res.Admitted) == c.cfg.ClaimBatch || res.More:
			next = 0
		case !res.RetryAt.IsZero():
			next = min(next, max(0, res.RetryAt.Sub(res.Now)))
		}
		actOnClaim(ctx, c.deps, c.runner, c.deliverer, res)
		if next > 0 && !waiter.Wait(ctx, onRelease, next) {
			return
		}
	}
}

// actOnClaim acts on what a claim decided, the Claimer's or an enqueue's own (Enqueuer): this
// process's tickets it admitted run at once, every admission is counted, expired tickets' invocations
// are dropped and refusals are delivered.
func actOnClaim(ctx context.Context, dp *deps, runner ticketRunner, deliverer recordedDeliverer, res store.ClaimResult) {
	for _, t := range res.Admitted {
		dp.tm.Admitted(t, res.QueueDepth[t.LineKey], dp.cfg.Owner)
		if t.State == store.TicketStateRunning && t.Owner == dp.cfg.Owner {
			runner.run(t) // this process's own: the claim took it, no take or notification
		}
	}
	for _, t := range res.Expired {
		dp.reg.dropTicket(t, errActivityGone) // Temporal has timed the attempt out; there is nothing to report
	}
	for _, t := range res.Refused {
		// A spent allowance: the claim finished the ticket with its refusal. Fail the activity
		// at once (another replica's delivery loop retries if this fails); its owner, if not
		// this process, forgets the invocation at its next sweep (Forgetter).
		dp.tm.Refused(t)
		dp.reg.dropTicket(t, errActivityGone) // the refusal is the attempt's outcome
		deliverer.DeliverAndAck(ctx, t)
	}
}
