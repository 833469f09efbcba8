package throttle_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// anthropicLimit meters requests, input and output tokens apart, as Anthropic does.
var anthropicLimit = throttle.Limit{Key: "anthropic", RequestsPerSecond: 10, InputTokensPerMinute: 60_000,
	InputTokenBurst: 10_000, OutputTokensPerMinute: 6_000, OutputTokenBurst: 1_000}

func TestLimit_OutputBudgetRefusesWhatTheInputBudgetAllows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := anthropicLimit.WithDefaults()
	s := l.AdmitCost(throttle.State{}, t0, throttle.Cost{Input: 2_000, Output: 800})
	require.Equal(t, 8_000.0, s.InputTokens.Level)
	require.Equal(t, 200.0, s.OutputTokens.Level)
	require.Equal(t, int64(2_800), s.InflightTokens, "in-flight tokens count both parts")

	d := l.CheckCost(s, t0, throttle.Cost{Input: 2_000, Output: 300})
	require.Equal(t, throttle.ReasonOutputTokens, d.Reason)
	require.Equal(t, t0.Add(time.Second), d.RetryAt, "100 output tokens short at 100 a second")
	require.True(t, l.CheckCost(s, d.RetryAt, throttle.Cost{Input: 2_000, Output: 300}).OK())
	require.True(t, l.CheckCost(s, t0, throttle.Cost{Input: 8_000, Output: 200}).OK(), "each budget for its own part")

	d = l.CheckCost(s, t0, throttle.Cost{Input: 9_000, Output: 500})
	require.Equal(t, throttle.ReasonInputTokens, d.Reason, "the first budget that refuses names the reason")
	require.Equal(t, t0.Add(3*time.Second), d.RetryAt, "the latest instant at which every budget allows: output needs 3 s, input 1 s")
}

func TestLimit_TightestOfCombinedInputAndOutputWins(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := throttle.Limit{Key: "k", TokensPerMinute: 600, TokenBurst: 100, InputTokensPerMinute: 6_000, InputTokenBurst: 1_000,
		OutputTokensPerMinute: 6_000, OutputTokenBurst: 1_000}.WithDefaults()
	s := l.AdmitCost(throttle.State{}, t0, throttle.Cost{Input: 30, Output: 10})
	require.Equal(t, 60.0, s.Tokens.Level)
	require.Equal(t, 970.0, s.InputTokens.Level)
	require.Equal(t, 990.0, s.OutputTokens.Level)
	d := l.CheckCost(s, t0, throttle.Cost{Input: 40, Output: 30})
	require.Equal(t, throttle.ReasonTokens, d.Reason, "the combined budget counts the sum, though each part fits its own")
	require.Equal(t, t0.Add(time.Second), d.RetryAt, "10 tokens short at 10 a second")
}

func TestReleasedCost_RefundsEachDimension(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: 5_000, InputTokensPerMinute: 60, InputTokenBurst: 5_000,
		OutputTokensPerMinute: 60, OutputTokenBurst: 1_000}.WithDefaults()
	reserved := throttle.Cost{Input: 1_000, Output: 800}
	s := l.AdmitCost(throttle.State{}, t0, reserved)

	r := throttle.ReleasedCost(reserved, throttle.Cost{Input: 1_200, Output: 150}, true)
	require.Equal(t, throttle.Released{Count: 1, Reserved: 1_800, Refund: 450, RefundOutput: 650}, r)
	got := l.ReleaseMany(s, t0, r)
	require.Equal(t, 3_200.0+450, got.Tokens.Level)
	require.Equal(t, 4_000.0-200, got.InputTokens.Level, "input above its reservation is debt")
	require.Equal(t, 200.0+650, got.OutputTokens.Level, "the unused part of max_tokens comes back")
	require.Zero(t, got.InflightCount)
	require.Zero(t, got.InflightTokens)

	none := l.ReleaseMany(s, t0, throttle.ReleasedCost(reserved, throttle.Cost{}, false))
	require.Equal(t, s.Tokens, none.Tokens, "without a report the reservation stands as spent")
	require.Equal(t, s.InputTokens, none.InputTokens)
	require.Equal(t, s.OutputTokens, none.OutputTokens)

	require.Equal(t, throttle.Released1(500, 200), throttle.ReleasedCost(throttle.Tokens(500), throttle.Tokens(200), true),
		"one figure is input")
	require.Equal(t, r.Add(r), throttle.Released{Count: 2, Reserved: 3_600, Refund: 900, RefundOutput: 1_300})
}

