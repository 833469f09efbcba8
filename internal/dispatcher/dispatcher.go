// Package dispatcher is the part of the Sluice plugin that works between Temporal handing an
// activity to the interceptor and Sluice reporting its outcome: the invocations held in memory and
// the services that claim, run, record, deliver, heartbeat and maintain them. Each service owns its
// goroutines, started by Start and ended by Stop. The interceptor package is the only user, and the
// dispatcher is its one door to the store: New builds the plugin's one store.Queue, Start prepares
// the schema, and every statement the plugin runs goes through a service here.
package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/throttle"
)

// drainGrace is how long a stop waits for runs it cancelled to return before it gives up on them.
const drainGrace = 5 * time.Second

// handBackSettle bounds how long a stop waits for the transactions that hold its tickets locked, and
// handBackRetry is how often it looks again. Those transactions are a claim's few round trips.
const (
	msgStopWaitsForLocks = "sluice: the stop waits for tickets other transactions hold locked"
	handBackSettle       = 10 * time.Second
	handBackRetry        = 10 * time.Millisecond
)

// deps is what the services share, as River's base service is.
type deps struct {
	cfg  Config
	q    *store.Queue
	reg  *Registry
	tm   telemetry.Telemetry
	enc  encoder
	log  *slog.Logger
	life context.Context // cancelled once the dispatcher has stopped: the context of runs' calls
	// checkNow asks the SelfChecker for a check now: a statement's outcome was unknown.
	checkNow chan struct{}
	// stopping is set while the dispatcher is stopped or stopping: the stop hands back what it
	// holds, and the self-check leaves the tickets alone.
	stopping atomic.Bool
}

// Each consumer declares the small interface it needs of another service; New wires these to them.
var (
	_ outcomeRecorder  = (*Completer)(nil)
	_ outcomeDeliverer = (*Deliverer)(nil)
	_ outcomeReporter  = (*Deliverer)(nil)
	_ heartbeatSender  = (*Heartbeater)(nil)
	_ ticketRunner     = (*Runner)(nil)
	_ subscriber       = (*store.Notifier)(nil)
	_ claimWaiters     = (*store.Notifier)(nil)
)

// listens reports whether this owner listens for its admissions (store.Queue.RenewListening): it has
// a listener and is not stopping. Claims then move its tickets straight to running and name them in
// its notifications, for the Runner to read rather than take.
func (d *deps) listens() bool { return !d.cfg.listen().Off && !d.stopping.Load() }

// checkSoon asks for a self-check: a statement that changes this owner's tickets failed, or its
// commit's answer was lost, so Postgres and the registry may disagree.
func (d *deps) checkSoon() {
	select {
	case d.checkNow <- struct{}{}:
	default: // one is asked for already
	}
}

// Dispatcher is one owner's set of services. Start it once the schema is migrated and the routes'
// limits exist; stop it to hand everything it holds back to Temporal.
type Dispatcher struct {
	deps        *deps
	notifier    *store.Notifier
	notify      loops
	claimer     *Claimer
	runner      *Runner
	completer   *Completer
	enqueuer    *Enqueuer
	deliverer   *Deliverer
	heartbeater *Heartbeater
	// The maintenance services, one job each; each runs on its own, so that none delays another.
	leaseRenewer *LeaseRenewer
	rescuer      *Rescuer
	gauger       *Gauger
	forgetter    *Forgetter
	pruner       *Pruner
	selfChecker  *SelfChecker

	mu          sync.Mutex // serialises Start and Stop
	endLife     context.CancelFunc
	stopTimeout atomic.Int64
	knownKeys   sync.Map // derived limit keys this process has made sure exist
}

// New returns a stopped dispatcher with its queue over cfg.Pool. It does not touch the database.
func New(cfg Config) (*Dispatcher, error) {
	q, err := store.New(cfg.Pool, store.Options{Schema: cfg.Schema, Now: cfg.Clock})
	if err != nil {
		return nil, fmt.Errorf("sluice: Options.Schema: %w", err)
	}
	dp := &deps{cfg: cfg, q: q, reg: NewRegistry(cfg.MaxHeld), tm: telemetry.New(cfg.TracerProvider, cfg.MetricsHandler),
		enc: encoder{data: cfg.DataConverter, failure: cfg.FailureConverter}, log: cfg.Logger, life: context.Background(),
		checkNow: make(chan struct{}, 1)}
	d := &Dispatcher{deps: dp, notifier: q.NewNotifier(cfg.Logger).WithListen(cfg.listen())}
	d.deliverer = &Deliverer{deps: dp}
	d.completer = newCompleter(dp)
	d.heartbeater = &Heartbeater{deps: dp, reporter: d.deliverer}
	d.runner = &Runner{deps: dp, recorder: d.completer, deliverer: d.deliverer, heartbeat: d.heartbeater, notifier: d.notifier}
	d.enqueuer = newEnqueuer(dp, d.runner, d.deliverer)
	d.claimer = &Claimer{deps: dp, notifier: d.notifier, runner: d.runner, deliverer: d.deliverer}
	d.leaseRenewer = &LeaseRenewer{deps: dp}
	d.rescuer = &Rescuer{deps: dp}
	d.gauger = &Gauger{deps: dp, keys: cfg.keys()}
	d.forgetter = &Forgetter{deps: dp}
	d.pruner = &Pruner{deps: dp, interval: pruneEvery}
	d.selfChecker = &SelfChecker{deps: dp, runner: d.runner}
	d.deps.stopping.Store(true)
	return d, nil
}

