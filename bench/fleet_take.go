package main

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// takeLoop is internal/dispatcher's Runner.loop over deps.takeLoop and Runner.take: read the tickets
// claims moved to running and named in this owner's notifications (all its running ones when some
// may have been missed), then take up to a batch of its admitted ones (a claim that did not see it
// listening); again at once while takes come back full, else after the owner's admission is notified
// or the poll. One round at a time: notifications coalesce.
func (r *replica) takeLoop(ctx context.Context) {
	admitted, unsubscribe := r.notifier.Subscribe(store.TopicAdmitted(r.owner))
	defer unsubscribe()
	st := &r.tally.stats
	for {
		var ts, taken []store.Ticket
		var err error
		ids, missed, woken := r.notifier.NotifiedIDs(r.owner)
		if missed || len(ids) > 0 {
			if missed {
				ids = nil
			}
			ts, err = r.q.RunningTickets(ctx, r.owner, ids)
			st.reads.Add(1)
			if err != nil && ctx.Err() == nil { // one cut short by the run's end is no failure
				st.failedTakes.Add(1)
				r.tally.fail("read", err)
			}
		}
		if woken || !missed && len(ids) == 0 {
			taken, err = r.q.TakeAdmitted(ctx, r.owner, r.batch)
			st.takes.Add(1)
			if err != nil && ctx.Err() == nil {
				st.failedTakes.Add(1)
				r.tally.fail("take", err)
			}
			if len(taken) == 0 {
				st.emptyTakes.Add(1)
			}
		}
		if ctx.Err() != nil {
			return
		}
		st.taken.Add(int64(len(ts) + len(taken)))
		r.tally.lagged(append(ts[:len(ts):len(ts)], taken...), time.Now())
		r.finished(ts, true)
		r.finished(taken, false)
		if len(taken) == r.batch {
			continue
		}
		t := time.NewTimer(r.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-admitted:
		case <-t.C:
		}
		t.Stop()
	}
}
