package throttle_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func TestLimit_Validate(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsGoodLimits", func(t *testing.T) {
		t.Parallel()
		for name, l := range map[string]throttle.Limit{
			"ConcurrencyOnly":      {Key: "tenant:acme", MaxConcurrent: 5},
			"InflightTokensOnly":   {Key: "openai", MaxInflightTokens: 100_000},
			"RateWithoutBurst":     {Key: "openai", RequestsPerSecond: 10},
			"RateWithBurst":        {Key: "openai", RequestsPerSecond: 0.5, Burst: 1},
			"TokensWithoutBurst":   {Key: "openai", TokensPerMinute: 90_000},
			"TokensWithBurst":      {Key: "openai", TokensPerMinute: 90_000, TokenBurst: 10_000},
			"Everything":           {Key: "anthropic", MaxConcurrent: 8, RequestsPerSecond: 50, Burst: 100, TokensPerMinute: 4e5, TokenBurst: 4e5, MaxInflightTokens: 2e5},
			"Defaulted":            throttle.Limit{Key: "openai", RequestsPerSecond: 0.2, TokensPerMinute: 60}.WithDefaults(),
			"KeyAtMaxLen":          {Key: strings.Repeat("k", throttle.MaxKeyLen), MaxConcurrent: 1},
			"KeyWithUnicodeSpaces": {Key: "tenant: café ünïcode", MaxConcurrent: 1},
			"RateAtUpperBound":     {Key: "k", RequestsPerSecond: 1e12},
		} {
			require.NoError(t, l.Validate(), name)
		}
	})

	for _, tc := range []struct {
		name   string
		limit  throttle.Limit
		substr []string
	}{
		{"RejectsNegativeMaxConcurrent", throttle.Limit{Key: "k", MaxConcurrent: -1}, []string{"MaxConcurrent", "-1"}},
		{"RejectsNegativeMaxInflightTokens", throttle.Limit{Key: "k", MaxInflightTokens: -7}, []string{"MaxInflightTokens", "-7"}},
		{"RejectsNegativeRequestsPerSecond", throttle.Limit{Key: "k", RequestsPerSecond: -2.5}, []string{"RequestsPerSecond", "-2.5"}},
		{"RejectsNaNRequestsPerSecond", throttle.Limit{Key: "k", RequestsPerSecond: math.NaN()}, []string{"RequestsPerSecond", "NaN"}},
		{"RejectsInfRequestsPerSecond", throttle.Limit{Key: "k", RequestsPerSecond: math.Inf(1)}, []string{"RequestsPerSecond", "+Inf"}},
		{"RejectsHugeRequestsPerSecond", throttle.Limit{Key: "k", RequestsPerSecond: 2e12}, []string{"RequestsPerSecond", "2e+12"}},
		{"RejectsNegativeBurst", throttle.Limit{Key: "k", RequestsPerSecond: 1, Burst: -3}, []string{"Burst", "-3"}},
		{"RejectsNaNBurst", throttle.Limit{Key: "k", RequestsPerSecond: 1, Burst: math.NaN()}, []string{"Burst", "NaN"}},
		{"RejectsInfBurst", throttle.Limit{Key: "k", RequestsPerSecond: 1, Burst: math.Inf(1)}, []string{"Burst", "+Inf"}},
		{"RejectsNegativeTokensPerMinute", throttle.Limit{Key: "k", TokensPerMinute: -60}, []string{"TokensPerMinute", "-60"}},
		{"RejectsNaNTokensPerMinute", throttle.Limit{Key: "k", TokensPerMinute: math.NaN()}, []string{"TokensPerMinute", "NaN"}},
		{"RejectsInfTokensPerMinute", throttle.Limit{Key: "k", TokensPerMinute: math.Inf(1)}, []string{"TokensPerMinute", "+Inf"}},
		{"RejectsNegativeTokenBurst", throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: -1.5}, []string{"TokenBurst", "-1.5"}},
		{"RejectsNaNTokenBurst", throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: math.NaN()}, []string{"TokenBurst", "NaN"}},
		{"RejectsInfTokenBurst", throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: math.Inf(1)}, []string{"TokenBurst", "+Inf"}},
		{"RejectsBurstWithoutRequestsPerSecond", throttle.Limit{Key: "k", MaxConcurrent: 1, Burst: 5}, []string{"Burst", "5", "RequestsPerSecond"}},
		{"RejectsBurstBelowOne", throttle.Limit{Key: "k", RequestsPerSecond: 1, Burst: 0.5}, []string{"Burst", "0.5", ">= 1"}},
		{"RejectsTokenBurstWithoutTokensPerMinute", throttle.Limit{Key: "k", MaxConcurrent: 1, TokenBurst: 500}, []string{"TokenBurst", "500", "TokensPerMinute"}},
		{"RejectsTokenBurstBelowOne", throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: 0.25}, []string{"TokenBurst", "0.25", ">= 1"}},
		{"RejectsEmptyKey", throttle.Limit{MaxConcurrent: 1}, []string{"Key", "empty"}},
		{"RejectsKeyOverMaxKeyLen", throttle.Limit{Key: strings.Repeat("k", throttle.MaxKeyLen+1), MaxConcurrent: 1}, []string{"Key", "201 bytes", "at most 200"}},
		{"RejectsInvalidUTF8Key", throttle.Limit{Key: "bad\xffkey", MaxConcurrent: 1}, []string{"Key", "UTF-8", `"bad\xffkey"`}},
		{"RejectsKeyWithNewline", throttle.Limit{Key: "a\nb", MaxConcurrent: 1}, []string{"Key", "printable", `"a\nb"`}},
		{"RejectsKeyWithNUL", throttle.Limit{Key: "a\x00b", MaxConcurrent: 1}, []string{"Key", "printable", `"a\x00b"`}},
		{"RejectsKeyWithDEL", throttle.Limit{Key: "a\x7fb", MaxConcurrent: 1}, []string{"Key", "printable", `"a\x7fb"`}},
		{"RejectsLimitSettingNothing", throttle.Limit{Key: "idle"}, []string{`"idle"`, "MaxConcurrent", "RequestsPerSecond", "TokensPerMinute", "MaxInflightTokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.limit.Validate()
			require.Error(t, err)
			for _, s := range tc.substr {
				require.ErrorContains(t, err, s)
			}
		})
	}

	t.Run("NamesTheKeyInFieldErrors", func(t *testing.T) {
		t.Parallel()
		err := throttle.Limit{Key: "tenant:acme", MaxConcurrent: -2}.Validate()
		require.ErrorContains(t, err, `"tenant:acme"`)
		require.ErrorContains(t, err, "MaxConcurrent")
		require.ErrorContains(t, err, "-2")
	})

	t.Run("ReportsKeyBeforeFields", func(t *testing.T) {
		t.Parallel()
		err := throttle.Limit{Key: "", MaxConcurrent: -1}.Validate()
		require.ErrorContains(t, err, "Key must not be empty")
	})

	t.Run("TruncatesLongKeyInMessage", func(t *testing.T) {
		t.Parallel()
		err := throttle.Limit{Key: strings.Repeat("x", 1000), MaxConcurrent: 1}.Validate()
		require.ErrorContains(t, err, "1000 bytes")
		require.Less(t, len(err.Error()), 200)
	})
}

