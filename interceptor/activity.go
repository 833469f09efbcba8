package interceptor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// invocation is one routed activity attempt held in this process's memory from ExecuteActivity until
// its outcome is recorded: the rest of the interceptor chain, the decoded arguments and the activity's
// context values. Inputs are never written to Postgres.
type invocation struct {
	key       string // namespace|workflow|run|activity|attempt: known before the ticket ID
	next      interceptor.ActivityInboundInterceptor
	in        *interceptor.ExecuteActivityInput
	base      context.Context // the activity context without its cancellation
	token     []byte
	namespace string
	deadline  time.Time
	hbTimeout time.Duration

	line string // the route's first limit: where headers and 429s apply

	mu       sync.Mutex
	ticketID int64
	facts    admission.Facts
	limited  time.Time // the provider said 429 until then (sluiceactivity.RateLimited)
	observed bool      // the run reported the provider's headers
	running  bool
	cancel   context.CancelCauseFunc
	details  []any
	pending  bool // details not yet sent
	lastSent time.Time
	actual   int64 // reported real cost; -1 when none
}

type invocationKey struct{}

func invocationFrom(ctx context.Context) *invocation {
	inv, _ := ctx.Value(invocationKey{}).(*invocation)
	return inv
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	rt *runtime
}

func (a *activityInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return a.Next.Init(&activityOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, rt: a.rt})
}

// ExecuteActivity writes the ticket of a routed activity and returns activity.ErrResultPending, which
// frees the Temporal slot; the dispatcher runs the held invocation once the ticket is admitted. Local
// activities and unrouted types go straight to the next interceptor.
func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	route, ok := a.rt.opts.Routes[info.ActivityType.Name]
	if !ok || info.IsLocalActivity {
		return a.Next.ExecuteActivity(ctx, in)
	}
	if a.rt.stopping.Load() {
		return nil, temporal.NewApplicationError("sluice: worker is stopping; the activity will be retried on another worker", "SluiceStopping")
	}
	ai := ActivityInfo{
		ActivityType: info.ActivityType.Name, ActivityID: info.ActivityID, WorkflowID: info.WorkflowExecution.ID,
		RunID: info.WorkflowExecution.RunID, Namespace: info.WorkflowNamespace, TaskQueue: info.TaskQueue,
		Attempt: info.Attempt, Priority: info.Priority.PriorityKey,
	}
	if info.WorkflowType != nil {
		ai.WorkflowType = info.WorkflowType.Name
	}
	cost, err := routeCost(info.ActivityType.Name, route, in.Args)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "SluiceBadCost", nil)
	}
	keys, err := a.rt.routeKeys(ctx, info.ActivityType.Name, route, ai, in.Args)
	var bad *badRouteError
	switch {
	case errors.As(err, &bad):
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "SluiceBadLimit", nil)
	case err != nil:
		return nil, err // the database: Temporal retries
	}
	p := engine.EnqueueParams{
		LimitKeys: keys, Cost: cost, Priority: route.Priority, Owner: a.rt.owner,
		Namespace: ai.Namespace, WorkflowID: ai.WorkflowID, RunID: ai.RunID, ActivityID: ai.ActivityID,
		ActivityType: ai.ActivityType, Attempt: int(info.Attempt), TaskToken: info.TaskToken, Deadline: info.Deadline,
	}
	if p.Priority == 0 {
		p.Priority = ai.Priority
		if p.Priority == 0 {
			p.Priority = 3 // Temporal's default PriorityKey
		}
	}
	if p.FairnessKey, p.Weight, err = routeFairness(info.ActivityType.Name, route, ai, in.Args); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "SluiceBadRoute", nil)
	}
	// Back-pressure: past MaxHeld invocations, wait here, holding the Temporal slot, so that the
	// backlog stays in Temporal's task queue rather than in this process's memory.
	select {
	case a.rt.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	inv := &invocation{
		key:  invocationKeyOf(ai.Namespace, ai.WorkflowID, ai.RunID, ai.ActivityID, info.Attempt),
		next: a.Next, in: in, base: context.WithoutCancel(ctx), token: info.TaskToken,
		namespace: ai.Namespace, deadline: info.Deadline, hbTimeout: info.HeartbeatTimeout, actual: -1,
		line:     route.Limits[0],
		lastSent: time.Now(),
	}
	p.TraceContext = a.rt.tm.inject(ctx)
	// Held before the ticket exists, so that an admission racing the enqueue finds it.
	a.rt.hold(inv)
	t, err := a.rt.q.Enqueue(ctx, p)
	if err != nil {
		a.rt.drop(inv)
		if errors.Is(err, engine.ErrUnknownLimit) {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("sluice: route %q: %v", ai.ActivityType, err), "SluiceUnknownLimit", nil)
		}
		return nil, fmt.Errorf("sluice: write ticket: %w", err)
	}
	inv.mu.Lock()
	inv.ticketID = t.ID
	inv.mu.Unlock()
	a.rt.tm.forKey(inv.line).Counter(MetricTicketsQueued).Inc(1)
	return nil, activity.ErrResultPending
}