// Queue returns the dispatcher's queue: the plugin's one connection to its schema.
func (d *Dispatcher) Queue() *store.Queue { return d.deps.q }

// SetStopTimeout sets how long a stop lets running activities finish: the worker's WorkerStopTimeout.
func (d *Dispatcher) SetStopTimeout(t time.Duration) { d.stopTimeout.Store(int64(t)) }

// Stopping reports whether the dispatcher is stopped or stopping: new activities are refused.
func (d *Dispatcher) Stopping() bool { return d.deps.stopping.Load() }

// Start prepares the schema (migrations, Config.Limits, every routed limit present), takes the
// owner's lease and starts the services.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.endLife != nil {
		return errStarted
	}
	if err := d.prepare(ctx); err != nil {
		return err
	}
	// Listening from the start: the Runner's first read takes in whatever was named before it
	// subscribed (store.Notifier.NotifiedIDs reports it missed).
	if _, err := d.deps.q.RenewListening(ctx, d.deps.cfg.Owner, d.deps.cfg.LeaseTTL, !d.deps.cfg.listen().Off); err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	d.deps.life, d.endLife = context.WithCancel(context.WithoutCancel(ctx))
	started := append([]service{d.completer, d.deliverer, d.heartbeater}, d.maintenance()...)
	started = append(started, d.runner, d.enqueuer, d.claimer)
	err := d.notify.start(ctx, func(ctx context.Context) { _ = d.notifier.Run(ctx) })
	for _, s := range started {
		if err != nil {
			break
		}
		err = s.Start(ctx)
	}
	if err != nil {
		err = errors.Join(err, d.stopServices(ctx))
		d.endLife()
		d.endLife = nil
		return err
	}
	d.deps.stopping.Store(false)
	return nil
}

// Stop stops claiming and hands the queued tickets back at once, gives running ones the stop timeout,
// cancels those still running and hands back what is left, then stops the services and drops the
// lease. Stop is safe before Start and safe to call twice.
func (d *Dispatcher) Stop(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.endLife == nil {
		return
	}
	d.deps.stopping.Store(true)
	bg := context.WithoutCancel(ctx)
	// Claims from now on admit this owner's tickets for a take, which the stop hands back at once,
	// rather than moving them to running for a runner that is about to stop.
	if err := d.deps.q.StopListening(bg, d.deps.cfg.Owner); err != nil {
		d.deps.log.Warn("sluice: stop listening", "owner", d.deps.cfg.Owner, "error", err)
	}
	_ = d.claimer.Stop(bg)
	// No ticket is written after this, so the hand-back finds every one.
	_ = d.enqueuer.Stop(bg)
	d.handBackOwn(bg, true)
	grace, cancel := context.WithTimeout(bg, drainGrace)
	if !d.runner.Drain(grace, time.Duration(d.stopTimeout.Load())) {
		d.deps.log.Warn("sluice: activities ignored cancellation at worker stop; their tickets are handed back and their results dropped")
	}
	cancel()
	d.handBackOwn(bg, false)
	_ = d.stopServices(bg)
	d.endLife()
	d.endLife = nil
	if err := d.deps.q.DropLease(bg, d.deps.cfg.Owner); err != nil {
		d.deps.log.Warn("sluice: drop lease", "owner", d.deps.cfg.Owner, "error", err)
	}
}

// maintenance returns the maintenance services in the order they start.
func (d *Dispatcher) maintenance() []service {
	return []service{d.leaseRenewer, d.rescuer, d.gauger, d.forgetter, d.pruner, d.selfChecker}
}

