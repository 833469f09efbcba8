package throttle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func TestEffectiveLimit(t *testing.T) {
	t.Parallel()

	// every sets every kind: 10 requests a second (burst 20), 90k tokens a minute (burst 90k).
	every := throttle.Limit{Key: "k", MaxConcurrent: 4, RequestsPerSecond: 10, Burst: 20, TokensPerMinute: 90_000, MaxInflightTokens: 5000}
	withDefaults := every.WithDefaults()

	for _, tc := range []struct {
		name       string
		configured throttle.Limit
		learned    throttle.Limit
		want       throttle.Limit
	}{
		{"NothingLearnedIsTheConfiguredLimitWithDefaults", every, throttle.Limit{}, withDefaults},
		{
			"LowerFiguresLowerEachRateAndBurst", every,
			throttle.Limit{RequestsPerSecond: 1, Burst: 1, TokensPerMinute: 30_000, TokenBurst: 30_000},
			throttle.Limit{Key: "k", MaxConcurrent: 4, RequestsPerSecond: 1, Burst: 1, TokensPerMinute: 30_000, TokenBurst: 30_000, MaxInflightTokens: 5000},
		},
		{
			"EachFigureOnItsOwn", every, throttle.Limit{TokensPerMinute: 30_000},
			throttle.Limit{Key: "k", MaxConcurrent: 4, RequestsPerSecond: 10, Burst: 20, TokensPerMinute: 30_000, TokenBurst: 90_000, MaxInflightTokens: 5000},
		},
		{
			"HigherFiguresNeverRaise", every,
			throttle.Limit{RequestsPerSecond: 100, Burst: 200, TokensPerMinute: 900_000, TokenBurst: 900_000}, withDefaults,
		},
		{
			"AKindNotConfiguredStaysUnset", throttle.Limit{Key: "k", MaxConcurrent: 2},
			throttle.Limit{RequestsPerSecond: 1, Burst: 1, TokensPerMinute: 100, TokenBurst: 100}, throttle.Limit{Key: "k", MaxConcurrent: 2},
		},
		{
			"OnlyRatesAndBurstsAreLearned", every,
			throttle.Limit{Key: "other", MaxConcurrent: 1, MaxInflightTokens: 1}, withDefaults,
		},
		{
			"NegativeFiguresAreIgnored", every,
			throttle.Limit{RequestsPerSecond: -1, Burst: -1, TokensPerMinute: -1, TokenBurst: -1}, withDefaults,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, throttle.EffectiveLimit(tc.configured, tc.learned))
		})
	}
}

func TestLearnedLimit(t *testing.T) {
	t.Parallel()

	openai := throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000, MaxConcurrent: 8}

	for _, tc := range []struct {
		name string
		info throttle.RateLimitInfo
		want throttle.Limit
	}{
		{"NothingReportedLearnsNothing", throttle.RateLimitInfo{}, throttle.Limit{}},
		{"TheSameLimitLearnsNothing", throttle.RateLimitInfo{RequestsLimit: 600, TokensLimit: 90_000}, throttle.Limit{}},
		{"AHigherLimitLearnsNothing", throttle.RateLimitInfo{RequestsLimit: 6000, TokensLimit: 900_000}, throttle.Limit{}},
		{"ALowerTokenLimit", throttle.RateLimitInfo{TokensLimit: 30_000}, throttle.Limit{TokensPerMinute: 30_000, TokenBurst: 30_000}},
		{"ALowerRequestLimit", throttle.RateLimitInfo{RequestsLimit: 60}, throttle.Limit{RequestsPerSecond: 1, Burst: 1}},
		{
			"BothLower", throttle.RateLimitInfo{RequestsLimit: 300, TokensLimit: 1000},
			throttle.Limit{RequestsPerSecond: 5, Burst: 5, TokensPerMinute: 1000, TokenBurst: 1000},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eff, _ := openai.Observe(throttle.State{}, t0, tc.info)
			learned := throttle.LearnedLimit(openai, eff)
			require.Equal(t, tc.want, learned)
			require.Equal(t, eff, throttle.EffectiveLimit(openai, learned), "stored and read back, the learned figures give the effective limit again")
		})
	}

	t.Run("ABurstBelowTheLearnedRateStands", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", TokensPerMinute: 90_000, TokenBurst: 20_000}
		eff, _ := l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{TokensLimit: 40_000})
		learned := throttle.LearnedLimit(l, eff)
		require.Equal(t, throttle.Limit{TokensPerMinute: 40_000}, learned, "the configured burst is not learned")
		require.Equal(t, eff, throttle.EffectiveLimit(l, learned))
	})
}
