package interceptor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/pgqueue"
)

// Causes of a run context's cancellation.
var (
	errCancelRequested = errors.New("sluice: Temporal requested cancellation")
	errActivityGone    = errors.New("sluice: Temporal no longer knows the activity")
	errStopping        = errors.New("sluice: worker stopped before the activity finished")
)

// runtime is the dispatcher of one Plugin: the invocations it holds and the loops that claim, run,
// heartbeat and deliver them.
type runtime struct {
	opts  Options
	q     *engine.Queue
	owner string
	slots chan struct{}

	mu   sync.Mutex
	held map[string]*invocation

	stopTimeout atomic.Int64
	stopping    atomic.Bool
	running     sync.WaitGroup // runs in progress
	loops       sync.WaitGroup
	cancel      context.CancelFunc
	notifier    *engine.Notifier
	tm          telemetry
	keys        []string // every limit key the routes name, for the gauges
	knownKeys   sync.Map // derived limit keys this process has made sure exist
}

func newRuntime(opts Options, q *engine.Queue, owner string) *runtime {
	rt := &runtime{opts: opts, q: q, owner: owner, slots: make(chan struct{}, opts.MaxHeld), held: map[string]*invocation{}, tm: newTelemetry(opts)}
	seen := map[string]bool{}
	for _, r := range opts.Routes {
		for _, k := range r.Limits {
			if !seen[k] {
				seen[k] = true
				rt.keys = append(rt.keys, k)
			}
		}
	}
	return rt
}

func (rt *runtime) setStopTimeout(d time.Duration) { rt.stopTimeout.Store(int64(d)) }

func (rt *runtime) hold(inv *invocation) {
	rt.mu.Lock()
	rt.held[inv.key] = inv
	rt.mu.Unlock()
}

// drop forgets an invocation and frees its slot; it is safe to call twice.
func (rt *runtime) drop(inv *invocation) {
	rt.mu.Lock()
	_, ok := rt.held[inv.key]
	if ok && rt.held[inv.key] == inv {
		delete(rt.held, inv.key)
	} else {
		ok = false
	}
	rt.mu.Unlock()
	if ok {
		<-rt.slots
	}
}

func (rt *runtime) lookup(key string) *invocation {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.held[key]
}

func (rt *runtime) snapshot() []*invocation {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]*invocation, 0, len(rt.held))
	for _, inv := range rt.held {
		out = append(out, inv)
	}
	return out
}

func (rt *runtime) start(ctx context.Context) error {
	if _, err := pgqueue.Migrate(ctx, rt.opts.Pool, pgqueue.MigrateOptions{Schema: rt.opts.Schema}); err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	if len(rt.opts.Limits) > 0 {
		if err := rt.q.UpsertLimits(ctx, rt.opts.Limits...); err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
	}
	for name, r := range rt.opts.Routes {
		for _, k := range r.Limits {
			if _, err := rt.q.Limit(ctx, k); err != nil {
				return fmt.Errorf("sluice: Options.Routes[%q]: limit %q is neither in Options.Limits nor in the database", name, k)
			}
		}
	}
	if err := rt.q.RenewLease(ctx, rt.owner, rt.opts.LeaseTTL); err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	rt.stopping.Store(false)
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt.cancel = cancel
	rt.notifier = rt.q.NewNotifier(rt.opts.Logger)
	for _, loop := range []func(context.Context){
		func(ctx context.Context) { _ = rt.notifier.Run(ctx) },
		rt.claimLoop, rt.ownerLoop, rt.renewLoop, rt.leaseLoop, rt.heartbeatLoop, rt.deliveryLoop,
	} {
		rt.loops.Go(func() { loop(lctx) })
	}
	return nil
}

