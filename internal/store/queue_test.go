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

func TestQueue_UpsertLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RejectsInvalidNamingFieldAndValue", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		err := q.UpsertLimits(ctx, throttle.Limit{Key: "a", MaxConcurrent: 1}, throttle.Limit{Key: "b", RequestsPerSecond: -2})
		require.ErrorContains(t, err, "limits[1]")
		require.ErrorContains(t, err, "RequestsPerSecond must be >= 0")
		require.ErrorContains(t, err, "-2")
		_, err = q.Limit(ctx, "a")
		require.ErrorIs(t, err, store.ErrUnknownLimit, "nothing is written when any limit is invalid")
		require.ErrorContains(t, q.UpsertLimits(ctx, throttle.Limit{Key: "a", MaxConcurrent: 1}, throttle.Limit{Key: "a", MaxConcurrent: 2}), "given twice")
	})

	t.Run("FillsDefaults", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000})
		l, err := q.Limit(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, throttle.Limit{Key: "openai", RequestsPerSecond: 10, Burst: 10, TokensPerMinute: 90_000, TokenBurst: 90_000}, l)
	})

	t.Run("RuntimeChangeAppliesAtNextAdmission", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		for range 3 {
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		}
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
		require.Empty(t, claim(t, q, store.ClaimParams{}).Admitted)
		require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 3}))
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 2)
		requireHealthy(t, q)
	})

	t.Run("RuntimeChangeBySQL", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		for range 3 {
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		}
		// The documented statement, as an operator would run it in psql.
		_, err := q.Pool().Exec(ctx, `UPDATE `+pgx.Identifier{q.Schema()}.Sanitize()+`.sluice_limit SET max_concurrent = 2 WHERE key = 'k'`)
		require.NoError(t, err)
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 2)
	})
}

func TestQueue_Enqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 5}, throttle.Limit{Key: "tenant:a", MaxConcurrent: 1})

	t.Run("RoundTripsFields", func(t *testing.T) {
		t.Parallel()
		deadline := t0.Add(time.Hour)
		tk := enqueue(t, q, store.EnqueueParams{
			LimitKeys: []string{"openai", "tenant:a"}, Cost: 1200, Priority: 2, Owner: "w1",
			Namespace: "default", WorkflowID: "wf", RunID: "run", ActivityID: "7", ActivityType: "Summarize",
			Attempt: 1, TaskToken: []byte{1, 2, 3}, Deadline: deadline, TraceContext: "00-abc-def-01",
		})
		got, err := q.Ticket(ctx, tk.ID)
		require.NoError(t, err)
		require.Equal(t, store.TicketStateQueued, got.State)
		require.Equal(t, "openai", got.LineKey)
		require.Equal(t, []string{"openai", "tenant:a"}, got.LimitKeys)
		require.Equal(t, int64(1200), got.Cost)
		require.Equal(t, int64(-1), got.ActualCost)
		require.Equal(t, 2, got.Priority)
		require.Equal(t, []byte{1, 2, 3}, got.TaskToken)
		require.True(t, deadline.Equal(got.Deadline))
		require.True(t, got.NotBefore.IsZero())
		require.True(t, t0.Equal(got.EnqueuedAt))
		require.Equal(t, "00-abc-def-01", got.TraceContext)
		require.Equal(t, "Summarize", got.ActivityType)
	})

	t.Run("RejectsBadInput", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			p    store.EnqueueParams
			want string
		}{
			{store.EnqueueParams{Owner: "w"}, "LimitKeys must name at least one limit"},
			{store.EnqueueParams{LimitKeys: []string{""}, Owner: "w"}, "LimitKeys[0]"},
			{store.EnqueueParams{LimitKeys: []string{"openai", "openai"}, Owner: "w"}, `names "openai" twice`},
			{store.EnqueueParams{LimitKeys: []string{"openai"}, Owner: "w", Cost: -1}, "Cost must be in [0, 1099511627776], got -1"},
			{store.EnqueueParams{LimitKeys: []string{"openai"}, Owner: "w", Cost: 1 << 50}, "got 1125899906842624"},
			{store.EnqueueParams{LimitKeys: []string{"openai"}}, "Owner must not be empty"},
			{store.EnqueueParams{LimitKeys: []string{"openai"}, Owner: "w", Weight: -1}, "Weight must be > 0"},
			{store.EnqueueParams{LimitKeys: []string{"openai"}, Owner: "w", Attempt: -3}, "Attempt must be >= 1, got -3"},
		} {
			_, err := q.Enqueue(ctx, c.p)
			require.ErrorContains(t, err, c.want)
		}
		_, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"openai", "nope"}, Owner: "w"})
		require.ErrorIs(t, err, store.ErrUnknownLimit)
	})

	t.Run("InTxIsInvisibleUntilCommit", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = q.EnqueueTx(ctx, tx, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "w"})
		require.NoError(t, err)
		require.Empty(t, claim(t, q, store.ClaimParams{}).Admitted)
		require.NoError(t, tx.Commit(ctx))
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
	})
}