func TestLimit_ValidateTokenDimensions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    throttle.Limit
		want string
	}{
		{throttle.Limit{Key: "k", InputTokenBurst: 5}, "InputTokenBurst must be 0 when InputTokensPerMinute is not set, got 5"},
		{throttle.Limit{Key: "k", OutputTokensPerMinute: 10, OutputTokenBurst: 0.5}, "OutputTokenBurst must be >= 1, got 0.5"},
		{throttle.Limit{Key: "k", OutputTokensPerMinute: -1}, "OutputTokensPerMinute must be >= 0 (0 means not set), got -1"},
		{throttle.Limit{Key: "k", InputTokensPerMinute: 2e12}, "InputTokensPerMinute must be <= 1e12, got 2e+12"},
	} {
		require.ErrorContains(t, tc.l.Validate(), tc.want)
	}
	require.NoError(t, throttle.Limit{Key: "k", OutputTokensPerMinute: 8_000}.Validate(), "an output budget alone is a limit")
	l := throttle.Limit{Key: "k", InputTokensPerMinute: 0.5, OutputTokensPerMinute: 8_000}.WithDefaults()
	require.Equal(t, 1.0, l.InputTokenBurst)
	require.Equal(t, 8_000.0, l.OutputTokenBurst)
}

func TestObserve_LearnsEachTokenDimension(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("anthropic-ratelimit-input-tokens-limit", "30000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "25000")
	h.Set("anthropic-ratelimit-input-tokens-reset", now.Add(10*time.Second).Format(time.RFC3339))
	h.Set("anthropic-ratelimit-output-tokens-limit", "4000")
	h.Set("anthropic-ratelimit-output-tokens-remaining", "0")
	h.Set("anthropic-ratelimit-output-tokens-reset", now.Add(5*time.Second).Format(time.RFC3339))
	info := throttle.ParseRateLimitHeaders(h, now)
	require.Equal(t, throttle.TokenWindow{Limit: 30_000, Remaining: 25_000, HasRemaining: true, Reset: now.Add(10 * time.Second)}, info.InputTokens)
	require.Equal(t, throttle.TokenWindow{Limit: 4_000, Remaining: 0, HasRemaining: true, Reset: now.Add(5 * time.Second)}, info.OutputTokens)

	eff, s := anthropicLimit.Observe(throttle.State{}, now, info)
	require.Equal(t, 30_000.0, eff.InputTokensPerMinute, "learned: below the configured 60,000")
	require.Equal(t, 4_000.0, eff.OutputTokensPerMinute)
	require.Equal(t, 1_000.0, eff.OutputTokenBurst, "the configured burst is below the learned limit")
	require.Equal(t, 10_000.0, s.InputTokens.Level, "the burst is below what remains")
	require.Equal(t, 0.0, s.OutputTokens.Level, "nothing is admitted past what the provider says remains")
	require.Zero(t, eff.TokensPerMinute, "headers never add a kind of limit")

	learned := throttle.LearnedLimit(anthropicLimit, eff)
	require.Equal(t, throttle.Limit{InputTokensPerMinute: 30_000, OutputTokensPerMinute: 4_000}, learned)
	require.Equal(t, eff, throttle.EffectiveLimit(anthropicLimit, learned), "what is kept gives the effective limit back")

	higher := throttle.ParseRateLimitHeaders(http.Header{"Anthropic-Ratelimit-Output-Tokens-Limit": {"90000"}}, now)
	eff, _ = anthropicLimit.Observe(throttle.State{}, now, higher)
	require.Equal(t, 6_000.0, eff.OutputTokensPerMinute, "never raised above the configured budget")
}
