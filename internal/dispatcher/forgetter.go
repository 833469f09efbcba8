package dispatcher

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/testsignal"
)

// Forgetter forgets, every sweepEvery, the queued invocations whose Temporal deadline has passed:
// Temporal has timed them out, so there is no one to report to, and the claim removes their tickets
// (a ticket admitted meanwhile is released by the Runner, which no longer finds its invocation, or
// finds it let go: see Registry.letGo).
type Forgetter struct {
	loops
	*deps
	signals forgetterSignals
}

// forgetterSignals are the Forgetter's events, for tests.
type forgetterSignals struct {
	Forgot testsignal.Signal[[]*Invocation] // a pass ended; the invocations it forgot, maybe none
}

// Start starts the loop that forgets expired invocations.
func (f *Forgetter) Start(ctx context.Context) error { return f.start(ctx, f.loop) }

// Stop ends the loop.
func (f *Forgetter) Stop(ctx context.Context) error { return f.stop(ctx) }

func (f *Forgetter) loop(ctx context.Context) {
	every(ctx, sweepEvery(f.cfg), func() { f.forgetExpired(time.Now()) })
}

// forgetExpired forgets the invocations expired at now.
func (f *Forgetter) forgetExpired(now time.Time) {
	var forgot []*Invocation
	for _, inv := range f.reg.snapshot() {
		if !inv.expired(now) {
			continue
		}
		// The runner may have taken its ticket and looked it up: letGo keeps a run that began since
		// expired looked (its context's deadline has passed: it ends soon), and no run begins after.
		if _, running := f.reg.letGo(inv); !running {
			forgot = append(forgot, inv)
		}
	}
	f.signals.Forgot.Signal(forgot)
}
