package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// TestQueue_Administration exercises what an operator calls, against a real Postgres.
func TestQueue_Administration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t)
	q, err := store.New(pool, store.Options{Schema: testdb.Schema(t, pool)})
	require.NoError(t, err)
	openai := throttle.Limit{Key: "openai", MaxConcurrent: 5, TokensPerMinute: 90_000}
	require.NoError(t, q.UpsertLimits(ctx, openai))

	t.Run("LimitReadsTheConfiguration", func(t *testing.T) {
		got, err := q.Limit(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, openai.WithDefaults(), got)
		_, err = q.Limit(ctx, "nope")
		require.ErrorIs(t, err, store.ErrUnknownLimit)
		require.ErrorContains(t, err, `"nope"`)
	})

	t.Run("BadLimitWritesNothing", func(t *testing.T) {
		err := q.UpsertLimits(ctx, throttle.Limit{Key: "ok", MaxConcurrent: 1}, throttle.Limit{Key: "bad", MaxConcurrent: -2})
		require.ErrorContains(t, err, "MaxConcurrent must be >= 0 (0 means no cap), got -2")
		_, err = q.Limit(ctx, "ok")
		require.ErrorIs(t, err, store.ErrUnknownLimit, "the valid limit beside the bad one was not written either")
	})

	t.Run("LimitStatus", func(t *testing.T) {
		st, err := q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, openai.WithDefaults(), st.Configured)
		require.Equal(t, st.Configured, st.Effective, "nothing learned from a provider yet")
		l := openai.WithDefaults()
		require.True(t, st.State.Tokens.At.IsZero(), "never drawn on")
		require.Equal(t, l.TokenBurst, st.State.Tokens.Refill(time.Now(), l.TokensPerMinute/60, l.TokenBurst).Level, "a new bucket is full")
		_, err = q.LimitStatus(ctx, "nope")
		require.ErrorIs(t, err, store.ErrUnknownLimit)
	})

	t.Run("PauseAndResume", func(t *testing.T) {
		until := time.Now().Add(time.Hour).Truncate(time.Second)
		require.NoError(t, q.Pause(ctx, "openai", until))
		require.NoError(t, q.Pause(ctx, "openai", until.Add(-time.Minute)), "an earlier end is ignored")
		st, err := q.Status(ctx)
		require.NoError(t, err)
		require.Len(t, st, 1)
		require.True(t, until.Equal(st[0].State.PausedUntil), "paused until %s, want %s", st[0].State.PausedUntil, until)
		require.NoError(t, q.Resume(ctx, "openai"))
		st, err = q.Status(ctx)
		require.NoError(t, err)
		require.True(t, st[0].State.PausedUntil.IsZero(), "resumed: %s", st[0].State.PausedUntil)
		require.ErrorIs(t, q.Pause(ctx, "nope", until), store.ErrUnknownLimit)
		require.ErrorIs(t, q.Resume(ctx, "nope"), store.ErrUnknownLimit)
	})

	t.Run("StatusAndVerify", func(t *testing.T) {
		st, err := q.Status(ctx)
		require.NoError(t, err)
		require.Len(t, st, 1)
		require.Equal(t, "openai", st[0].Configured.Key)
		require.Zero(t, st[0].Queued+st[0].QueuedDrawing+st[0].Admitted+st[0].Running)
		problems, err := q.Verify(ctx)
		require.NoError(t, err)
		require.Empty(t, problems)
	})
}
