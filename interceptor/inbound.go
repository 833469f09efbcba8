package interceptor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/dispatcher"
	"github.com/sluicehq/sluice/internal/store"
)

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	p *Plugin
}

var _ interceptor.WorkerInterceptor = (*workerInterceptor)(nil)

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, p: w.p}
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	p *Plugin
}

var _ interceptor.ActivityInboundInterceptor = (*activityInbound)(nil)

func (a *activityInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return a.Next.Init(&activityOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, p: a.p})
}

// ExecuteActivity writes the ticket of a routed activity and returns activity.ErrResultPending, which
// frees the Temporal slot; the dispatcher runs the held invocation once the ticket is admitted. Local
// activities and unrouted types go straight to the next interceptor.
func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	route, ok := a.p.opts.Routes[info.ActivityType.Name]
	if !ok || info.IsLocalActivity {
		return a.Next.ExecuteActivity(ctx, in)
	}
	if a.p.d.Stopping() {
		return nil, temporal.NewApplicationError("sluice: worker is stopping; the activity will be retried on another worker", "SluiceStopping")
	}
	ai := activityInfo(info)
	ip, ep := dispatcher.AttemptParams(info)
	p, err := a.p.ticketParams(ctx, route, ai, ep, in.Args)
	if err != nil {
		return nil, err
	}
	ip.Run = func(ctx context.Context) (any, error) { return a.Next.ExecuteActivity(ctx, in) }
	ip.Context, ip.Line, ip.Model = ctx, route.Limits[0], route.Model
	inv := dispatcher.NewInvocation(ip, time.Now())
	switch err := a.p.d.Enqueue(ctx, inv, p); {
	case errors.Is(err, store.ErrUnknownLimit):
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("sluice: route %q: %v", ai.ActivityType, err), "SluiceUnknownLimit", nil)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("sluice: write ticket: %w", err)
	}
	return nil, activity.ErrResultPending
}

func activityInfo(info activity.Info) ActivityInfo {
	ai := ActivityInfo{
		ActivityType: info.ActivityType.Name, ActivityID: info.ActivityID, WorkflowID: info.WorkflowExecution.ID,
		RunID: info.WorkflowExecution.RunID, Namespace: info.WorkflowNamespace, TaskQueue: info.TaskQueue,
		Attempt: info.Attempt, Priority: info.Priority.PriorityKey,
	}
	if info.WorkflowType != nil {
		ai.WorkflowType = info.WorkflowType.Name
	}
	return ai
}

// ticketParams runs the route's functions and returns the ticket to write. A mistake in the route's
// functions is a non-retryable failure naming the route; a database error is retried by Temporal.
func (p *Plugin) ticketParams(ctx context.Context, route Route, ai ActivityInfo, ep store.EnqueueParams, args []any) (store.EnqueueParams, error) {
	name := ai.ActivityType
	cost, err := routeCost(name, route, args)
	if err != nil {
		return store.EnqueueParams{}, temporal.NewNonRetryableApplicationError(err.Error(), "SluiceBadCost", nil)
	}
	keys, err := p.routeKeys(ctx, name, route, ai, args)
	var bad *badRouteError
	switch {
	case errors.As(err, &bad):
		return store.EnqueueParams{}, temporal.NewNonRetryableApplicationError(err.Error(), "SluiceBadLimit", nil)
	case err != nil:
		return store.EnqueueParams{}, err // the database: Temporal retries
	}
	ep.LimitKeys, ep.Cost, ep.OutputCost = keys, cost.Total(), cost.Output
	ep.Priority = cmp.Or(route.Priority, ai.Priority, temporalDefaultPriority)
	if route.Model != "" && p.opts.Prices != nil {
		// Validated at NewPlugin: the table prices the model; an estimate too large is the route's.
		if ep.CostMoney, err = p.opts.Prices.Estimate(route.Model, cost); err != nil {
			return store.EnqueueParams{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"sluice: Routes[%q]: the price of %d input and %d output tokens of %q: %v", name, cost.Input, cost.Output, route.Model, err),
				"SluiceBadCost", nil)
		}
	}
	if ep.FairnessKey, ep.Weight, err = routeFairness(name, route, ai, args); err != nil {
		return store.EnqueueParams{}, temporal.NewNonRetryableApplicationError(err.Error(), "SluiceBadRoute", nil)
	}
	return ep, nil
}

// temporalDefaultPriority is Temporal's default PriorityKey.
const temporalDefaultPriority = 3

// activityOutbound sends the heartbeats of a held invocation through the client with its task token:
// the SDK's own heartbeat path closes when ExecuteActivity returns ErrResultPending.
type activityOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	p *Plugin
}

func (o *activityOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	inv := dispatcher.FromContext(ctx)
	if inv == nil {
		o.Next.RecordHeartbeat(ctx, details...)
		return
	}
	o.p.d.RecordHeartbeat(inv, details)
}
