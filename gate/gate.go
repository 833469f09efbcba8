package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/dispatcher"
	"github.com/sluicehq/sluice/internal/pluginhost"
	"github.com/sluicehq/sluice/throttle"
)

// Defaults of Options.
const (
	// DefaultTaskQueue is the task queue a gate serves Acquire on.
	DefaultTaskQueue = "sluice-gate"
	// DefaultHold is how long a permit may be held when the request does not say.
	DefaultHold = 10 * time.Minute
	// DefaultCheckInterval is how often a gate asks Temporal whether a held permit's workflow is
	// still running.
	DefaultCheckInterval = 30 * time.Second
	// DefaultStopTimeout is how long Stop waits for held permits to be released.
	DefaultStopTimeout = 30 * time.Second
)

// Route is a named set of limits a request may name instead of listing keys (AcquireRequest.Route).
type Route struct {
	// Limits are the keys the route draws on; the first is its line. Required.
	Limits []string `json:"limits"`
	// Model names the model whose price (the plugin's Options.Prices) reserves money from the limits'
	// money allowances, unless the request names another.
	Model string `json:"model,omitempty"`
	// TenantLimit, when set, is the limit each tenant of the route draws on beside Limits: its Key is
	// a prefix to which the request's Tenant is appended ("tenant:" gives "tenant:acme"), and its
	// figures are those a tenant's limit is created with the first time the gate sees it (never
	// overwritten after, so that a runtime change sticks). A request of the route without a Tenant
	// draws on no tenant limit.
	TenantLimit *throttle.Limit `json:"tenant_limit,omitempty"`
}

// Options configures a gate.
type Options struct {
	// TaskQueue is the task queue the gate's worker serves Acquire on; the gate names its release
	// queue after it. Defaults to DefaultTaskQueue.
	TaskQueue string
	// Routes are the routes requests may name. Nil means none: requests list limit keys.
	Routes map[string]Route
	// DefaultHold is how long a permit may be held when the request does not say. Defaults to
	// DefaultHold; at most MaxHold.
	DefaultHold time.Duration
	// CheckInterval is how often the gate asks Temporal whether a held permit's workflow is still
	// running, releasing the permit once it is not. Defaults to DefaultCheckInterval.
	CheckInterval time.Duration
	// StopTimeout is how long Stop waits for held permits to be released before it releases them
	// as abandoned. Defaults to DefaultStopTimeout.
	StopTimeout time.Duration
	// ReleaseWorker configures the worker of the release queue (its Identity, concurrency). Its
	// zero value is the SDK's defaults.
	ReleaseWorker worker.Options
}

// Gate serves Sluice's admission to workflows in any SDK (see the package doc). Create it with New,
// register it on a worker of Options.TaskQueue that has the plugin (Register), and Start it.
type Gate struct {
	opts   Options
	host   pluginhost.Host
	d      *dispatcher.Dispatcher
	client client.Client
	log    *slog.Logger
	queue  string // the release queue: this process's

	holds *holds

	mu       sync.Mutex
	releaser worker.Worker
	life     context.Context
	stop     context.CancelFunc
}

