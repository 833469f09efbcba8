package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

func ptr[T any](v T) *T { return &v }

// ChangeLimit changes only the fields given, resets the burst of a rate that changed, refuses what
// does not validate, and waits for a change under way rather than overwriting it.
func TestQueue_ChangeLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 2, RequestsPerSecond: 10, Burst: 3, TokensPerMinute: 60_000}))

	l, err := q.ChangeLimit(ctx, "k", throttle.LimitChange{MaxConcurrent: ptr(4), RequestsPerSecond: ptr(10.0)}, false)
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "k", MaxConcurrent: 4, RequestsPerSecond: 10, Burst: 3, TokensPerMinute: 60_000, TokenBurst: 60_000}, l,
		"a rate given unchanged keeps its burst")
	l, err = q.ChangeLimit(ctx, "k", throttle.LimitChange{RequestsPerSecond: ptr(20.0)}, false)
	require.NoError(t, err)
	require.Equal(t, 20.0, l.Burst, "a changed rate gets its default burst")

	_, err = q.ChangeLimit(ctx, "k", throttle.LimitChange{TokensPerMinute: ptr(-1.0)}, false)
	require.ErrorIs(t, err, store.ErrInvalidLimit)
	require.ErrorContains(t, err, "TokensPerMinute must be >= 0 (0 means not set), got -1")
	_, err = q.ChangeLimit(ctx, "nope", throttle.LimitChange{MaxConcurrent: ptr(1)}, false)
	require.ErrorIs(t, err, store.ErrUnknownLimit)
	_, err = q.ChangeLimit(ctx, "", throttle.LimitChange{MaxConcurrent: ptr(1)}, true)
	require.ErrorIs(t, err, store.ErrInvalidLimit)
	l, err = q.ChangeLimit(ctx, "new", throttle.LimitChange{MaxConcurrent: ptr(1)}, true)
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "new", MaxConcurrent: 1}, l)
	_, err = q.ChangeLimit(ctx, "new", throttle.LimitChange{MaxConcurrent: ptr(2), OnSpent: ptr(throttle.OnSpentRefuse)}, false)
	require.ErrorIs(t, err, store.ErrInvalidLimit, "an OnSpent for no allowance would change nothing")
	require.ErrorContains(t, err, `limit "new": OnSpent "refuse" would apply to no allowance: the limit is left with none (give Allowances with it)`)
	l, err = q.Limit(ctx, "new")
	require.NoError(t, err)
	require.Equal(t, 1, l.MaxConcurrent, "nothing of it was applied")

	// Another transaction changes the token budget and holds the row: a change of the concurrency
	// waits for it and keeps its budget, instead of writing back the one it would have read before.
	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(context.Background()) }()
	_, err = other.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "sluice_limit"}.Sanitize()+` SET tokens_per_minute = 1234, token_burst = 0 WHERE key = 'k'`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := q.ChangeLimit(ctx, "k", throttle.LimitChange{MaxConcurrent: ptr(7)}, false)
		done <- err
	}()
	for waiting := false; !waiting; {
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%sluice_limit%FOR NO KEY UPDATE%')`).Scan(&waiting))
		select {
		case err := <-done:
			t.Fatalf("the change did not wait for the row: %v", err)
		case <-ctx.Done():
			t.Fatal("the change never waited for the row")
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, other.Commit(ctx))
	require.NoError(t, <-done)
	l, err = q.Limit(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 7, l.MaxConcurrent)
	require.Equal(t, 1234.0, l.TokensPerMinute, "the other change is kept")
}