func TestValidateKey(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		key  string
		ok   bool
	}{
		{"AcceptsASCII", "openai", true},
		{"AcceptsColonAndSpace", "tenant: acme", true},
		{"AcceptsMultibyte", "租户:東京", true},
		{"AcceptsMaxLenInBytes", strings.Repeat("é", throttle.MaxKeyLen/2), true},
		{"RejectsOneByteOverInMultibyte", strings.Repeat("é", throttle.MaxKeyLen/2) + "x", false},
		{"RejectsEmpty", "", false},
		{"RejectsSpaces", "   ", false},
		{"RejectsLeadingSpace", " openai", false},
		{"RejectsTrailingSpace", "openai ", false},
		{"RejectsTab", "a\tb", false},
		{"RejectsTruncatedRune", "caf\xc3", false},
		{"RejectsZeroWidthFormatRune", "a\u200bb", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := throttle.ValidateKey(tc.key)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				require.ErrorContains(t, err, "Key")
			}
		})
	}
}

func TestLimit_WithDefaults(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		in   throttle.Limit
		want throttle.Limit
	}{
		{"FillsBurstWithRequestsPerSecond", throttle.Limit{Key: "k", RequestsPerSecond: 10}, throttle.Limit{Key: "k", RequestsPerSecond: 10, Burst: 10}},
		{"FillsBurstWithOneForSlowRate", throttle.Limit{Key: "k", RequestsPerSecond: 0.25}, throttle.Limit{Key: "k", RequestsPerSecond: 0.25, Burst: 1}},
		{"FillsBurstWithFractionalRate", throttle.Limit{Key: "k", RequestsPerSecond: 2.5}, throttle.Limit{Key: "k", RequestsPerSecond: 2.5, Burst: 2.5}},
		{"FillsTokenBurstWithTokensPerMinute", throttle.Limit{Key: "k", TokensPerMinute: 90_000}, throttle.Limit{Key: "k", TokensPerMinute: 90_000, TokenBurst: 90_000}},
		{"LeavesSetBurstAlone", throttle.Limit{Key: "k", RequestsPerSecond: 10, Burst: 3}, throttle.Limit{Key: "k", RequestsPerSecond: 10, Burst: 3}},
		{"LeavesSetTokenBurstAlone", throttle.Limit{Key: "k", TokensPerMinute: 600, TokenBurst: 50}, throttle.Limit{Key: "k", TokensPerMinute: 600, TokenBurst: 50}},
		{"LeavesUnsetRatesAlone", throttle.Limit{Key: "k", MaxConcurrent: 2, MaxInflightTokens: 9}, throttle.Limit{Key: "k", MaxConcurrent: 2, MaxInflightTokens: 9}},
		{"DoesNotFillBurstForNegativeRate", throttle.Limit{Key: "k", RequestsPerSecond: -1}, throttle.Limit{Key: "k", RequestsPerSecond: -1}},
		{
			"FillsBoth",
			throttle.Limit{Key: "k", RequestsPerSecond: 5, TokensPerMinute: 1000, MaxConcurrent: 4},
			throttle.Limit{Key: "k", RequestsPerSecond: 5, Burst: 5, TokensPerMinute: 1000, TokenBurst: 1000, MaxConcurrent: 4},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.in.WithDefaults())
		})
	}

	t.Run("DoesNotModifyReceiver", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 10}
		_ = l.WithDefaults()
		require.Zero(t, l.Burst)
	})

	t.Run("IsIdempotent", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 0.5, TokensPerMinute: 120}.WithDefaults()
		require.Equal(t, l, l.WithDefaults())
		require.NoError(t, l.Validate())
	})
}

func TestLimit_RequestsPerMinute(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		limit throttle.Limit
		want  float64
	}{
		{"NoRequestRate", throttle.Limit{Key: "k", MaxConcurrent: 1, TokensPerMinute: 600}, 0},
		{"WholeRate", throttle.Limit{Key: "k", RequestsPerSecond: 10, Burst: 3}, 600},
		{"FractionalRate", throttle.Limit{Key: "k", RequestsPerSecond: 0.5}, 30},
		{"LearnedRate", throttle.EffectiveLimit(throttle.Limit{Key: "k", RequestsPerSecond: 10}, throttle.Limit{RequestsPerSecond: 0.25}), 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.limit.RequestsPerMinute())
		})
	}
}