// New returns a gate hosted on plugin: its tickets are the plugin's, written, admitted and run by the
// plugin's dispatcher, so the plugin must be on the worker Register is given.
func New(plugin *interceptor.Plugin, opts Options) (*Gate, error) {
	host, ok := pluginhost.Of(plugin)
	if !ok {
		return nil, errors.New("sluice gate: New: plugin must be a plugin made by interceptor.NewPlugin")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	for name, r := range opts.Routes {
		if err := validateRoute(name, r, host.Prices); err != nil {
			return nil, err
		}
	}
	host.Attach()
	life, stop := context.WithCancel(context.Background())
	g := &Gate{opts: opts, host: host, d: host.Dispatcher, client: host.Client, log: host.Logger,
		queue: opts.TaskQueue + "@" + host.Owner, holds: newHolds(), life: life, stop: stop}
	return g, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.TaskQueue == "" {
		o.TaskQueue = DefaultTaskQueue
	}
	if o.DefaultHold == 0 {
		o.DefaultHold = DefaultHold
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	switch {
	case o.DefaultHold < time.Millisecond || o.DefaultHold > MaxHold:
		return o, fmt.Errorf("sluice gate: Options.DefaultHold must be 1ms to %s, got %s", MaxHold, o.DefaultHold)
	case o.CheckInterval < 10*time.Millisecond:
		return o, fmt.Errorf("sluice gate: Options.CheckInterval must be >= 10ms, got %s", o.CheckInterval)
	case o.StopTimeout < 0:
		return o, fmt.Errorf("sluice gate: Options.StopTimeout must be >= 0, got %s", o.StopTimeout)
	}
	return o, nil
}

func validateRoute(name string, r Route, prices *throttle.PriceTable) error {
	if name == "" {
		return errors.New("sluice gate: Options.Routes has an empty route name")
	}
	if len(r.Limits) == 0 || len(r.Limits) > MaxLimits {
		return fmt.Errorf("sluice gate: Options.Routes[%q].Limits must name 1 to %d limits, got %d", name, MaxLimits, len(r.Limits))
	}
	for _, k := range r.Limits {
		if err := throttle.ValidateKey(k); err != nil {
			return fmt.Errorf("sluice gate: Options.Routes[%q].Limits: %w", name, err)
		}
	}
	if r.Model != "" {
		if prices == nil {
			return fmt.Errorf("sluice gate: Options.Routes[%q].Model is %q but the plugin has no price table (interceptor.Options.Prices)", name, r.Model)
		}
		if _, err := prices.Estimate(r.Model, throttle.Cost{}); err != nil {
			return fmt.Errorf("sluice gate: Options.Routes[%q].Model: %w", name, err)
		}
	}
	if r.TenantLimit != nil {
		l := *r.TenantLimit
		l.Key += "tenant"
		if err := l.WithDefaults().Validate(); err != nil {
			return fmt.Errorf("sluice gate: Options.Routes[%q].TenantLimit: %w", name, err)
		}
	}
	return nil
}

// ReleaseTaskQueue returns the task queue of this gate process's permits: Permit.ReleaseTaskQueue.
func (g *Gate) ReleaseTaskQueue() string { return g.queue }

// Register registers AcquireActivity on w, a worker of Options.TaskQueue that has the gate's plugin.
func (g *Gate) Register(w worker.Registry) {
	w.RegisterActivityWithOptions(g.acquire, activity.RegisterOptions{Name: AcquireActivity})
}

// Start starts the worker of the release queue, which serves ReleaseActivity for the permits this
// process holds.
func (g *Gate) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.releaser != nil {
		return errors.New("sluice gate: Start: already started")
	}
	w := worker.New(g.client, g.queue, g.opts.ReleaseWorker)
	w.RegisterActivityWithOptions(g.release, activity.RegisterOptions{Name: ReleaseActivity})
	if err := w.Start(); err != nil {
		return fmt.Errorf("sluice gate: start the release worker on %q: %w", g.queue, err)
	}
	g.releaser = w
	return nil
}

// Stop waits up to Options.StopTimeout (or until ctx is done) for the permits this process holds to
// be released, releases the rest as abandoned (their reservations kept as spent), then stops the
// release worker. Stop the gate before the worker that has the plugin: the plugin's dispatcher runs
// the holds.
func (g *Gate) Stop(ctx context.Context) {
	t := time.NewTimer(g.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-g.holds.empty():
	case <-t.C:
	case <-ctx.Done():
	}
	g.stop()
	select {
	case <-g.holds.empty():
	case <-ctx.Done():
	}
	g.mu.Lock()
	w := g.releaser
	g.releaser = nil
	g.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}
