package throttle_test

import (
	"slices"
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

func TestEffectiveLimit_Allowances(t *testing.T) {
	t.Parallel()
	day, err := throttle.ParseAllowance("requests=10000/day@America/Los_Angeles")
	require.NoError(t, err)
	rolling, err := throttle.ParseAllowance("tokens=5000000/24h")
	require.NoError(t, err)
	configured := throttle.Limit{Key: "k", RequestsPerSecond: 10, Allowances: throttle.Allowances{day, rolling}}
	lowered := func(a throttle.Allowance, amount int64) throttle.Allowance { a.Amount = amount; return a }
	other, err := throttle.ParseAllowance("requests=50/day") // UTC: another key than day's
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		learned throttle.Allowances
		want    throttle.Allowances
	}{
		{"NothingLearned", nil, throttle.Allowances{day, rolling}},
		{"ALowerAmountLowersTheSameKey", throttle.Allowances{lowered(day, 200)}, throttle.Allowances{lowered(day, 200), rolling}},
		{"EachOnItsOwn", throttle.Allowances{lowered(rolling, 1000), lowered(day, 1440)}, throttle.Allowances{lowered(day, 1440), lowered(rolling, 1000)}},
		{"AHigherAmountNeverRaises", throttle.Allowances{lowered(day, 20000)}, throttle.Allowances{day, rolling}},
		{"AnotherKeyIsNeverAdded", throttle.Allowances{other}, throttle.Allowances{day, rolling}},
		{"AZeroOrNegativeAmountLearnedNothing", throttle.Allowances{lowered(day, 0), lowered(rolling, -5)}, throttle.Allowances{day, rolling}},
		{"OnlyTheAmountIsTaken", throttle.Allowances{func() throttle.Allowance {
			a := lowered(day, 300)
			a.OnSpent = throttle.OnSpentRefuse
			return a
		}()}, throttle.Allowances{lowered(day, 300), rolling}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := slices.Clone(configured.Allowances)
			got := throttle.EffectiveLimit(configured, throttle.Limit{Allowances: tc.learned})
			require.Equal(t, tc.want, got.Allowances)
			require.Equal(t, before, configured.Allowances, "the configured allowances are not modified")
		})
	}

	t.Run("NoAllowancesStayNil", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 1}
		require.Nil(t, throttle.EffectiveLimit(l, throttle.Limit{Allowances: throttle.Allowances{lowered(day, 1)}}).Allowances)
	})
}

func TestLearnedLimit_Allowances(t *testing.T) {
	t.Parallel()
	day, err := throttle.ParseAllowance("requests=10000/day")
	require.NoError(t, err)
	hour, err := throttle.ParseAllowance("requests=600/hour")
	require.NoError(t, err)
	configured := throttle.Limit{Key: "k", RequestsPerSecond: 10, Allowances: throttle.Allowances{hour, day}}
	eff := configured.WithDefaults()
	eff.Allowances = throttle.Allowances{hour, day}
	eff.Allowances[1].Amount = 200

	learned := throttle.LearnedLimit(configured, eff)
	require.Equal(t, throttle.Allowances{eff.Allowances[1]}, learned.Allowances, "only the lowered allowance is kept")
	require.True(t, eff.Equal(throttle.EffectiveLimit(configured, learned)))

	require.Nil(t, throttle.LearnedLimit(configured, configured).Allowances, "learned nothing: nil")
	higher := configured.WithDefaults()
	higher.Allowances = throttle.Allowances{hour, day}
	higher.Allowances[1].Amount = 20000
	require.Nil(t, throttle.LearnedLimit(configured, higher).Allowances, "above the configured amount is not learned")
}
