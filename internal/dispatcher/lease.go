package dispatcher

import (
	"context"

	"github.com/sluicehq/sluice/internal/testsignal"
)

// LeaseRenewer keeps this process's lease: it renews it every LeaseTTL/3. It is a service of its own
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
}

// Start starts the renewal loop. Start renews nothing at once: the dispatcher has taken the lease.
func (l *LeaseRenewer) Start(ctx context.Context) error { return l.start(ctx, l.loop) }

// Stop ends the renewal loop. It does not drop the lease: the dispatcher does, once everything it owns
// is handed back.
func (l *LeaseRenewer) Stop(ctx context.Context) error { return l.stop(ctx) }

func (l *LeaseRenewer) loop(ctx context.Context) {
	every(ctx, l.cfg.LeaseTTL/3, func() { l.renew(ctx) })
}

// renew renews the lease once, warning when it failed or had lapsed.
func (l *LeaseRenewer) renew(ctx context.Context) {
	lapsed, err := l.q.RenewLease(ctx, l.cfg.Owner, l.cfg.LeaseTTL)
	switch {
	case err != nil && ctx.Err() == nil:
		l.log.Warn("sluice: renew lease", "owner", l.cfg.Owner, "error", err)
	case lapsed:
		l.log.Warn("sluice: this process's lease lapsed before it was renewed: other processes may have handed "+
			"its tickets back, and activities it still runs may run again elsewhere; a process starved of CPU "+
			"or of pool connections needs a longer LeaseTTL", "owner", l.cfg.Owner, "lease_ttl", l.cfg.LeaseTTL)
	}
	l.signals.Renewed.Signal(renewal{lapsed: lapsed, err: err})
}
