package dispatcher

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/pgqueue"
)

// pruneEvery is how often the maintainer prunes finished rows.
const pruneEvery = time.Minute

// Maintainer keeps the owner's lease and the shared tables in order. It runs three loops:
//   - renew: renews this process's lease every LeaseTTL/3. It is a loop of its own so that nothing
//     slow (a sweep's queries on a busy database) can delay a renewal: a lease that lapses while its
//     owner lives gets the owner's running tickets handed back, and their slots released, while they
//     run.
//   - sweep: every second (or LeaseTTL/3 if shorter) hands back dead owners' tickets (the deliverers
//     report them), publishes the in-flight gauges, forgets queued invocations Temporal has timed out,
//     and every minute prunes old rows.
//   - self-check: every SelfCheckInterval, and soon after a statement's outcome was unknown, holds
//     what Postgres says this owner holds against its registry and reconciles the difference (see
//     selfCheck).
type Maintainer struct {
	loops
	*deps
	runner  ticketRunner
	keys    []string                  // the keys of the gauges: every limit the routes name
	strikes map[int64]reconcileAction // mismatches seen by the last self-check, by ticket; its loop's own
}

// Start starts the renew and sweep loops.
func (m *Maintainer) Start(ctx context.Context) error {
	return m.start(ctx, m.renew, m.sweep, m.selfCheckLoop)
}

// Stop ends both loops. It does not drop the lease: the dispatcher does, once everything it owns is
// handed back.
func (m *Maintainer) Stop(ctx context.Context) error { return m.stop(ctx) }

func (m *Maintainer) renew(ctx context.Context) {
	every(ctx, m.cfg.LeaseTTL/3, func() {
		lapsed, err := m.q.RenewLease(ctx, m.cfg.Owner, m.cfg.LeaseTTL)
		switch {
		case err != nil && ctx.Err() == nil:
			m.log.Warn("sluice: renew lease", "owner", m.cfg.Owner, "error", err)
		case lapsed:
			m.log.Warn("sluice: this process's lease lapsed before it was renewed: other processes may have handed "+
				"its tickets back, and activities it still runs may run again elsewhere; a process starved of CPU "+
				"or of pool connections needs a longer LeaseTTL", "owner", m.cfg.Owner, "lease_ttl", m.cfg.LeaseTTL)
		}
	})
}

func (m *Maintainer) sweep(ctx context.Context) {
	lastPrune := time.Now()
	every(ctx, min(time.Second, m.cfg.LeaseTTL/3), func() {
		// Any survivor hands back a dead owner's tickets; the delivery loops report them.
		back, err := m.q.HandBack(ctx, pgqueue.HandBackParams{})
		if err != nil && ctx.Err() == nil {
			m.log.Warn("sluice: hand back tickets of dead owners", "error", err)
		}
		dead := map[string]int{}
		for _, t := range back {
			m.tm.ForKey(t.LineKey).Counter(telemetry.MetricTicketsHandedBack).Inc(1)
			dead[t.Owner]++
		}
		for owner, n := range dead {
			m.log.Warn("sluice: handed back the tickets of a process whose lease expired", "owner", owner, "tickets", n)
		}
		m.gauges(ctx)
		m.forgetExpired(time.Now())
		if time.Since(lastPrune) > pruneEvery {
			lastPrune = time.Now()
			if _, err := m.q.Prune(ctx, pgqueue.PruneParams{}); err != nil && ctx.Err() == nil {
				m.log.Warn("sluice: prune", "error", err)
			}
		}
	})
}

// forgetExpired forgets queued invocations whose Temporal deadline has passed: Temporal has timed
// them out, and the claim removes their tickets.
func (m *Maintainer) forgetExpired(now time.Time) {
	for _, inv := range m.reg.snapshot() {
		if inv.expired(now) {
			m.reg.drop(inv)
		}
	}
}

// gauges publishes the in-flight figures of every limit the routes name, as the database has them.
func (m *Maintainer) gauges(ctx context.Context) {
	for _, k := range m.keys {
		if st, err := m.q.LimitStatus(ctx, k); err == nil {
			m.tm.Gauges(k, st.State)
		}
	}
}
