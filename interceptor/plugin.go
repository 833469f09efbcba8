package interceptor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/sluicehq/sluice/internal/engine"
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
	rt    *runtime
	admin *pgqueue.Queue

	mu      sync.Mutex
	running int
}

var _ worker.Plugin = (*Plugin)(nil)

// NewPlugin validates opts and returns the plugin. It does not touch the database: migrations run
// and limits are upserted when the first worker starts.
func NewPlugin(opts Options) (*Plugin, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	q, err := engine.New(opts.Pool, engine.Options{Schema: opts.Schema})
	if err != nil {
		return nil, err
	}
	admin, err := pgqueue.New(opts.Pool, pgqueue.Options{Schema: opts.Schema})
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	rt := newRuntime(opts, q, opts.Identity+"/"+hex.EncodeToString(suffix))
	return &Plugin{rt: rt, admin: admin}, nil
}

// Name returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// Owner returns the owner ID this plugin writes into its tickets.
func (p *Plugin) Owner() string { return p.rt.owner }

// Queue returns the administration of the plugin's schema: limits (read, change at runtime, pause,
// resume), stats and verify.
func (p *Plugin) Queue() *pgqueue.Queue { return p.admin }

// ConfigureWorker adds the activity interceptor.
func (p *Plugin) ConfigureWorker(ctx context.Context, o worker.PluginConfigureWorkerOptions) error {
	o.WorkerOptions.Interceptors = append(o.WorkerOptions.Interceptors, &workerInterceptor{rt: p.rt})
	p.rt.setStopTimeout(o.WorkerOptions.WorkerStopTimeout)
	return nil
}

// StartWorker migrates the schema, upserts the limits and starts the dispatcher, then the worker.
func (p *Plugin) StartWorker(ctx context.Context, o worker.PluginStartWorkerOptions, next func(context.Context, worker.PluginStartWorkerOptions) error) error {
	p.mu.Lock()
	if p.running == 0 {
		if err := p.rt.start(ctx); err != nil {
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
		p.rt.stop(ctx)
	}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	rt *runtime
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, rt: w.rt}
}
