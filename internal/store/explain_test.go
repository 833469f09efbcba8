package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// A ticket held by a full tenant behind a provider with room is explained as the tenant's, not the
// provider's; one held by output tokens names them and its cost; a paused key names the pause.
func TestQueue_Explain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 20}, throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1},
		throttle.Limit{Key: "anthropic", OutputTokensPerMinute: 6_000},
		throttle.Limit{Key: "paused", RequestsPerSecond: 5})
	// Three runs of acme took 10 s each; the runs are measured, from admission to completion.
	for range 3 {
		w := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}})
		require.Equal(t, []int64{w.ID}, ids(claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted))
		b.clock.Add(10 * time.Second)
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: w.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}))
	}
	start := b.clock.Now()
	first := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, WorkflowID: "wf-1", ActivityID: "1"})
	second := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, WorkflowID: "wf-2", ActivityID: "1", Cost: 40_000})
	require.Len(t, claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted, 1)
	b.clock.Add(4 * time.Second) // the first has run 4 s of its like's 10 s

	te, err := q.Explain(ctx, second.ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateQueued, te.Ticket.State)
	require.Equal(t, "concurrency of tenant:acme", te.Ticket.WaitReason, "the claim names the limit that is not its line's")
	e := te.Explanation
	require.NotNil(t, e)
	require.Equal(t, "concurrency", e.WaitsFor)
	require.Equal(t, "tenant:acme", e.Key)
	require.Equal(t, 1, e.Place, "first in its line: the one ahead was admitted")
	require.True(t, e.Limits[0].Room, "openai has room")
	require.Equal(t, throttle.Tokens(40_000), e.Cost)
	require.Equal(t, start.Add(10*time.Second), e.Estimate, "the running ticket has 6 s to go")
	require.Equal(t, e.Estimate, e.EstimateLow, "every run took 10 s: no spread")
	require.Equal(t, e.Estimate, e.EstimateHigh)

	// 40 minutes into a run whose like took 10 s: overdue, and with no deadline its end cannot be
	// told; the estimate does not stay "in 6 s".
	b.clock.Add(40 * time.Minute)
	te, err = q.Explain(ctx, second.ID)
	require.NoError(t, err)
	require.True(t, te.Explanation.Estimate.IsZero())
	require.Contains(t, te.Explanation.Unknown, "has run longer than every recent run on the limit")
	require.Equal(t, 1, te.Explanation.Limits[1].Overdue)
	require.Equal(t, start, te.Explanation.Limits[1].OverdueSince)

	// An admitted ticket needs no explanation.
	te, err = q.Explain(ctx, first.ID)
	require.NoError(t, err)
	require.Nil(t, te.Explanation)
	require.Equal(t, store.TicketStateRunning, te.Ticket.State)

	// Output tokens: the first takes 5,000 of 6,000; the next needs 4,000, 3,000 more at 100 a second.
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 5_500, OutputCost: 5_000})
	out := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 4_500, OutputCost: 4_000})
	require.Len(t, claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted, 1)
	te, err = q.Explain(ctx, out.ID)
	require.NoError(t, err)
	require.Equal(t, "output_tokens", te.Explanation.WaitsFor)
	require.Equal(t, throttle.Cost{Input: 500, Output: 4_000}, te.Explanation.Cost)
	require.Equal(t, b.clock.Now().Add(30*time.Second), te.Explanation.Estimate)

	require.NoError(t, q.Pause(ctx, "paused", b.clock.Now().Add(2*time.Minute)))
	p := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"paused"}})
	te, err = q.Explain(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, "paused", te.Explanation.WaitsFor)
	require.Equal(t, b.clock.Now().Add(2*time.Minute), te.Explanation.Estimate)

	_, err = q.Explain(ctx, 1<<40)
	require.ErrorIs(t, err, store.ErrNotFound)

	found, err := q.FindTickets(ctx, store.TicketQuery{WorkflowID: "wf-2"})
	require.NoError(t, err)
	require.Equal(t, []int64{second.ID}, ids(found))
	found, err = q.FindTickets(ctx, store.TicketQuery{WorkflowID: "wf-2", ActivityID: "2"})
	require.NoError(t, err)
	require.Empty(t, found)
	_, err = q.FindTickets(ctx, store.TicketQuery{})
	require.ErrorContains(t, err, "WorkflowID is required")
	_, err = q.FindTickets(ctx, store.TicketQuery{WorkflowID: "wf-2", Max: -1})
	require.ErrorContains(t, err, "Max must be >= 0, got -1")
}

// The estimate of a ticket behind others on a rate is the instant a claim admits it: not a
// microsecond earlier.
func TestQueue_ExplainEstimateIsWhenAClaimAdmits(t *testing.T) {
	t.Parallel()
	q, b := setup(t, throttle.Limit{Key: "email", RequestsPerSecond: 2, Burst: 1})
	var last store.Ticket
	for range 6 {
		last = enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"email"}})
	}
	te, err := q.Explain(context.Background(), last.ID)
	require.NoError(t, err)
	e := te.Explanation
	require.Equal(t, throttle.WaitAhead, e.WaitsFor)
	require.Equal(t, 6, e.Place)
	require.Equal(t, t0.Add(2500*time.Millisecond), e.Estimate, "five ahead at 2 a second, the first at once")

	// Claim at every half second until the estimate, and a microsecond before each: one ticket is
	// admitted at each, none before, and the last at its estimate.
	for at := t0; !at.After(e.Estimate); at = at.Add(500 * time.Millisecond) {
		if at.After(t0) {
			b.clock.Add(at.Sub(b.clock.Now()) - time.Microsecond)
			require.Empty(t, claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted, "admitted a microsecond before %v", at.Sub(t0))
		}
		b.clock.Add(at.Sub(b.clock.Now()))
		admitted := claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted
		require.Len(t, admitted, 1, "at %v", at.Sub(t0))
		if admitted[0].ID == last.ID {
			require.Equal(t, e.Estimate, at, "admitted at its estimate")
			return
		}
	}
	t.Fatal("not admitted at its estimate")
}

// A run that reported using a quarter of its reservation has the estimate give back three quarters
// of each played admission: the line advances at the pace of usage.
func TestQueue_ExplainCountsRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k", TokensPerMinute: 6_000, TokenBurst: 1_000})
	a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1_000})
	require.Len(t, claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted, 1)
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: a.ID, ActualCost: 250, OutcomeKind: store.OutcomeCompleted}))
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1_000})
	c := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1_000})
	require.Empty(t, claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted, "750 back: short of 1,000")

	te, err := q.Explain(ctx, c.ID)
	require.NoError(t, err)
	// The one ahead at 2.5 s (250 more at 100 a second); 750 of it back at once (no run time: none
	// holds the limit); this one 2.5 s later. Without the refund: 12.5 s.
	require.Equal(t, t0.Add(5*time.Second), te.Explanation.Estimate)
}