// stopServices stops every service, the last started first.
func (d *Dispatcher) stopServices(ctx context.Context) error {
	errs := []error{d.claimer.Stop(ctx), d.enqueuer.Stop(ctx), d.runner.Stop(ctx)}
	for _, s := range slices.Backward(d.maintenance()) {
		errs = append(errs, s.Stop(ctx))
	}
	return errors.Join(append(errs, d.heartbeater.Stop(ctx), d.deliverer.Stop(ctx), d.completer.Stop(ctx), d.notify.stop(ctx))...)
}

// handBackOwn hands this owner's unfinished tickets back to Temporal and delivers the hand-backs. The
// hand-back skips tickets other transactions hold locked (another owner's claim admitting one of ours,
// a claim of ours cancelled by the stop whose backend still holds its locks), so it goes on until none
// is left, each time the lock holders are done, or until handBackSettle has passed: what is left then
// is handed back by the survivors once the lease is gone.
func (d *Dispatcher) handBackOwn(ctx context.Context, skipRunning bool) {
	settle, cancel := context.WithTimeout(ctx, handBackSettle)
	defer cancel()
	logged := false
	for {
		ts, err := d.deps.q.HandBack(settle, store.HandBackParams{Owner: d.deps.cfg.Owner, SkipRunning: skipRunning})
		if err != nil {
			d.deps.log.Error("sluice: hand back tickets at stop", "error", err)
			return
		}
		for _, t := range ts {
			d.deps.reg.dropTicket(t, errStopping)
			d.deps.tm.ForKey(t.LineKey).Counter(telemetry.MetricTicketsHandedBack).Inc(1)
			d.deliverer.DeliverAndAck(ctx, t)
		}
		if len(ts) > 0 {
			continue
		}
		left, err := d.deps.q.Unfinished(settle, d.deps.cfg.Owner, skipRunning)
		if err == nil && left == 0 {
			return
		}
		if err == nil && !logged {
			d.deps.log.Debug(msgStopWaitsForLocks, "owner", d.deps.cfg.Owner, "tickets", left)
			logged = true
		}
		if err != nil || !wait(settle, nil, handBackRetry) {
			d.deps.log.Warn("sluice: tickets left at stop, for the survivors to hand back", "owner", d.deps.cfg.Owner,
				"tickets", left, "error", cmp.Or(err, context.Cause(settle)))
			return
		}
	}
}

// Enqueue holds inv and writes its ticket through the Enqueuer, which writes the tickets of concurrent
// calls in one statement; a ticket naming a limit that does not exist fails with
// store.ErrUnknownLimit. Past MaxHeld invocations it waits for a slot, until ctx is
// done, so that the backlog stays in Temporal's task queue rather than in this process's memory.
func (d *Dispatcher) Enqueue(ctx context.Context, inv *Invocation, p store.EnqueueParams) error {
	if err := d.deps.reg.acquire(ctx); err != nil {
		return err
	}
	p.Owner = d.deps.cfg.Owner
	p.TraceContext = d.deps.tm.Inject(ctx)
	// Held before the ticket exists, so that an admission racing the enqueue finds it.
	d.deps.reg.hold(inv)
	t, err := d.enqueuer.Write(ctx, p)
	if err != nil {
		// The ticket may have been written all the same (the commit's answer was lost), admitted, and
		// its invocation looked up by the runner: letGo refuses that run's begin (the runner hands the
		// ticket back). One that began first is cancelled: the caller fails this attempt, and
		// Temporal retries the activity.
		if cancel, running := d.deps.reg.letGo(inv); running {
			cancel(errActivityGone)
		}
		return err
	}
	inv.setTicket(t.ID)
	d.deps.tm.ForKey(inv.Line()).Counter(telemetry.MetricTicketsQueued).Inc(1)
	return nil
}

// EnsureLimits creates the limits whose keys this process has not made sure exist yet; existing ones
// are left as they are, so that a runtime change to them sticks.
func (d *Dispatcher) EnsureLimits(ctx context.Context, limits []throttle.Limit) error {
	var create []throttle.Limit
	for _, l := range limits {
		if _, known := d.knownKeys.Load(l.Key); !known {
			create = append(create, l)
		}
	}
	if len(create) == 0 {
		return nil
	}
	if err := d.deps.q.EnsureLimits(ctx, create...); err != nil {
		return err
	}
	for _, l := range create {
		d.knownKeys.Store(l.Key, true)
	}
	return nil
}

// RecordHeartbeat keeps the details an activity Sluice runs heartbeats with and sends them when due.
func (d *Dispatcher) RecordHeartbeat(inv *Invocation, details []any) {
	d.heartbeater.RecordDetails(inv, details)
}
