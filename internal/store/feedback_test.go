package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

func TestQueue_Observe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LowersTheRateToWhatTheProviderReports", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "openai", TokensPerMinute: 60_000})
		for range 3 {
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai"}, Cost: 2000})
		}
		// Sluice believes 60k remain; the provider says 1000 remain of a real 30k a minute.
		require.NoError(t, q.Observe(ctx, "openai", throttle.RateLimitInfo{
			TokensLimit: 30_000, TokensRemaining: 1000, HasTokensRemaining: true, TokensReset: t0.Add(2 * time.Second)}))
		st, err := q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, 60_000.0, st.Configured.TokensPerMinute)
		require.Equal(t, 30_000.0, st.Effective.TokensPerMinute, "the provider's real limit is learned")
		require.LessOrEqual(t, st.State.Tokens.Level, 1000.0)
		res := claim(t, q, store.ClaimParams{})
		require.Empty(t, res.Admitted, "nothing is admitted past what the provider says remains")
		require.Equal(t, throttle.ReasonTokens, res.Blocked["openai"])
		require.Equal(t, t0.Add(2*time.Second), res.RetryAt, "1000 more tokens at the learned 500/s")
	})

	t.Run("NeverRaisesALimitAboveItsConfiguration", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "openai", TokensPerMinute: 60_000, RequestsPerSecond: 5})
		require.NoError(t, q.Observe(ctx, "openai", throttle.RateLimitInfo{
			TokensLimit: 600_000, TokensRemaining: 600_000, HasTokensRemaining: true,
			RequestsLimit: 100_000, RequestsRemaining: 100_000, HasRequestsRemaining: true}))
		st, err := q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, st.Configured, st.Effective)
		require.LessOrEqual(t, st.State.Tokens.Level, 60_000.0)
	})

	t.Run("RetryAfterPausesTheKey", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 5})
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai"}})
		require.NoError(t, q.Observe(ctx, "openai", throttle.RateLimitInfo{RetryAfter: t0.Add(3 * time.Second)}))
		require.Empty(t, claim(t, q, store.ClaimParams{}).Admitted)
		b.clock.Add(3 * time.Second)
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
		require.ErrorIs(t, q.Observe(ctx, "nope", throttle.RateLimitInfo{}), store.ErrUnknownLimit)
	})
}