func invocationKeyOf(ns, wf, run, act string, attempt int32) string {
	return fmt.Sprintf("%s|%s|%s|%s|%d", ns, wf, run, act, attempt)
}

// routeCost runs the route's cost function, turning a panic or an out-of-range value into an error
// that names the route and the value.
func routeCost(name string, r Route, args []any) (cost int64, err error) {
	if r.Cost == nil {
		return 0, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sluice: Routes[%q].Cost panicked: %v", name, p)
		}
	}()
	cost, err = r.Cost(args)
	if err != nil {
		return 0, fmt.Errorf("sluice: Routes[%q].Cost: %w", name, err)
	}
	if cost < 0 || cost > pgqueue.MaxCost {
		return 0, fmt.Errorf("sluice: Routes[%q].Cost must return a value in [0, %d], got %d", name, pgqueue.MaxCost, cost)
	}
	return cost, nil
}

// activityOutbound sends the heartbeats of a held invocation through the client with its task token:
// the SDK's own heartbeat path closes when ExecuteActivity returns ErrResultPending.
type activityOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	rt *runtime
}

func (o *activityOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	inv := invocationFrom(ctx)
	if inv == nil {
		o.Next.RecordHeartbeat(ctx, details...)
		return
	}
	inv.mu.Lock()
	inv.details, inv.pending = details, true
	due := time.Since(inv.lastSent) >= heartbeatThrottle(inv.hbTimeout)
	inv.mu.Unlock()
	if due {
		o.rt.heartbeat(inv)
	}
}

// heartbeatThrottle is the least time between two heartbeats of a running activity; details recorded
// in between are sent by the heartbeat loop.
func heartbeatThrottle(hbTimeout time.Duration) time.Duration {
	if hbTimeout > 0 {
		return min(time.Second, hbTimeout/2)
	}
	return time.Second
}

// runHandle is the admission.Run that sluiceactivity reaches through the run's context.
type runHandle struct {
	rt  *runtime
	inv *invocation
}

var _ admission.Run = runHandle{}

func (h runHandle) Facts() admission.Facts {
	h.inv.mu.Lock()
	defer h.inv.mu.Unlock()
	return h.inv.facts
}

func (h runHandle) ReportUsage(tokens int64) {
	h.inv.mu.Lock()
	h.inv.actual = tokens
	h.inv.mu.Unlock()
}

func (h runHandle) RateLimited(until time.Time) {
	h.inv.mu.Lock()
	if until.After(h.inv.limited) {
		h.inv.limited = until
	}
	h.inv.mu.Unlock()
}

func (h runHandle) ObserveHeaders(ctx context.Context, hdr http.Header) error {
	info := throttle.ParseRateLimitHeaders(hdr, time.Now())
	h.inv.mu.Lock()
	h.inv.observed = true
	h.inv.mu.Unlock()
	return h.rt.q.Observe(context.WithoutCancel(ctx), h.inv.line, info)
}

// routeKeys returns the limit keys a call draws on: the route's own, then those its KeyLimits derive,
// creating the derived limits the first time this process sees their keys.
func (rt *runtime) routeKeys(ctx context.Context, name string, r Route, ai ActivityInfo, args []any) (keys []string, err error) {
	if r.KeyLimits == nil {
		return r.Limits, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = &badRouteError{fmt.Errorf("sluice: Routes[%q].KeyLimits panicked: %v", name, p)}
		}
	}()
	extra := r.KeyLimits(ai, args)
	keys = slices.Clone(r.Limits)
	var create []throttle.Limit
	for i, l := range extra {
		if err := l.WithDefaults().Validate(); err != nil {
			return nil, &badRouteError{fmt.Errorf("sluice: Routes[%q].KeyLimits()[%d]: %w", name, i, err)}
		}
		if slices.Contains(keys, l.Key) {
			continue
		}
		keys = append(keys, l.Key)
		if _, known := rt.knownKeys.Load(l.Key); !known {
			create = append(create, l)
		}
	}
	if len(create) > 0 {
		if err := rt.q.EnsureLimits(ctx, create...); err != nil {
			return nil, fmt.Errorf("sluice: create derived limits: %w", err)
		}
		for _, l := range create {
			rt.knownKeys.Store(l.Key, true)
		}
	}
	return keys, nil
}

// badRouteError is a mistake in a route's functions: the attempt fails for good.
type badRouteError struct{ error }

func (e *badRouteError) Unwrap() error { return e.error }

// routeFairness runs the route's fairness functions, turning a panic or a bad weight into an error
// that names the route.
func routeFairness(name string, r Route, ai ActivityInfo, args []any) (key string, weight float64, err error) {
	if r.FairnessKey == nil {
		return "", 0, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sluice: Routes[%q] fairness functions panicked: %v", name, p)
		}
	}()
	key, weight = r.FairnessKey(ai, args), 1
	if r.Weight != nil {
		weight = r.Weight(key)
		if err := throttle.ValidateWeight(weight); err != nil {
			return "", 0, fmt.Errorf("sluice: Routes[%q].Weight(%q): %w", name, key, err)
		}
	}
	return key, weight, nil
}
