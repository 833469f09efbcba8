package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/store"
)

// heartbeatParallelism bounds the heartbeat RPCs in flight from one process.
const heartbeatParallelism = 32

// msgHeartbeatFailed is the warning for a heartbeat Temporal did not take for a reason Sluice does
// not act on.
const msgHeartbeatFailed = "sluice: heartbeat"

// heartbeatRPCTimeout bounds one heartbeat RPC.
const heartbeatRPCTimeout = 10 * time.Second

// Heartbeater heartbeats the invocations this process holds: queued ones every HeartbeatInterval (at
// least every 0.8 x their HeartbeatTimeout), running ones only to flush details their activity
// recorded. Temporal's answer is how a cancellation, a pause, a reset or a timeout reaches a held
// invocation: Heartbeater then interrupts it.
type Heartbeater struct {
	loops
	*deps
	reporter outcomeReporter
}

// outcomeReporter reports an outcome to Temporal, with no row to acknowledge: the Deliverer.
type outcomeReporter interface {
	deliver(ctx context.Context, t store.Ticket) error
}

// Start starts the heartbeat loop.
func (h *Heartbeater) Start(ctx context.Context) error { return h.start(ctx, h.loop) }

// Stop ends the heartbeat loop.
func (h *Heartbeater) Stop(ctx context.Context) error { return h.stop(ctx) }

func (h *Heartbeater) loop(ctx context.Context) {
	every(ctx, min(250*time.Millisecond, h.cfg.HeartbeatInterval/2), func() { h.sendDue(ctx, time.Now()) })
}

// sendDue sends the heartbeats due at now in parallel, a bounded number at a time, so that the
// interval between two heartbeats of one ticket does not grow with the number of tickets held.
func (h *Heartbeater) sendDue(ctx context.Context, now time.Time) {
	sem := make(chan struct{}, heartbeatParallelism)
	var wg sync.WaitGroup
	for _, inv := range h.reg.snapshot() {
		if ctx.Err() != nil { // stopping: the rest would fail at once
			break
		}
		if !inv.heartbeatDue(now, h.cfg.HeartbeatInterval) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h.Send(ctx, inv)
		})
	}
	wg.Wait()
}

// RecordDetails keeps the details an activity run by Sluice heartbeats with and sends them when due
// (at most every second, or half the HeartbeatTimeout); the loop sends the rest.
func (h *Heartbeater) RecordDetails(inv *Invocation, details []any) {
	if inv.recordDetails(details, time.Now()) {
		h.Send(h.life, inv)
	}
}

// Send sends one heartbeat for inv with its latest details and acts on Temporal's answer. A heartbeat
// cut short by ctx (the loop stopping) or by the dispatcher's stop is not worth a warning: a stop
// holding thousands of queued tickets would log one per ticket.
func (h *Heartbeater) Send(parent context.Context, inv *Invocation) {
	details := inv.takeDetails(time.Now())
	ctx, cancel := context.WithTimeout(parent, heartbeatRPCTimeout)
	defer cancel()
	err := h.cfg.Client.RecordActivityHeartbeat(ctx, inv.taskToken(), details...)
	if err == nil {
		return
	}
	var cause error
	var canceled *temporal.CanceledError
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &canceled):
		cause = errCancelRequested
	case errors.Is(err, activity.ErrActivityPaused), errors.Is(err, activity.ErrActivityReset):
		cause = err
	case errors.As(err, &notFound):
		cause = errActivityGone
	default:
		if parent.Err() == nil && h.life.Err() == nil { // not a stop cutting the RPC short
			h.log.Warn(msgHeartbeatFailed, "activity", inv.Key(), "error", err)
		}
		return
	}
	h.interrupt(inv, cause)
}

// interrupt ends an invocation Temporal no longer wants: a queued one is removed and reported, a
// running one has its context cancelled with cause and reports what the activity returns.
//
// A gate's permit (OutlivesAttempt) is the exception once its run has begun: the run completes the
// activity itself and hears Temporal's answer there, so a NotFound or a cancellation that a heartbeat
// sent just before (the ticket still queued) brings back must not end the hold.
func (h *Heartbeater) interrupt(inv *Invocation, cause error) {
	id, running, cancel := inv.state()
	if running {
		if !inv.outlives {
			cancel(cause)
		}
		return
	}
	if id == 0 {
		return // the ticket is being written; the next heartbeat acts
	}
	err := h.q.Cancel(h.life, id)
	switch {
	case errors.Is(err, store.ErrNotFound) && inv.outlives:
		// Admitted meanwhile: a run that began holds on (see above); one not begun is refused, and
		// the runner hands the ticket back.
		h.reg.letGo(inv)
		return
	case errors.Is(err, store.ErrNotFound):
		// Either admitted and taken meanwhile (the run is starting: cancel it), or the ticket is gone
		// (handed back by a survivor while this process had lost its lease): if Temporal no longer
		// knows the activity either, nothing will ever run it here, so let it go. The runner may
		// have taken the ticket and looked the invocation up without beginning the run: letGo
		// decides atomically with the begin, which it refuses from then on (the runner then hands
		// the ticket back), or reports the run that began first, which is cancelled instead.
		if cause != errActivityGone {
			inv.cancelRun(cause)
			return
		}
		if cancel, running := h.reg.letGo(inv); running {
			cancel(cause)
		}
		return
	case err != nil:
		h.log.Warn("sluice: remove cancelled ticket", "ticket_id", id, "error", err)
		return
	}
	h.reg.drop(inv)
	if cause == errActivityGone {
		return
	}
	kind, outcome := h.enc.outcome(h.life, nil, cause)
	if cause == errCancelRequested {
		kind, outcome = store.OutcomeCanceled, nil
	}
	if err := h.reporter.deliver(h.life, inv.outcomeTicket(id, kind, outcome)); err != nil {
		h.log.Warn("sluice: report cancelled activity", "ticket_id", id, "error", err)
	}
}