// stop hands the queued tickets back at once, gives running ones the worker's stop timeout, hands
// back what is left, and ends the loops.
func (rt *runtime) stop(ctx context.Context) {
	rt.stopping.Store(true)
	bg := context.WithoutCancel(ctx)
	rt.handBackOwn(bg, true)
	done := make(chan struct{})
	go func() { rt.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Duration(rt.stopTimeout.Load())):
		for _, inv := range rt.snapshot() {
			inv.mu.Lock()
			if inv.cancel != nil {
				inv.cancel(errStopping)
			}
			inv.mu.Unlock()
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			rt.opts.Logger.Warn("sluice: activities ignored cancellation at worker stop; their tickets are handed back")
		}
	}
	rt.handBackOwn(bg, false)
	if rt.cancel != nil {
		rt.cancel()
	}
	rt.loops.Wait()
	if err := rt.q.DropLease(bg, rt.owner); err != nil {
		rt.opts.Logger.Warn("sluice: drop lease", "owner", rt.owner, "error", err)
	}
}

// handBackOwn hands this owner's unfinished tickets back to Temporal and delivers the hand-backs.
func (rt *runtime) handBackOwn(ctx context.Context, skipRunning bool) {
	for {
		ts, err := rt.q.HandBack(ctx, engine.HandBackParams{Owner: rt.owner, SkipRunning: skipRunning})
		if err != nil {
			rt.opts.Logger.Error("sluice: hand back tickets at stop", "error", err)
			return
		}
		for _, t := range ts {
			if inv := rt.lookup(invocationKeyOf(t.Namespace, t.WorkflowID, t.RunID, t.ActivityID, int32(t.Attempt))); inv != nil {
				rt.drop(inv)
			}
			rt.tm.forKey(t.LineKey).Counter(MetricTicketsHandedBack).Inc(1)
			rt.deliverAndAck(ctx, t)
		}
		if len(ts) == 0 {
			return
		}
	}
}

// wait blocks until ch fires, d passes, or ctx is done; it reports whether ctx is still live.
func wait(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
	case <-t.C:
	}
	return true
}

func (rt *runtime) claimLoop(ctx context.Context) {
	work, unsubscribe := rt.notifier.Subscribe(engine.TopicWork())
	defer unsubscribe()
	for {
		if rt.stopping.Load() {
			return
		}
		res, err := rt.q.Claim(ctx, engine.ClaimParams{Max: rt.opts.ClaimBatch, MinRemaining: rt.opts.MinRemaining})
		next := rt.opts.PollInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			rt.opts.Logger.Warn("sluice: claim", "error", err)
		case len(res.Admitted) == rt.opts.ClaimBatch:
			next = 0
		case !res.RetryAt.IsZero():
			next = min(next, max(0, res.RetryAt.Sub(res.Now)))
		}
		for _, t := range res.Admitted {
			rt.tm.admitted(t, res.QueueDepth[t.LineKey], rt.owner)
		}
		for _, t := range res.Expired {
			if inv := rt.lookup(invocationKeyOf(t.Namespace, t.WorkflowID, t.RunID, t.ActivityID, int32(t.Attempt))); inv != nil {
				rt.drop(inv) // Temporal has timed the attempt out; there is nothing to report
			}
		}
		if next > 0 && !wait(ctx, work, next) {
			return
		}
	}
}

func (rt *runtime) ownerLoop(ctx context.Context) {
	admitted, unsubscribe := rt.notifier.Subscribe(engine.TopicAdmitted(rt.owner))
	defer unsubscribe()
	for {
		ts, err := rt.q.TakeAdmitted(ctx, rt.owner, rt.opts.ClaimBatch)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			rt.opts.Logger.Warn("sluice: take admitted tickets", "error", err)
		}
		for _, t := range ts {
			rt.startRun(t)
		}
		if len(ts) == rt.opts.ClaimBatch {
			continue
		}
		if !wait(ctx, admitted, rt.opts.PollInterval) {
			return
		}
	}
}

