package dispatcher

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/testsignal"
)

// LeaseRenewer keeps this process's lease: it renews it every LeaseTTL/3, and every leaseRetry after
// a renewal failed until one succeeds, so that a lease outlives a database outage of up to about
// two thirds of LeaseTTL (at a fixed LeaseTTL/3 two failed renewals in a row let it lapse while the
// process lives: a restart that came just after a failed renewal was enough). It is a service of its own
// so that nothing slow (a hand-back's queries on a busy database) can delay a renewal: a lease that
// lapses while its owner lives gets the owner's running tickets handed back by the other processes'
// Rescuers, and their slots released, while they run.
type LeaseRenewer struct {
	loops
	*deps
	signals leaseSignals
}

// leaseSignals are the LeaseRenewer's events, for tests.
type leaseSignals struct {
	Renewed testsignal.Signal[renewal] // a renewal returned
}

// renewal is what one renewal found.
type renewal struct {
	lapsed bool // the lease had expired before this renewal took it again
	err    error
	next   time.Duration // how long until the next renewal
}

// Start starts the renewal loop. Start renews nothing at once: the dispatcher has taken the lease.
func (l *LeaseRenewer) Start(ctx context.Context) error { return l.start(ctx, l.loop) }

// Stop ends the renewal loop. It does not drop the lease: the dispatcher does, once everything it owns
// is handed back.
func (l *LeaseRenewer) Stop(ctx context.Context) error { return l.stop(ctx) }

func (l *LeaseRenewer) loop(ctx context.Context) {
	interval := l.cfg.LeaseTTL / 3
	for next := interval; wait(ctx, nil, next); {
		r := l.renew(ctx)
		next = nextRenewal(interval, r.err)
		r.next = next
		l.signals.Renewed.Signal(r)
	}
}

// leaseRetry is how soon a failed renewal is tried again (LeaseTTL/3 if that is sooner).
const leaseRetry = 250 * time.Millisecond

// nextRenewal is how long after a renewal that returned err the next one comes.
func nextRenewal(interval time.Duration, err error) time.Duration {
	if err != nil {
		return min(interval, leaseRetry)
	}
	return interval
}

// renew renews the lease once, warning when it failed or had lapsed.
func (l *LeaseRenewer) renew(ctx context.Context) renewal {
	lapsed, err := l.q.RenewListening(ctx, l.cfg.Owner, l.cfg.LeaseTTL, l.listens())
	switch {
	case err != nil && ctx.Err() == nil:
		l.log.Warn("sluice: renew lease", "owner", l.cfg.Owner, "error", err)
	case lapsed:
		l.log.Warn("sluice: this process's lease lapsed before it was renewed: other processes may have handed "+
			"its tickets back, and activities it still runs may run again elsewhere; a process starved of CPU "+
			"or of pool connections needs a longer LeaseTTL", "owner", l.cfg.Owner, "lease_ttl", l.cfg.LeaseTTL)
	}
	return renewal{lapsed: lapsed, err: err}
}
