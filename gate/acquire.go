package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/dispatcher"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// defaultPriority is Temporal's default PriorityKey, the plugin's default priority.
const defaultPriority = 3

// acquire is AcquireActivity: it checks the request, writes its ticket and returns
// activity.ErrResultPending; the plugin's dispatcher admits the ticket and runs hold, which completes
// the activity with the permit.
func (g *Gate) acquire(ctx context.Context, req AcquireRequest) (Permit, error) {
	if g.d.Stopping() || g.life.Err() != nil {
		return Permit{}, temporal.NewApplicationError("sluice gate: the gate is stopping; Acquire will be retried on another gate", "SluiceStopping")
	}
	info := activity.GetInfo(ctx)
	ip, ep := dispatcher.AttemptParams(info)
	p, h, err := g.ticket(ctx, req, info, ep)
	if err != nil {
		return Permit{}, refuse(err)
	}
	ip.Run, ip.Context, ip.Line, ip.Model, ip.OutlivesAttempt = h.run, ctx, p.LimitKeys[0], h.model, true
	inv := dispatcher.NewInvocation(ip, time.Now())
	switch err := g.d.Enqueue(ctx, inv, p); {
	case errors.Is(err, store.ErrUnknownLimit):
		return Permit{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("sluice gate: %s: %v", AcquireActivity, err), ErrTypeUnknownLimit, nil)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return Permit{}, err
	case err != nil:
		return Permit{}, fmt.Errorf("sluice gate: write ticket: %w", err)
	}
	return Permit{}, activity.ErrResultPending
}

// refuse turns a request the gate refuses into the non-retryable error of its type; anything else
// (the database) is retried by Temporal.
func refuse(err error) error {
	var re *requestError
	if errors.As(err, &re) {
		return temporal.NewNonRetryableApplicationError(re.msg, re.kind, nil)
	}
	return err
}

// ticket returns the ticket to write for req and the hold that will run once it is admitted.
func (g *Gate) ticket(ctx context.Context, req AcquireRequest, info activity.Info, p store.EnqueueParams) (store.EnqueueParams, *hold, error) {
	if err := req.validate(); err != nil {
		return store.EnqueueParams{}, nil, err
	}
	keys, model, err := g.keys(ctx, req)
	if err != nil {
		return store.EnqueueParams{}, nil, err
	}
	cost := req.cost()
	p.LimitKeys, p.Cost, p.OutputCost = keys, cost.Total(), cost.Output
	p.Priority, p.FairnessKey, p.Weight = cmp.Or(req.Priority, defaultPriority), req.Tenant, 1
	if p.Cost > MaxTokens {
		return store.EnqueueParams{}, nil, badField("tokens", p.Cost, fmt.Sprintf("input and output together must be at most %d", MaxTokens))
	}
	if model != "" {
		if g.host.Prices == nil {
			return store.EnqueueParams{}, nil, badField("model", fmt.Sprintf("%q", model), "the gate has no price table to price it")
		}
		money, err := g.host.Prices.Estimate(model, cost)
		if err != nil {
			return store.EnqueueParams{}, nil, badField("model", fmt.Sprintf("%q", model), err.Error())
		}
		p.CostMoney = money
	}
	holdFor := g.opts.DefaultHold
	if req.MaxHoldMS > 0 {
		holdFor = time.Duration(req.MaxHoldMS) * time.Millisecond
	}
	h := &hold{g: g, token: info.TaskToken, workflowID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID,
		deadline: info.Deadline, holdFor: holdFor, model: model, limits: keys}
	return p, h, nil
}

// keys returns the limit keys req draws on (its route's, its tenant's, then its own) and the model
// that prices it, creating a route's tenant limit the first time this process sees it.
func (g *Gate) keys(ctx context.Context, req AcquireRequest) ([]string, string, error) {
	var keys []string
	model := req.Model
	if req.Route != "" {
		r, ok := g.opts.Routes[req.Route]
		if !ok {
			return nil, "", &requestError{kind: ErrTypeUnknownLimit, msg: fmt.Sprintf("sluice gate: route %q is not one this gate defines (%s)", req.Route, routeNames(g.opts.Routes))}
		}
		keys = slices.Clone(r.Limits)
		if model == "" {
			model = r.Model
		}
		if r.TenantLimit != nil && req.Tenant != "" {
			l := *r.TenantLimit
			l.Key += req.Tenant
			if err := l.WithDefaults().Validate(); err != nil {
				return nil, "", badField("tenant", fmt.Sprintf("%q", req.Tenant), err.Error())
			}
			if err := g.d.EnsureLimits(ctx, []throttle.Limit{l}); err != nil {
				return nil, "", fmt.Errorf("sluice gate: create the tenant limit %q: %w", l.Key, err)
			}
			keys = append(keys, l.Key)
		}
	}
	for _, k := range req.Limits {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) > MaxLimits {
		return nil, "", badField("limits", len(keys), fmt.Sprintf("the route's and the request's limits together must be at most %d", MaxLimits))
	}
	return keys, model, nil
}

func routeNames(routes map[string]Route) string {
	if len(routes) == 0 {
		return "it defines none"
	}
	names := make([]string, 0, len(routes))
	for n := range routes {
		names = append(names, fmt.Sprintf("%q", n))
	}
	slices.Sort(names)
	return "it defines " + fmt.Sprint(names)
}
