package dispatcher

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/testsignal"
)

// sweepEvery is how often the Rescuer, the Gauger and the Forgetter each run, given LeaseTTL: every
// second, or LeaseTTL/3 if shorter, so that a dead owner's tickets are handed back within a third of
// a lease after it expired.
func sweepEvery(cfg Config) time.Duration { return min(time.Second, cfg.LeaseTTL/3) }

// Rescuer hands back to Temporal the unfinished tickets of owners whose lease expired (dead or
// starved processes): their limits are released, and every replica's Deliverer reports a retryable
// failure for each. Any survivor does it, every sweepEvery.
type Rescuer struct {
	loops
	*deps
	signals rescuerSignals
}

// rescuerSignals are the Rescuer's events, for tests.
type rescuerSignals struct {
	Rescued testsignal.Signal[[]store.Ticket] // a pass ended; the tickets it handed back, maybe none
}

// Start starts the hand-back loop.
func (r *Rescuer) Start(ctx context.Context) error { return r.start(ctx, r.loop) }

// Stop ends the hand-back loop.
func (r *Rescuer) Stop(ctx context.Context) error { return r.stop(ctx) }

func (r *Rescuer) loop(ctx context.Context) {
	every(ctx, sweepEvery(r.cfg), func() { r.rescue(ctx) })
}

// rescue hands back dead owners' tickets once, counting and logging them by owner.
func (r *Rescuer) rescue(ctx context.Context) {
	back, err := r.q.HandBack(ctx, store.HandBackParams{})
	if err != nil && ctx.Err() == nil {
		r.log.Warn("sluice: hand back tickets of dead owners", "error", err)
	}
	dead := map[string]int{}
	for _, t := range back {
		r.tm.ForKey(t.LineKey).Counter(telemetry.MetricTicketsHandedBack).Inc(1)
		dead[t.Owner]++
	}
	for owner, n := range dead {
		r.log.Warn("sluice: handed back the tickets of a process whose lease expired", "owner", owner, "tickets", n)
	}
	r.signals.Rescued.Signal(back)
}
