package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// Status, Usage and Tickets read what operators ask of a key: its tickets, its line's head, and what it
// admitted over the last minute, per key and per step.
func TestQueue_Status(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 2, RequestsPerSecond: 10, TokensPerMinute: 60_000},
		throttle.Limit{Key: "tenant", MaxConcurrent: 10})
	for i, p := range []int{5, 1, 3, 2, 4} {
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k", "tenant"}, Cost: int64(100 * (i + 1)), Priority: p,
			WorkflowID: "wf", ActivityType: "Summarize", FairnessKey: "acme"})
	}
	b.clock.Add(2 * time.Second)
	res := claim(t, q, store.ClaimParams{Owner: "owner-1", Max: 10})
	require.Len(t, res.Admitted, 2)
	require.Equal(t, []int{1, 2}, []int{res.Admitted[0].Priority, res.Admitted[1].Priority}, "the line's first two")

	st, err := q.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st, 2)
	k := st[0]
	require.Equal(t, "k", k.Configured.Key)
	require.Equal(t, int64(3), k.Queued)
	require.Equal(t, int64(2), k.Running, "the claimer's own tickets run at once")
	require.Zero(t, k.Admitted)
	require.Equal(t, "concurrency", k.HeadWaitReason)
	require.Equal(t, t0, k.OldestQueued)
	require.Equal(t, t0.Add(2*time.Second), k.Now)
	require.Equal(t, int64(2), k.RequestsLastMinute)
	require.Equal(t, int64(200+400), k.TokensLastMinute, "the costs of the priorities 1 and 2")
	require.Equal(t, 2, k.State.InflightCount)
	require.Equal(t, int64(600), st[1].TokensLastMinute, "a ticket draws on every limit of its route")
	require.Zero(t, st[1].Queued, "the tenant's cap is not a line")

	_, err = q.Status(ctx, "k", "nope", "gone")
	require.ErrorIs(t, err, store.ErrUnknownLimit)
	require.ErrorContains(t, err, `["nope" "gone"]`)

	series, now, err := q.Usage(ctx, []string{"k"}, 2*time.Minute, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Second), now)
	require.Len(t, series["k"], 12)
	last := series["k"][11]
	require.Equal(t, t0, last.At, "the last step holds now")
	require.Equal(t, store.UsagePoint{At: t0, Requests: 2, Tokens: 600, InputTokens: 600}, last, "a cost given as one figure is input")
	require.Equal(t, store.UsagePoint{At: t0.Add(-110 * time.Second)}, series["k"][0])
	// A step that does not divide a day still aligns on the Unix epoch, as the database bins.
	series, _, err = q.Usage(ctx, []string{"k"}, 70*time.Second, 7*time.Second)
	require.NoError(t, err)
	require.Len(t, series["k"], 10)
	at := series["k"][9].At
	require.Zero(t, at.Unix()%7, "the step starts at a multiple of 7 s since the epoch")
	require.False(t, at.After(t0.Add(2*time.Second)))
	var n int64
	for _, p := range series["k"] {
		n += p.Requests
	}
	require.Equal(t, int64(2), n, "every admission in its step")
	_, _, err = q.Usage(ctx, []string{"k"}, time.Minute, 0)
	require.ErrorContains(t, err, "step 0s must be at least 1s")

	ts, now, err := q.Tickets(ctx, "k", 10)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Second), now)
	var order []int
	for _, tk := range ts {
		order = append(order, tk.Priority)
	}
	require.Equal(t, []int{3, 4, 5, 1, 2}, order, "waiting first, in admission order, then running")
	require.Equal(t, store.TicketStateRunning, ts[3].State)
	require.Equal(t, "Summarize", ts[4].ActivityType)
	require.Equal(t, []int{1, 2, 3, 0, 0}, []int{ts[0].Place, ts[1].Place, ts[2].Place, ts[3].Place, ts[4].Place})
	require.Equal(t, "concurrency", ts[0].WaitsFor, "the head waits for a slot of k")
	require.Equal(t, "k", ts[0].WaitsOn)
	tenant, _, err := q.Tickets(ctx, "tenant", 10)
	require.NoError(t, err)
	require.Len(t, tenant, 5, "a limit's list finds the tickets drawing on it from another line")
	require.Equal(t, ts[0].ID, tenant[0].ID)
	ts, _, err = q.Tickets(ctx, "k", 3)
	require.NoError(t, err)
	require.Len(t, ts, 3)
	require.Equal(t, store.TicketStateQueued, ts[2].State, "--max keeps the waiting ones")
	_, _, err = q.Tickets(ctx, "nope", 3)
	require.ErrorIs(t, err, store.ErrUnknownLimit)

	// Reported usage below the reservation gives tokens back: the next claim folds them in, and the
	// history counts what was spent. The priority 1 ticket reserved 200 and used 50.
	_, err = q.CompleteMany(ctx, []store.CompleteParams{{TicketID: res.Admitted[0].ID, ActualCost: 50, OutcomeKind: store.OutcomeCompleted}})
	require.NoError(t, err)
	b.clock.Add(time.Second)
	require.Len(t, claim(t, q, store.ClaimParams{Owner: "owner-1", Max: 1}).Admitted, 1, "the room the completion made")
	st, err = q.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, int64(3), st[0].RequestsLastMinute)
	require.Equal(t, int64(200+400+300-150), st[0].TokensLastMinute, "reserved, less what usage gave back")

	// A 429 requeued gives its tokens back at once (the request stays counted), and the ticket waits
	// again without the reason it had before its admission.
	require.NoError(t, q.Requeue(ctx, store.RequeueParams{TicketID: res.Admitted[1].ID, ActualCost: 0}))
	st, err = q.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, int64(3), st[0].RequestsLastMinute)
	require.Equal(t, int64(750-400), st[0].TokensLastMinute, "the priority 2 ticket's 400 given back")
	require.Equal(t, int64(3), st[0].Queued)
	ts, _, err = q.Tickets(ctx, "k", 10)
	require.NoError(t, err)
	for _, tk := range ts {
		if tk.ID == res.Admitted[1].ID {
			require.Empty(t, tk.WaitReason, "requeued: no stale reason")
		}
	}
	b.clock.Add(-time.Second)

	// Two minutes on, the admissions are history: the last minute is empty, the series still has them.
	b.clock.Add(2 * time.Minute)
	st, err = q.Status(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, st[0].RequestsLastMinute)
	series, _, err = q.Usage(ctx, []string{"k"}, 5*time.Minute, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, store.UsagePoint{At: t0, Requests: 3, Tokens: 350, InputTokens: 350}, series["k"][17])

	// Prune keeps an hour of it.
	b.clock.Add(store.UsageHistory)
	_, err = q.Prune(ctx, store.PruneParams{})
	require.NoError(t, err)
	b.clock.Add(-store.UsageHistory)
	series, _, err = q.Usage(ctx, []string{"k"}, 5*time.Minute, 10*time.Second)
	require.NoError(t, err)
	require.Zero(t, series["k"][17].Requests, "pruned")
	requireHealthy(t, q)
}
