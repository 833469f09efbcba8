package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/throttle"
)

// Runner runs this owner's admitted tickets: its loop takes them as their admission is notified (and
// every PollInterval), and each runs its held invocation in a goroutine the Runner tracks. A finished
// run's outcome is delivered (the Deliverer), then recorded with its usage (the Completer); a run the
// provider refused is requeued.
type Runner struct {
	loops
	*deps
	recorder  outcomeRecorder
	deliverer outcomeDeliverer
	heartbeat heartbeatSender
	notifier  subscriber

	// testHookRequeued, when set, is called once a requeue's statement has returned: tests use it to
	// have the ticket admitted again at that point.
	testHookRequeued func(store.Ticket)
	// testHookLookedUp, when set, is called once run has found a ticket's invocation, before it
	// begins the run: tests use it to act on the invocation in that window.
	testHookLookedUp func(store.Ticket, *Invocation)

	mu   sync.Mutex
	runs int
	idle chan struct{} // closed when runs drops to 0; nil while it is 0
}

// outcomeRecorder records a finished run's outcome in Postgres, releasing its reservation, and
// reports whether it did: the Completer.
type outcomeRecorder interface {
	Record(ctx context.Context, t store.Ticket, rep runReport, delivered bool) bool
}

// outcomeDeliverer reports a finished run's outcome to Temporal and says whether Temporal has it: the
// Deliverer.
type outcomeDeliverer interface {
	Deliver(ctx context.Context, t store.Ticket) error
}

// recordedDeliverer reports a recorded outcome (a claim's refusal) to Temporal and acknowledges it:
// the Deliverer.
type recordedDeliverer interface {
	DeliverAndAck(ctx context.Context, t store.Ticket)
}

// heartbeatSender sends one heartbeat of an invocation with its latest details: the Heartbeater.
type heartbeatSender interface {
	Send(ctx context.Context, inv *Invocation)
}

// subscriber wakes a subscriber on a topic's notifications, and tells an owner the tickets they named:
// the dispatcher's store.Notifier.
type subscriber interface {
	Subscribe(topic store.Topic) (<-chan struct{}, func())
	NotifiedIDs(owner string) (ids []int64, missed, woken bool)
}

// Start starts the loop that takes admitted tickets.
func (r *Runner) Start(ctx context.Context) error { return r.start(ctx, r.loop) }

// Stop ends the take loop. Runs under way are not waited for: Drain does that.
func (r *Runner) Stop(ctx context.Context) error { return r.stop(ctx) }

func (r *Runner) loop(ctx context.Context) {
	admitted, unsubscribe := r.notifier.Subscribe(store.TopicAdmitted(r.cfg.Owner))
	defer unsubscribe()
	r.takeLoop(ctx, admitted, "take admitted tickets", r.take, func(_ context.Context, t store.Ticket) { r.run(t) })
}

// take returns this owner's tickets to run: those claims moved straight to running and named in its
// notifications, read (all of its running ones when some may have been missed: run skips those under
// way); then up to n admitted ones, taken (admitted by a claimer that did not see this owner
// listening, or of an older release), unless every notification since the last round named its
// tickets. A round that no notification started (the poll) takes.
func (r *Runner) take(ctx context.Context, n int) ([]store.Ticket, error) {
	var ts []store.Ticket
	ids, missed, woken := r.notifier.NotifiedIDs(r.cfg.Owner)
	if missed || len(ids) > 0 {
		if missed {
			ids = nil
		}
		read, err := r.q.RunningTickets(ctx, r.cfg.Owner, ids)
		if err != nil {
			r.checkSoon() // the self-check runs what this read did not
			return nil, err
		}
		ts = read
		if !woken {
			return ts, nil
		}
	}
	taken, err := r.q.TakeAdmitted(ctx, r.cfg.Owner, n)
	if err != nil {
		r.checkSoon() // a take whose answer was lost left its tickets running: the self-check runs them
	}
	return append(ts, taken...), err
}

// Drain waits for the runs under way to end. If they have not within timeout, it cancels them (their
// outcome is a hand-back) and waits until ctx is done for them to return; it reports whether they all
// did.
func (r *Runner) Drain(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.idleCh():
		return true
	case <-t.C:
	}
	for _, inv := range r.reg.snapshot() {
		inv.cancelRun(errStopping)
	}
	select {
	case <-r.idleCh():
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) idleCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return r.idle
}

func (r *Runner) track(delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs += delta
	switch {
	case r.runs == 1 && delta > 0:
		r.idle = make(chan struct{})
	case r.runs == 0:
		close(r.idle)
		r.idle = nil
	}
}

// run runs an admitted ticket's invocation in its own goroutine.
func (r *Runner) run(t store.Ticket) {
	inv := r.reg.lookup(ticketKey(t))
	if inv == nil {
		// This process no longer holds the invocation (Temporal timed it out and it was swept): give
		// the ticket back so that its reservation is released and Temporal retries it.
		r.release(t)
		return
	}
	if r.testHookLookedUp != nil {
		r.testHookLookedUp(t, inv)
	}
	runCtx, cancel := inv.runContext(runHandle{r: r, inv: inv})
	switch inv.tryBegin(t, cancel, time.Now()) {
	case runAlready:
		cancel(nil) // this admission runs already: handed over twice (see tryBegin)
		return
	case runAbandoned:
		// Let go since the lookup (Temporal no longer knows the activity, or it was swept): as if
		// not found, the ticket goes back before anything runs.
		cancel(nil)
		r.release(t)
		return
	}
	runCtx, span := r.tm.StartRun(runCtx, t)
	r.track(1)
	go func() {
		defer r.track(-1)
		defer cancel(nil)
		r.finish(runCtx, inv, t, span)
	}()
}