// startRun runs an admitted ticket's invocation in its own goroutine.
func (rt *runtime) startRun(t engine.Ticket) {
	inv := rt.lookup(invocationKeyOf(t.Namespace, t.WorkflowID, t.RunID, t.ActivityID, int32(t.Attempt)))
	ctx := context.Background()
	if inv == nil {
		// This process no longer holds the invocation (Temporal timed it out and it was swept): give
		// the ticket back so that its reservation is released and Temporal retries it.
		if err := rt.q.Complete(ctx, engine.CompleteParams{TicketID: t.ID, ActualCost: 0, OutcomeKind: engine.OutcomeHandedBack}); err != nil && !errors.Is(err, engine.ErrNotFound) {
			rt.opts.Logger.Warn("sluice: release ticket without invocation", "ticket_id", t.ID, "error", err)
		}
		return
	}
	runCtx, cancel := context.WithCancelCause(inv.base)
	if !inv.deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		runCtx, cancelDeadline = context.WithDeadline(runCtx, inv.deadline)
		prev := cancel
		cancel = func(cause error) { prev(cause); cancelDeadline() }
	}
	runCtx = context.WithValue(runCtx, invocationKey{}, inv)
	runCtx = admission.With(runCtx, runHandle{rt: rt, inv: inv})
	inv.mu.Lock()
	inv.ticketID, inv.running, inv.cancel = t.ID, true, cancel
	inv.facts = admission.Facts{TicketID: t.ID, Limits: t.LimitKeys, ReservedCost: t.Cost,
		EnqueuedAt: t.EnqueuedAt, AdmittedAt: t.AdmittedAt, Requeues: t.Requeues}
	inv.mu.Unlock()
	runCtx, span := rt.tm.startRun(runCtx, t)
	rt.running.Go(func() {
		defer cancel(nil)
		result, err := execute(runCtx, inv)
		inv.mu.Lock()
		actual, limited, observed := inv.actual, inv.limited, inv.observed
		inv.observed = false
		inv.mu.Unlock()
		var throttled *sluiceactivity.ThrottledError
		if !limited.IsZero() && errors.As(err, &throttled) && runCtx.Err() == nil {
			rt.tm.forKey(inv.line).Counter(MetricRateLimited).Inc(1)
			rt.tm.endRun(span, t, actual, "rate_limited", err)
			rt.requeue(ctx, inv, t, limited, actual, observed)
			return
		}
		t.OutcomeKind, t.Outcome = rt.encodeOutcome(runCtx, result, err)
		rt.tm.endRun(span, t, actual, t.OutcomeKind, err)
		inv.mu.Lock()
		pending := inv.pending
		inv.mu.Unlock()
		if pending && t.OutcomeKind == outcomeFailed {
			// Details recorded just before a failure are what the retry resumes from: send them
			// before the failure, as the SDK does.
			rt.heartbeat(inv)
		}
		cerr := rt.complete(ctx, engine.CompleteParams{TicketID: t.ID, ActualCost: actual, OutcomeKind: t.OutcomeKind, Outcome: t.Outcome})
		rt.drop(inv)
		switch {
		case errors.Is(cerr, engine.ErrNotFound):
			// Handed back while it ran (this process lost its lease): Temporal already has a failure.
			return
		case cerr != nil:
			rt.opts.Logger.Error("sluice: record outcome", "ticket_id", t.ID, "error", cerr)
			return
		}
		rt.deliverAndAck(ctx, t)
	})
}

// completeRetryFor bounds how long a finished run keeps trying to record its outcome while the
// database is unreachable. Past it, Temporal's timeouts take over.
const completeRetryFor = 2 * time.Minute

// complete records a finished run's outcome, retrying with backoff while the database is down: until
// it is recorded the ticket holds its reservation, and the outcome exists only in this process.
func (rt *runtime) complete(ctx context.Context, p engine.CompleteParams) error {
	deadline := time.Now().Add(completeRetryFor)
	backoff := 100 * time.Millisecond
	for {
		err := rt.q.Complete(ctx, p)
		if err == nil || errors.Is(err, engine.ErrNotFound) || time.Now().After(deadline) {
			return err
		}
		rt.opts.Logger.Warn("sluice: record outcome; retrying", "ticket_id", p.TicketID, "error", err, "backoff", backoff)
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

// execute runs the rest of the interceptor chain and the activity, turning a panic into an error.
func execute(ctx context.Context, inv *invocation) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = temporal.NewApplicationError(fmt.Sprintf("activity panicked: %v", p), "PanicError")
		}
	}()
	return inv.next.ExecuteActivity(ctx, inv.in)
}

