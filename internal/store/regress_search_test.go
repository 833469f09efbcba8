package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// The defects a careful read found (issue "Proof by search"), each reproduced against the engine. The
// simulation (internal/sim, make sim) searches for their kind; these pin the cases that were seen.

// TestQueue_AllowanceAddedInFlight: a release gives back to the allowances that counted the ticket
// at its admission, not to one added while it was in flight, which never counted it.
func TestQueue_AllowanceAddedInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		first throttle.Limit // k as t1 is admitted
		end   func(t *testing.T, q *store.Queue, id int64)
	}{
		{"Cancel", throttle.Limit{Key: "k", MaxConcurrent: 100}, func(t *testing.T, q *store.Queue, id int64) {
			require.NoError(t, q.Cancel(ctx, id))
		}},
		{"Completion", throttle.Limit{Key: "k", MaxConcurrent: 100, Allowances: allowances(t, "requests=100/day")},
			func(t *testing.T, q *store.Queue, id int64) {
				require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: id, ActualCost: 0}))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, _ := setup(t, tc.first)
			t1 := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1000})
			require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)

			added := tc.first
			added.Allowances = append(added.Allowances, allowances(t, "tokens=1500/day")...)
			require.NoError(t, q.UpsertLimits(ctx, added))
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1000})
			require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1, "t2 fits the new allowance")

			tc.end(t, q, t1.ID)
			t3 := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1000})
			res := claim(t, q, store.ClaimParams{})
			require.Empty(t, res.Admitted, "t1's refund must not credit an allowance that never counted it: 2000 of 1500")
			require.Equal(t, throttle.ReasonAllowance, res.Blocked["k"])

			ls, err := q.LimitStatus(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, int64(1000), ls.Allowances[len(ls.Allowances)-1].Used, "t2's reservation alone")
			got, err := q.Ticket(ctx, t3.ID)
			require.NoError(t, err)
			require.Equal(t, store.TicketStateQueued, got.State)
			requireHealthy(t, q)
		})
	}
}

// TestQueue_AbsurdUsageIsBounded: usage reported far above what any call uses is bounded where it
// enters, so that no sum overflows: claims on the key and on every other line go on, and its status
// reads.
func TestQueue_AbsurdUsageIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 10, Allowances: allowances(t, "tokens=1000000/1h")},
		throttle.Limit{Key: "other", MaxConcurrent: 10})
	for range 2 {
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 10})
	}
	res := claim(t, q, store.ClaimParams{})
	require.Len(t, res.Admitted, 2)
	for _, a := range res.Admitted {
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: a.ID, ActualCost: 1 << 62, ActualMoney: 1 << 62}))
	}
	queued := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 10})
	other := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"other"}})
	res, err := q.Claim(ctx, store.ClaimParams{})
	require.NoError(t, err, "a claim folds the bounded usage without overflowing")
	require.Equal(t, []int64{other.ID}, ticketIDs(res.Admitted), "the other line is admitted; k's allowance is spent by the usage")
	ls, err := q.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 2*store.MaxCost, ls.Allowances[0].Used, "each report counts as MaxCost")

	// The rolling hour passes: k admits again.
	b.clock.Add(2 * time.Hour)
	res = claim(t, q, store.ClaimParams{})
	require.Equal(t, []int64{queued.ID}, ticketIDs(res.Admitted))
	requireHealthy(t, q)
}

// TestQueue_RefusalWaitsForPendingRefunds: a ticket an allowance has no room for now is not refused
// while the tickets in flight could give back enough; it is refused once they have given back too
// little, and admitted when they gave back enough.
func TestQueue_RefusalWaitsForPendingRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 10, Allowances: allowances(t, "tokens=3000/day")})
	held := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 2500})
	require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
	// Its deadline comes before the reset (midnight): without the refund it can never be admitted.
	late := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1000, Deadline: b.clock.Now().Add(time.Hour)})
	res := claim(t, q, store.ClaimParams{})
	require.Empty(t, res.Refused, "the ticket in flight may give back 2500: wait for it")
	require.Empty(t, res.Admitted)
	require.True(t, res.WaitsOnRelease, "the claimer claims again when a completion is notified")

	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: held.ID, ActualCost: 400}))
	res = claim(t, q, store.ClaimParams{})
	require.Equal(t, []int64{late.ID}, ticketIDs(res.Admitted), "the refund made room")

	// Now nothing in flight can give back enough: the next is refused at once.
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: late.ID, ActualCost: 1000}))
	last := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 2000, Deadline: b.clock.Now().Add(time.Hour)})
	res = claim(t, q, store.ClaimParams{})
	require.Equal(t, []int64{last.ID}, ticketIDs(res.Refused), "1400 used, nothing in flight: 2000 never fits before the deadline")
	requireHealthy(t, q)
}
