package interceptor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"

	"go.temporal.io/sdk/worker"

	"github.com/sluicehq/sluice/internal/dispatcher"
	"github.com/sluicehq/sluice/internal/pluginhost"
	"github.com/sluicehq/sluice/pgqueue"
)

// PluginName is the name the plugin gives Temporal.
const PluginName = "sluice"

// Plugin is the Sluice worker plugin: it adds the activity interceptor to the worker and runs the
// dispatcher (claims, runs, heartbeats, deliveries, lease) while the worker runs. One Plugin is one
// owner of tickets, normally one per process; it may be given to several workers of that process,
// and its dispatcher runs from the first worker's start to the last one's stop. Create it with
// NewPlugin.
type Plugin struct {
	worker.PluginBase
	opts  Options
	owner string
	d     *dispatcher.Dispatcher
	q     *pgqueue.Queue
	gates atomic.Int32 // gates hosted on the plugin (package gate)

	mu      sync.Mutex
	running int
}

var _ worker.Plugin = (*Plugin)(nil)

// NewPlugin validates opts and returns the plugin. It does not touch the database: the check for an
// undeclared transaction pooler, the migrations and the upsert of limits run when the first worker
// starts.
func NewPlugin(opts Options) (*Plugin, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	p := &Plugin{opts: opts, owner: opts.Identity + "/" + hex.EncodeToString(suffix)}
	d, err := dispatcher.New(opts.dispatcherConfig(p.owner))
	if err != nil {
		return nil, err
	}
	p.d = d
	p.q, err = pgqueue.New(opts.Pool, pgqueue.Options{Schema: opts.Schema, Now: opts.Clock})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Name returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// Owner returns the owner ID this plugin writes into its tickets.
func (p *Plugin) Owner() string { return p.owner }

// Queue returns the administration of the plugin's schema (limits read, changed at runtime, paused
// and resumed), its read model (Status, Tickets, Explain) and Verify, over the plugin's pool.
func (p *Plugin) Queue() *pgqueue.Queue { return p.q }

// ConfigureWorker adds the activity interceptor.
func (p *Plugin) ConfigureWorker(ctx context.Context, o worker.PluginConfigureWorkerOptions) error {
	o.WorkerOptions.Interceptors = append(o.WorkerOptions.Interceptors, &workerInterceptor{p: p})
	p.d.SetStopTimeout(o.WorkerOptions.WorkerStopTimeout)
	return nil
}

// StartWorker starts the dispatcher (which refuses, with ErrTransactionPooler, a Pool behind a pooler
// in transaction mode that Options.TransactionPooler does not declare, then migrates the schema and
// upserts the limits), then the worker.
func (p *Plugin) StartWorker(ctx context.Context, o worker.PluginStartWorkerOptions, next func(context.Context, worker.PluginStartWorkerOptions) error) error {
	p.mu.Lock()
	if p.running == 0 {
		if len(p.opts.Routes) == 0 && p.gates.Load() == 0 {
			p.opts.Logger.Warn("sluice: the plugin routes no activity type and hosts no gate: it throttles nothing (set Options.Routes)")
		}
		if err := p.d.Start(ctx); err != nil {
			p.mu.Unlock()
			return err
		}
	}
	p.running++
	p.mu.Unlock()
	if err := next(ctx, o); err != nil {
		p.stopOne(ctx)
		return err
	}
	return nil
}

// StopWorker stops the worker's polling, then, with the last worker, the dispatcher: queued tickets
// are handed back to Temporal at once, running ones get the worker's stop timeout to finish and are
// handed back after it.
func (p *Plugin) StopWorker(ctx context.Context, o worker.PluginStopWorkerOptions, next func(context.Context, worker.PluginStopWorkerOptions)) {
	next(ctx, o)
	p.stopOne(ctx)
}

func (p *Plugin) stopOne(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == 0 {
		return
	}
	p.running--
	if p.running == 0 {
		p.d.Stop(ctx)
	}
}

func init() {
	pluginhost.Of = func(plugin any) (pluginhost.Host, bool) {
		p, ok := plugin.(*Plugin)
		if !ok || p == nil || p.d == nil {
			return pluginhost.Host{}, false
		}
		return pluginhost.Host{Dispatcher: p.d, Client: p.opts.Client, Prices: p.opts.Prices, Owner: p.owner,
			Logger: p.opts.Logger, Attach: func() { p.gates.Add(1) }}, true
	}
}
