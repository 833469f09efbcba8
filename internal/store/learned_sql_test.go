package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// randomRate is a configured rate: none, a whole number, or a fraction.
func randomRate(r *rand.Rand) float64 {
	switch r.IntN(3) {
	case 0:
		return 0
	case 1:
		return float64(1 + r.IntN(100_000))
	}
	return 1000 * r.Float64()
}

// randomLearned is what headers taught of a rate configured as rate: nothing (0, stored as NULL), or a
// rate below it or, the configuration having been lowered since, above it.
func randomLearned(r *rand.Rand, rate float64) float64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return rate * (0.01 + 0.98*r.Float64())
	case 2:
		return rate + 1 + 1000*r.Float64()
	}
	return 0.001 + 500*r.Float64()
}

// TestQueue_OverviewEffectiveRatesMatchThrottle: Overview lowers every key's rates to what was
// learned in SQL (effectiveRate), for pages of up to a thousand keys sorted by use; on random
// configured and learned rates, each of its rates per minute is throttle.EffectiveLimit's, and the
// request rate its RequestsPerMinute.
func TestQueue_OverviewEffectiveRatesMatchThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seed, keys = 26, 300
	t.Logf("seed %d: %d keys", seed, keys)
	r := rand.New(rand.NewPCG(seed, seed))
	q, _ := setup(t)
	schema := pgx.Identifier{q.Schema()}.Sanitize()

	want := map[string]throttle.Limit{}
	var limits []throttle.Limit
	var learnedKeys []string
	var learnedRates [4][]*float64 // requests per second, tokens, input and output tokens per minute; nil: nothing learned
	for i := range keys {
		configured := throttle.Limit{Key: fmt.Sprintf("k%03d", i), MaxConcurrent: 1, RequestsPerSecond: randomRate(r),
			TokensPerMinute: randomRate(r), InputTokensPerMinute: randomRate(r), OutputTokensPerMinute: randomRate(r)}
		learned := throttle.Limit{RequestsPerSecond: randomLearned(r, configured.RequestsPerSecond),
			TokensPerMinute: randomLearned(r, configured.TokensPerMinute), InputTokensPerMinute: randomLearned(r, configured.InputTokensPerMinute),
			OutputTokensPerMinute: randomLearned(r, configured.OutputTokensPerMinute)}
		limits = append(limits, configured)
		learnedKeys = append(learnedKeys, configured.Key)
		for j, v := range []float64{learned.RequestsPerSecond, learned.TokensPerMinute, learned.InputTokensPerMinute, learned.OutputTokensPerMinute} {
			var col *float64
			if v != 0 {
				col = &v
			}
			learnedRates[j] = append(learnedRates[j], col)
		}
		want[configured.Key] = throttle.EffectiveLimit(configured, learned)
	}
	require.NoError(t, q.UpsertLimits(ctx, limits...))
	_, err := q.Pool().Exec(ctx, `UPDATE `+schema+`.sluice_limit l SET learned_requests_per_second = u.rps,
		learned_tokens_per_minute = u.tpm, learned_input_tokens_per_minute = u.itpm, learned_output_tokens_per_minute = u.otpm
		FROM unnest($1::text[], $2::float8[], $3::float8[], $4::float8[], $5::float8[]) AS u(key, rps, tpm, itpm, otpm)
		WHERE l.key = u.key`, learnedKeys, learnedRates[0], learnedRates[1], learnedRates[2], learnedRates[3])
	require.NoError(t, err)

	o, err := q.Overview(ctx, store.OverviewParams{Sort: store.OverviewByUse, Limit: store.MaxOverviewLimit})
	require.NoError(t, err)
	require.Len(t, o.Rows, keys)
	for _, row := range o.Rows {
		eff := want[row.Key]
		require.Equal(t, eff.RequestsPerMinute(), row.RequestsPerMinute, "%s (seed %d)", row.Key, seed)
		require.Equal(t, eff.TokensPerMinute, row.TokensPerMinute, "%s (seed %d)", row.Key, seed)
		require.Equal(t, eff.InputTokensPerMinute, row.InputTokensPerMinute, "%s (seed %d)", row.Key, seed)
		require.Equal(t, eff.OutputTokensPerMinute, row.OutputTokensPerMinute, "%s (seed %d)", row.Key, seed)
	}
}
