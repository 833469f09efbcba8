package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// errStarted is returned by a service's Start when it already runs.
var errStarted = errors.New("sluice: service already started")

// service is what every service of the package is: Start runs its goroutines, Stop ends them and
// waits for them. Stop is safe before Start and safe to call twice; a stopped service starts again.
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// loops is what every service embeds: the one owner of its goroutines. start runs each function in
// its own goroutine with a context that stop cancels; stop waits for all of them to return. stop is
// safe before start and safe to call twice; a stopped service may be started again.
type loops struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	wg     *sync.WaitGroup
}

// start runs fns with a context that is ctx's values without its cancellation: the service lives
// until stop, not until the caller's context ends.
func (l *loops) start(ctx context.Context, fns ...func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wg != nil {
		return errStarted
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.wg = &sync.WaitGroup{}
	for _, fn := range fns {
		l.wg.Go(func() { fn(ctx) })
	}
	return nil
}

// stop cancels the goroutines' context and waits for them to return. Every loop of this package ends
// promptly on cancellation (its waits select on the context, its queries take it), so the wait is not
// bounded by ctx: returning before they end would leak them.
func (l *loops) stop(context.Context) error {
	l.mu.Lock()
	cancel, wg := l.cancel, l.wg
	l.cancel, l.wg = nil, nil
	l.mu.Unlock()
	if wg == nil {
		return nil
	}
	cancel()
	wg.Wait()
	return nil
}

// takeLoop takes up to batch tickets with take and hands each to each, at once again while batches
// come back full, else after wake fires or every poll, until ctx is done. what names the take in
// the warning a failed one logs.
func (d *deps) takeLoop(ctx context.Context, wake <-chan struct{}, what string,
	take func(ctx context.Context, batch int) ([]store.Ticket, error), each func(context.Context, store.Ticket)) {
	for {
		ts, err := take(ctx, d.cfg.ClaimBatch)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.log.Warn("sluice: "+what, "error", err)
		}
		for _, t := range ts {
			each(ctx, t)
		}
		if len(ts) == d.cfg.ClaimBatch {
			continue
		}
		if !wait(ctx, wake, d.cfg.PollInterval) {
			return
		}
	}
}

// every calls fn every d until ctx is done.
func every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn()
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
