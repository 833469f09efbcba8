package pgqueue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

func TestQueue_CompleteMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ReleasesAndReconcilesEachTicketInOneTransaction", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t,
			throttle.Limit{Key: "k", MaxConcurrent: 5, TokensPerMinute: 6000},
			throttle.Limit{Key: "tenant", MaxConcurrent: 5})
		a := enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"k", "tenant"}, Cost: 100})
		b := enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"k"}, Cost: 200})
		c := enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"k"}, Cost: 300})
		require.Len(t, claim(t, q, pgqueue.ClaimParams{}).Admitted, 3)
		before, err := q.LimitStatus(ctx, "k")
		require.NoError(t, err)

		found, err := q.CompleteMany(ctx, []pgqueue.CompleteParams{
			{TicketID: b.ID, ActualCost: -1, OutcomeKind: pgqueue.OutcomeFailed, Outcome: []byte("f")},
			{TicketID: 999_999, OutcomeKind: pgqueue.OutcomeCompleted}, // no such ticket
			{TicketID: a.ID, ActualCost: 40, OutcomeKind: pgqueue.OutcomeCompleted, Outcome: []byte("r")},
		})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true}, found)

		k, err := q.LimitStatus(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, 1, k.State.InflightCount, "c is still in flight")
		require.Equal(t, c.Cost, k.State.InflightTokens)
		// a used 40 of its 100 (60 back); b did not report (its 200 stay spent). The clock is
		// injected and does not move, so the bucket moved by the reconciliation alone.
		require.InDelta(t, before.State.Tokens.Level+60, k.State.Tokens.Level, 1e-9)
		tenant, err := q.LimitStatus(ctx, "tenant")
		require.NoError(t, err)
		require.Zero(t, tenant.State.InflightCount)

		ga, err := q.Ticket(ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, pgqueue.TicketStateFinished, ga.State)
		require.Equal(t, int64(40), ga.ActualCost)
		require.Equal(t, []byte("r"), ga.Outcome)
		gb, err := q.Ticket(ctx, b.ID)
		require.NoError(t, err)
		require.Equal(t, pgqueue.OutcomeFailed, gb.OutcomeKind)
		require.Equal(t, int64(-1), gb.ActualCost, "an unreported cost is stored as unknown")
		requireHealthy(t, q)

		found, err = q.CompleteMany(ctx, []pgqueue.CompleteParams{{TicketID: a.ID}, {TicketID: c.ID, ActualCost: 300}})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, found, "a was completed already")
		requireHealthy(t, q)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
		_, err := q.CompleteMany(ctx, []pgqueue.CompleteParams{{TicketID: 1}, {TicketID: 1}})
		require.ErrorContains(t, err, "ticket 1 is given twice")
		_, err = q.CompleteMany(ctx, make([]pgqueue.CompleteParams, pgqueue.MaxCompleteBatch+1))
		require.ErrorContains(t, err, "at most 10000")
		found, err := q.CompleteMany(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, found)
	})
}
