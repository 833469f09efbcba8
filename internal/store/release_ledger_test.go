package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// TestQueue_CompleteDoesNotLockTheLimitRow: a completion goes through while another transaction (a
// claim) holds the limit row, so finishing work never makes claimers on the key skip it or wait; the
// next claim folds what it released into the row, and every reader sees it at once.
func TestQueue_CompleteDoesNotLockTheLimitRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 2, TokensPerMinute: 6000, TokenBurst: 1000})
	a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 100})
	b := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 200})
	c := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 300})
	require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 2, "MaxConcurrent 2")
	before, err := q.LimitStatus(ctx, "k")
	require.NoError(t, err)
	schema := pgx.Identifier{q.Schema()}.Sanitize()

	holder, err := q.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM `+schema+`.sluice_limit WHERE key = 'k' FOR NO KEY UPDATE`)
	require.NoError(t, err)

	// Were it to lock the row, this would wait for the holder, which only ends after it: the test
	// would hang until its deadline.
	found, err := q.CompleteMany(ctx, []store.CompleteParams{
		{TicketID: a.ID, ActualCost: 40, OutcomeKind: store.OutcomeCompleted},
		{TicketID: b.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, found)
	res, err := q.Claim(ctx, store.ClaimParams{})
	require.NoError(t, err)
	require.Empty(t, res.Admitted, "the only line is held")
	require.True(t, res.Busy)

	st, err := q.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, st.State.InflightCount, "readers see the releases before they are folded")
	require.Zero(t, st.State.InflightTokens)
	require.InDelta(t, before.State.Tokens.Level+60, st.State.Tokens.Level, 1e-9, "a's unused 60 tokens are back")
	requireHealthy(t, q)
	require.NoError(t, holder.Rollback(ctx))

	var pending int
	count := func() {
		require.NoError(t, q.Pool().QueryRow(ctx, `SELECT count(*) FROM `+schema+`.sluice_release`).Scan(&pending))
	}
	count()
	require.Equal(t, 1, pending, "one release row for the batch's one limit")
	require.Equal(t, []int64{c.ID}, ids(claim(t, q, store.ClaimParams{}).Admitted), "room is made by the fold")
	count()
	require.Zero(t, pending, "the claim folded the release into the row")
	after, err := q.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 1, after.State.InflightCount)
	require.Equal(t, c.Cost, after.State.InflightTokens)
	require.InDelta(t, st.State.Tokens.Level-300, after.State.Tokens.Level, 1e-9, "the fold gave back exactly what the readers saw")
	requireHealthy(t, q)
}

// TestQueue_FoldWithoutAdmission: a claim that folds releases but admits nothing still saves the row:
// the releases it deleted from the ledger are not lost.
func TestQueue_FoldWithoutAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5, RequestsPerSecond: 1, Burst: 1})
	a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
	require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1, "burst 1")
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: a.ID, OutcomeKind: store.OutcomeCompleted}))
	res := claim(t, q, store.ClaimParams{})
	require.Empty(t, res.Admitted, "the rate holds the second back")
	require.Equal(t, throttle.ReasonRate, res.Blocked["k"])
	var inflight int
	require.NoError(t, q.Pool().QueryRow(ctx, `SELECT inflight_count FROM `+pgx.Identifier{q.Schema()}.Sanitize()+
		`.sluice_limit WHERE key = 'k'`).Scan(&inflight))
	require.Zero(t, inflight, "the row itself holds the folded release")
	requireHealthy(t, q)
	b.clock.Add(time.Second)
	require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
	requireHealthy(t, q)
}
