package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
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
		a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k", "tenant"}, Cost: 100})
		b := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 200})
		c := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 300})
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 3)
		before, err := q.LimitStatus(ctx, "k")
		require.NoError(t, err)

		found, err := q.CompleteMany(ctx, []store.CompleteParams{
			{TicketID: b.ID, ActualCost: -1, OutcomeKind: store.OutcomeFailed, Outcome: []byte("f")},
			{TicketID: 999_999, OutcomeKind: store.OutcomeCompleted}, // no such ticket
			{TicketID: a.ID, ActualCost: 40, OutcomeKind: store.OutcomeCompleted, Outcome: []byte("r")},
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
		require.Equal(t, store.TicketStateFinished, ga.State)
		require.Equal(t, int64(40), ga.ActualCost)
		require.Equal(t, []byte("r"), ga.Outcome)
		gb, err := q.Ticket(ctx, b.ID)
		require.NoError(t, err)
		require.Equal(t, store.OutcomeFailed, gb.OutcomeKind)
		require.Equal(t, int64(-1), gb.ActualCost, "an unreported cost is stored as unknown")
		requireHealthy(t, q)

		found, err = q.CompleteMany(ctx, []store.CompleteParams{{TicketID: a.ID}, {TicketID: c.ID, ActualCost: 300}})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, found, "a was completed already")
		requireHealthy(t, q)
	})

	// An outcome Temporal has already (the runner delivered it before recording) is completed by
	// deleting its ticket, reconciled as any other; one Temporal does not have stays finished for the
	// deliverers, and a handed-back outcome stays whatever the caller says, for its retry's place.
	t.Run("DeliveredOutcomesLeaveNoRow", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5, TokensPerMinute: 6000})
		a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 100})
		b := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 200})
		c := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 300})
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 3)
		before, err := q.LimitStatus(ctx, "k")
		require.NoError(t, err)

		found, err := q.CompleteMany(ctx, []store.CompleteParams{
			{TicketID: a.ID, ActualCost: 40, OutcomeKind: store.OutcomeCompleted, Outcome: []byte("r"), Delivered: true},
			{TicketID: b.ID, ActualCost: 50, OutcomeKind: store.OutcomeCompleted, Outcome: []byte("s")},
			{TicketID: c.ID, ActualCost: 0, OutcomeKind: store.OutcomeHandedBack, Delivered: true},
		})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true}, found)

		k, err := q.LimitStatus(ctx, "k")
		require.NoError(t, err)
		require.Zero(t, k.State.InflightCount)
		require.Zero(t, k.State.InflightTokens)
		require.InDelta(t, before.State.Tokens.Level+60+150+300, k.State.Tokens.Level, 1e-9, "each reconciled to its usage")
		_, err = q.Ticket(ctx, a.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "a delivered outcome leaves no row")
		due, err := q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []int64{b.ID, c.ID}, ids(due), "the undelivered and the handed-back are kept for the deliverers")

		found, err = q.CompleteMany(ctx, []store.CompleteParams{{TicketID: a.ID, Delivered: true, OutcomeKind: store.OutcomeCompleted}})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, found, "a was completed already")
		requireHealthy(t, q)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
		_, err := q.CompleteMany(ctx, []store.CompleteParams{{TicketID: 1}, {TicketID: 1}})
		require.ErrorContains(t, err, "ticket 1 is given twice")
		_, err = q.CompleteMany(ctx, make([]store.CompleteParams, store.MaxCompleteBatch+1))
		require.ErrorContains(t, err, "at most 10000")
		found, err := q.CompleteMany(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, found)
	})
}

// A completion finds each ticket by a probe of its primary key, whatever the planner's statistics
// say. Taken while every ticket was queued, they made the planner estimate one ticket not queued,
// scan the whole table and read the batch's input once per row it found: quadratic, 124 ms of a
// completion of 100 runs at 8 replicas.
func TestQueue_CompleteManyProbesEachTicket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 100_000})
	ps := make([]store.EnqueueParams, 2000)
	for i := range ps {
		ps[i] = store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1, Owner: "owner-1"}
	}
	_, err := q.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	require.NoError(t, store.AnalyzeTickets(ctx, q)) // every ticket queued
	admitted := claim(t, q, store.ClaimParams{Max: 1000}).Admitted
	require.Len(t, admitted, 1000)

	plan, err := store.ExplainComplete(ctx, q, ids(admitted[:100]))
	require.NoError(t, err)
	require.NotContains(t, plan, "Seq Scan on sluice_ticket", plan)
	require.Contains(t, plan, "Index Scan using sluice_ticket_pkey", plan)

	cs := make([]store.CompleteParams, 100)
	for i, tk := range admitted[:100] {
		cs[len(cs)-1-i] = store.CompleteParams{TicketID: tk.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted, Delivered: true}
	}
	order, index, err := store.CompleteOrder(cs)
	require.NoError(t, err)
	require.True(t, slices.IsSorted(order), "the statement locks the tickets in ID order: %v", order)
	for id, at := range index {
		require.Equal(t, id, cs[at].TicketID, "each ticket's position in the runs as given")
	}
	found, err := q.CompleteMany(ctx, cs)
	require.NoError(t, err)
	require.NotContains(t, found, false)
	requireHealthy(t, q)
}
