package admit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// anthropicLimit meters requests, input and output tokens apart, as Anthropic does.
var anthropicLimit = throttle.Limit{Key: "anthropic", RequestsPerSecond: 10, InputTokensPerMinute: 60_000,
	InputTokenBurst: 10_000, OutputTokensPerMinute: 6_000, OutputTokenBurst: 1_000}

func TestDecideClaim_OutputBudgetBlocksTheLine(t *testing.T) {
	t.Parallel()
	l := anthropicLimit.WithDefaults()
	page := admit.ClaimPage{
		Line: "anthropic", Now: t0, Budget: 10,
		Limits: map[string]admit.LimitState{"anthropic": {Limit: l}},
		Candidates: []admit.Candidate{
			{ID: 1, LimitKeys: []string{"anthropic"}, Cost: 900, OutputCost: 600},
			{ID: 2, LimitKeys: []string{"anthropic"}, Cost: 700, OutputCost: 600},
			{ID: 3, LimitKeys: []string{"anthropic"}, Cost: 50, OutputCost: 0},
		},
	}
	d, err := admit.DecideClaim(page)
	require.NoError(t, err)
	require.Equal(t, []admit.Admission{{ID: 1, At: t0}}, d.Admitted)
	require.Equal(t, throttle.ReasonOutputTokens, d.Blocked, "400 output tokens left, 600 asked")
	require.Equal(t, t0.Add(2*time.Second), d.RetryAt)
	require.Equal(t, []admit.Wait{{ID: 2, Key: "anthropic", Reason: throttle.ReasonOutputTokens},
		{ID: 3, Key: "anthropic", Reason: throttle.ReasonOutputTokens}}, d.Waits, "the head is not overtaken")
	require.Equal(t, 400.0, d.States["anthropic"].OutputTokens.Level)
	require.Equal(t, 9_700.0, d.States["anthropic"].InputTokens.Level)
}

func TestReportedUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		total, output int64
		want          throttle.Cost
		reported      bool
	}{
		{"NotReported", -1, 0, throttle.Cost{}, false},
		{"NotReportedWhateverTheOutput", -7, 5, throttle.Cost{}, false},
		{"OneFigureIsInput", 120, 0, throttle.Cost{Input: 120}, true},
		{"Split", 120, 20, throttle.Cost{Input: 100, Output: 20}, true},
		{"AllOutput", 120, 120, throttle.Cost{Output: 120}, true},
		{"OutputAboveTotalIsClamped", 120, 500, throttle.Cost{Output: 120}, true},
		{"NegativeOutputCountsAsNone", 120, -3, throttle.Cost{Input: 120}, true},
		{"ZeroUsed", 0, 9, throttle.Cost{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, reported := admit.ReportedUsage(tc.total, tc.output)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.reported, reported)
		})
	}
}

func TestCostOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		total, output int64
		want          throttle.Cost
	}{
		{"OneFigureIsInput", 500, 0, throttle.Cost{Input: 500}},
		{"Split", 1874, 1024, throttle.Cost{Input: 850, Output: 1024}},
		{"AllOutput", 7, 7, throttle.Cost{Output: 7}},
		{"Nothing", 0, 0, throttle.Cost{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := admit.CostOf(tc.total, tc.output)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.total, got.Total())
		})
	}
}

func TestAbandonedCost(t *testing.T) {
	t.Parallel()

	l := throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: 100}
	admitted := l.Admit(throttle.State{}, t0, 100)

	t.Run("NeverStartedGivesTheReservationBack", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, int64(0), admit.AbandonedCost(false))
		require.Equal(t, 100.0, l.Release(admitted, t0, 100, admit.AbandonedCost(false)).Tokens.Level)
	})

	t.Run("StartedKeepsTheReservationSpent", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, int64(-1), admit.AbandonedCost(true))
		require.Equal(t, 0.0, l.Release(admitted, t0, 100, admit.AbandonedCost(true)).Tokens.Level)
	})
}