// renewLoop renews this process's lease every LeaseTTL/3. It is a loop of its own so that nothing
// slow (a sweep's queries on a busy database) can delay a renewal: a lease that lapses while its
// owner lives gets the owner's running tickets handed back, and their slots released, while they run.
func (rt *runtime) renewLoop(ctx context.Context) {
	renew := time.NewTicker(rt.opts.LeaseTTL / 3)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			if err := rt.q.RenewLease(ctx, rt.owner, rt.opts.LeaseTTL); err != nil && ctx.Err() == nil {
				rt.opts.Logger.Warn("sluice: renew lease", "owner", rt.owner, "error", err)
			}
		}
	}
}

// leaseLoop hands back dead owners' tickets, publishes the gauges, forgets expired invocations and
// prunes old rows.
func (rt *runtime) leaseLoop(ctx context.Context) {
	sweep := time.NewTicker(min(time.Second, rt.opts.LeaseTTL/3))
	defer sweep.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			// Any survivor hands back a dead owner's tickets; the delivery loop reports them.
			back, err := rt.q.HandBack(ctx, engine.HandBackParams{})
			if err != nil && ctx.Err() == nil {
				rt.opts.Logger.Warn("sluice: hand back tickets of dead owners", "error", err)
			}
			for _, t := range back {
				rt.tm.forKey(t.LineKey).Counter(MetricTicketsHandedBack).Inc(1)
			}
			rt.tm.gauges(ctx, rt.q, rt.keys)
			rt.sweepExpired()
			if time.Since(lastPrune) > time.Minute {
				lastPrune = time.Now()
				if _, err := rt.q.Prune(ctx, engine.PruneParams{}); err != nil && ctx.Err() == nil {
					rt.opts.Logger.Warn("sluice: prune", "error", err)
				}
			}
		}
	}
}

// sweepExpired forgets queued invocations whose Temporal deadline has passed: Temporal has timed them
// out, and the claim removes their tickets.
func (rt *runtime) sweepExpired() {
	now := time.Now()
	for _, inv := range rt.snapshot() {
		inv.mu.Lock()
		expired := !inv.running && !inv.deadline.IsZero() && now.After(inv.deadline.Add(time.Second))
		inv.mu.Unlock()
		if expired {
			rt.drop(inv)
		}
	}
}

func (rt *runtime) deliveryLoop(ctx context.Context) {
	for {
		ts, err := rt.q.TakeDeliveries(ctx, rt.opts.ClaimBatch, 10*time.Second)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			rt.opts.Logger.Warn("sluice: take deliveries", "error", err)
		}
		for _, t := range ts {
			rt.deliverAndAck(ctx, t)
		}
		if len(ts) == rt.opts.ClaimBatch {
			continue
		}
		if !wait(ctx, nil, rt.opts.PollInterval) {
			return
		}
	}
}

func (rt *runtime) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(min(250*time.Millisecond, rt.opts.HeartbeatInterval/2))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		// Heartbeats go out in parallel, a bounded number at a time, so that the interval between
		// two heartbeats of one ticket does not grow with the number of tickets held.
		sem := make(chan struct{}, heartbeatParallelism)
		var wg sync.WaitGroup
		for _, inv := range rt.snapshot() {
			inv.mu.Lock()
			since := now.Sub(inv.lastSent)
			var due bool
			switch {
			case inv.running && inv.hbTimeout > 0:
				// The activity heartbeats itself: only flush details it recorded while throttled.
				due = inv.pending && since >= heartbeatThrottle(inv.hbTimeout)
			case inv.hbTimeout > 0:
				due = since >= min(rt.opts.HeartbeatInterval, inv.hbTimeout*8/10)
			default:
				due = since >= rt.opts.HeartbeatInterval
			}
			inv.mu.Unlock()
			if due {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					rt.heartbeat(inv)
				})
			}
		}
		wg.Wait()
	}
}

