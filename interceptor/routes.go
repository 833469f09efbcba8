package interceptor

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// routeCost runs the route's cost function (Cost or Tokens), turning a panic or an out-of-range value
// into an error that names the route and the value.
func routeCost(name string, r Route, args []any) (cost throttle.Cost, err error) {
	field := "Cost"
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sluice: Routes[%q].%s panicked: %v", name, field, p)
		}
	}()
	switch {
	case r.Cost != nil:
		var n int64
		n, err = r.Cost(args)
		cost = throttle.Tokens(n)
	case r.Tokens != nil:
		field = "Tokens"
		cost, err = r.Tokens(args)
	default:
		return throttle.Cost{}, nil
	}
	if err != nil {
		return throttle.Cost{}, fmt.Errorf("sluice: Routes[%q].%s: %w", name, field, err)
	}
	switch {
	case field == "Cost" && (cost.Input < 0 || cost.Input > pgqueue.MaxCost):
		return throttle.Cost{}, fmt.Errorf("sluice: Routes[%q].Cost must return a value in [0, %d], got %d", name, pgqueue.MaxCost, cost.Input)
	case cost.Input < 0 || cost.Output < 0 || cost.Input > pgqueue.MaxCost || cost.Output > pgqueue.MaxCost-cost.Input:
		return throttle.Cost{}, fmt.Errorf("sluice: Routes[%q].Tokens must return input and output >= 0, at most %d in all, got input %d, output %d",
			name, pgqueue.MaxCost, cost.Input, cost.Output)
	}
	return cost, nil
}

// routeKeys returns the limit keys a call draws on: the route's own, then those its KeyLimits derive,
// creating the derived limits the first time this process sees their keys.
func (p *Plugin) routeKeys(ctx context.Context, name string, r Route, ai ActivityInfo, args []any) (keys []string, err error) {
	if r.KeyLimits == nil {
		return r.Limits, nil
	}
	defer func() {
		if rec := recover(); rec != nil {
			err = &badRouteError{fmt.Errorf("sluice: Routes[%q].KeyLimits panicked: %v", name, rec)}
		}
	}()
	extra := r.KeyLimits(ai, args)
	keys = slices.Clone(r.Limits)
	var derived []throttle.Limit
	for i, l := range extra {
		if err := l.WithDefaults().Validate(); err != nil {
			return nil, &badRouteError{fmt.Errorf("sluice: Routes[%q].KeyLimits()[%d]: %w", name, i, err)}
		}
		if slices.Contains(keys, l.Key) {
			continue
		}
		keys = append(keys, l.Key)
		derived = append(derived, l)
	}
	if err := p.d.EnsureLimits(ctx, derived); err != nil {
		return nil, fmt.Errorf("sluice: create derived limits: %w", err)
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
		if err := admit.ValidateWeight(weight); err != nil {
			return "", 0, fmt.Errorf("sluice: Routes[%q].Weight(%q): %w", name, key, err)
		}
	}
	return key, weight, nil
}
