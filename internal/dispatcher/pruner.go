package dispatcher

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testsignal"
)

// pruneEvery is how often the Pruner prunes finished rows.
const pruneEvery = time.Minute

// Pruner deletes, every pruneEvery, the rows the queue no longer needs, with store.Queue.Prune's
// defaults: returned tickets and lapsed owners an hour old, fairness rows of idle keys, usage history
// older than an hour, and limit history older than store.LimitHistoryRetention (90 days).
type Pruner struct {
	loops
	*deps
	interval time.Duration // pruneEvery; tests shorten it
	signals  prunerSignals
}

// prunerSignals are the Pruner's events, for tests.
type prunerSignals struct {
	Pruned testsignal.Signal[error] // a prune returned; its error, nil when it pruned
}

// Start starts the pruning loop. The first prune is a pruneEvery after Start.
func (p *Pruner) Start(ctx context.Context) error { return p.start(ctx, p.loop) }

// Stop ends the pruning loop.
func (p *Pruner) Stop(ctx context.Context) error { return p.stop(ctx) }

func (p *Pruner) loop(ctx context.Context) {
	every(ctx, p.interval, func() { p.prune(ctx) })
}

func (p *Pruner) prune(ctx context.Context) {
	_, err := p.q.Prune(ctx, store.PruneParams{})
	if err != nil && ctx.Err() == nil {
		p.log.Warn("sluice: prune", "error", err)
	}
	p.signals.Pruned.Signal(err)
}