// heartbeatParallelism bounds the heartbeat RPCs in flight from one process.
const heartbeatParallelism = 32

// heartbeat sends one heartbeat for inv with its latest details and acts on Temporal's answer.
func (rt *runtime) heartbeat(inv *invocation) {
	inv.mu.Lock()
	details := inv.details
	inv.pending, inv.lastSent = false, time.Now()
	inv.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := rt.opts.Client.RecordActivityHeartbeat(ctx, inv.token, details...)
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
		rt.opts.Logger.Warn("sluice: heartbeat", "activity", inv.key, "error", err)
		return
	}
	rt.interrupt(inv, cause)
}

// interrupt ends an invocation Temporal no longer wants: a queued one is removed and reported, a
// running one has its context cancelled with cause and reports what the activity returns.
func (rt *runtime) interrupt(inv *invocation, cause error) {
	inv.mu.Lock()
	id, running, cancel := inv.ticketID, inv.running, inv.cancel
	inv.mu.Unlock()
	if running {
		cancel(cause)
		return
	}
	if id == 0 {
		return // the ticket is being written; the next heartbeat acts
	}
	ctx := context.Background()
	err := rt.q.Cancel(ctx, id)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		// Either admitted and taken meanwhile (the run is starting: cancel it), or the ticket is gone
		// (handed back by a survivor while this process had lost its lease): if Temporal no longer
		// knows the activity either, nothing will ever run it here, so let it go.
		inv.mu.Lock()
		cancel, running := inv.cancel, inv.running
		inv.mu.Unlock()
		switch {
		case cancel != nil:
			cancel(cause)
		case !running && cause == errActivityGone:
			rt.drop(inv)
		}
		return
	case err != nil:
		rt.opts.Logger.Warn("sluice: remove cancelled ticket", "ticket_id", id, "error", err)
		return
	}
	rt.drop(inv)
	if cause == errActivityGone {
		return
	}
	kind, outcome := rt.encodeOutcome(ctx, nil, cause)
	if cause == errCancelRequested {
		kind, outcome = outcomeCanceled, nil
	}
	if err := rt.deliver(ctx, engine.Ticket{ID: id, TaskToken: inv.token, Namespace: inv.namespace, OutcomeKind: kind, Outcome: outcome}); err != nil {
		rt.opts.Logger.Warn("sluice: report cancelled activity", "ticket_id", id, "error", err)
	}
}

// requeue puts a run the provider refused (a 429 reported through sluiceactivity.RateLimited) back
// in line at its place, pausing its line's limit until the provider's reset on every replica. The
// invocation stays held: when admitted again it runs again, in the same Temporal attempt.
func (rt *runtime) requeue(ctx context.Context, inv *invocation, t engine.Ticket, until time.Time, actual int64, observed bool) {
	// A refused call spent its request but, unless reported otherwise, no tokens: its reservation
	// comes back. Unless the run reported the provider's headers: those already set the bucket to
	// what the provider says remains, which does not count this refused call, so giving the
	// reservation back would put Sluice that much above the provider.
	switch {
	case observed && actual < 0:
		actual = -1
	default:
		actual = max(actual, 0)
	}
	err := rt.q.Requeue(ctx, engine.RequeueParams{TicketID: t.ID, NotBefore: until, ActualCost: actual,
		PauseKeys: []string{inv.line}, PauseUntil: until})
	inv.mu.Lock()
	inv.running, inv.cancel, inv.limited, inv.actual, inv.lastSent = false, nil, time.Time{}, -1, time.Now()
	inv.mu.Unlock()
	if err != nil {
		rt.opts.Logger.Error("sluice: requeue rate-limited run", "ticket_id", t.ID, "error", err)
		rt.drop(inv)
	}
}