// release gives back ticket t, which nothing will run: completed as handed back, it never started,
// so its reservation comes back whole.
func (r *Runner) release(t store.Ticket) {
	err := r.q.Complete(r.life, store.CompleteParams{TicketID: t.ID, ActualCost: admit.AbandonedCost(false), OutcomeKind: store.OutcomeHandedBack})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		r.log.Warn("sluice: release ticket without invocation", "ticket_id", t.ID, "error", err)
	}
}

// finish runs the activity and hands what it returned on: a refused call is requeued, anything else
// is completed.
func (r *Runner) finish(ctx context.Context, inv *Invocation, t store.Ticket, span trace.Span) {
	result, err := inv.execute(ctx)
	rep := inv.finish()
	if !rep.limited.IsZero() && errors.Is(err, admission.ErrRefused) && ctx.Err() == nil {
		r.tm.ForKey(inv.Line()).Counter(telemetry.MetricRateLimited).Inc(1)
		r.tm.EndRun(span, t, rep.actual, "rate_limited", err)
		r.requeue(inv, t, rep)
		return
	}
	t.OutcomeKind, t.Outcome = r.enc.outcome(ctx, result, err)
	r.tm.EndRun(span, t, rep.actual, t.OutcomeKind, err)
	if t.OutcomeKind == store.OutcomeFailed && inv.hasPendingDetails() {
		// Details recorded just before a failure are what the retry resumes from: send them
		// before the failure, as the SDK does.
		r.heartbeat.Send(r.life, inv)
	}
	if r.life.Err() != nil {
		// A run that ignored the stop's cancellation, ending after the dispatcher stopped: its
		// ticket was handed back, and Temporal has retried it or will.
		r.log.Warn("sluice: run ended after the worker stopped; its result is dropped", "ticket_id", t.ID)
		r.reg.drop(inv)
		return
	}
	// Temporal hears the outcome first, and the completion that follows releases the reservation
	// and deletes the ticket: one write, where recording the outcome for delivery and deleting it
	// once delivered took two, and the workflow hears the result a commit sooner. An outcome
	// Temporal did not take is recorded for the delivery loop. The invocation is held until the
	// completion returns, so that the self-check takes the run as this process's meanwhile; should
	// the process die between the two, its running ticket is handed back once its lease lapses
	// (the reservation then stands as spent), and Temporal answers that hand-back NotFound.
	delivered := r.deliverer.Deliver(r.life, t) == nil
	r.recorder.Record(r.life, t, rep, delivered)
	r.reg.drop(inv)
}

// requeue puts a run the provider refused (a 429 reported through sluiceactivity.RateLimited) back
// in line at its place, pausing its line's limit until the provider's reset on every replica. The
// invocation stays held: when admitted again it runs again, in the same Temporal attempt.
func (r *Runner) requeue(inv *Invocation, t store.Ticket, rep runReport) {
	actual, output := admit.RefusedCost(rep.actual, rep.observed), rep.output
	if actual != rep.actual {
		output = 0 // not the reported usage: none (0) or the reservation as spent (-1)
	}
	// Queued in memory first: once the requeue commits, a claim may admit the ticket again at once.
	inv.requeued(time.Now())
	err := r.q.Requeue(r.life, store.RequeueParams{TicketID: t.ID, NotBefore: rep.limited,
		ActualCost: actual, ActualOutput: output, PauseKeys: []string{inv.Line()}, PauseUntil: rep.limited})
	if r.testHookRequeued != nil {
		r.testHookRequeued(t)
	}
	if err != nil {
		// The ticket may still be running (the requeue failed) or back in line (its commit's answer
		// was lost): either way, without its invocation, the self-check or the next admission
		// hands it back to Temporal, which retries the activity. Back in line, it may have been
		// admitted again and its invocation looked up already: letGo refuses that run's begin (the
		// runner hands the ticket back), or leaves a run that began first to hold its ticket.
		r.log.Error("sluice: requeue rate-limited run", "ticket_id", t.ID, "error", err)
		r.reg.letGo(inv)
		r.checkSoon()
	}
}

// runHandle is the admission.Run that sluiceactivity reaches through the run's context.
type runHandle struct {
	r   *Runner
	inv *Invocation
}

var _ admission.Run = runHandle{}

func (h runHandle) Facts() admission.Facts { return h.inv.admissionFacts() }
func (h runHandle) ReportUsage(used throttle.Cost) {
	// Priced by the route's model, if it names one: NewPlugin refused a model the price table lacks,
	// so an error here leaves the money unknown (the reservation stands).
	money, _ := h.price("", throttle.Usage{Input: used.Input, Output: used.Output})
	h.inv.reportUsage(used, money)
}

func (h runHandle) ReportModelUsage(model string, u throttle.Usage) error {
	money, err := h.price(model, u)
	if err != nil {
		return err
	}
	h.inv.reportUsage(throttle.Cost{Input: u.Input, Output: u.Output}, money)
	return nil
}

// price is what u cost on model (empty: the route's) by the price table; 0, not known, when neither
// names a model.
func (h runHandle) price(model string, u throttle.Usage) (int64, error) {
	model = cmp.Or(model, h.inv.model)
	switch {
	case model == "":
		return 0, nil
	case h.r.cfg.Prices == nil:
		return 0, fmt.Errorf("no price table (sluiceinterceptor.Options.Prices) prices model %q", model)
	}
	return h.r.cfg.Prices.Cost(model, u)
}
func (h runHandle) RateLimited(until time.Time) { h.inv.rateLimited(until) }

func (h runHandle) ObserveHeaders(ctx context.Context, hdr http.Header) error {
	info := throttle.ParseRateLimitHeaders(hdr, time.Now())
	h.inv.observe()
	return h.r.q.Observe(context.WithoutCancel(ctx), h.inv.Line(), info)
}
