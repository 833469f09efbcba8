package throttle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func TestLimit_Rates(t *testing.T) {
	t.Parallel()

	type rate struct {
		D                           throttle.Dimension
		Set                         bool
		PerSecond, PerMinute, Burst float64
	}
	collect := func(l throttle.Limit) []rate {
		var out []rate
		for d, r := range l.Rates() {
			out = append(out, rate{d, r.IsSet(), r.PerSecond(), r.PerMinute(), r.Burst()})
		}
		return out
	}

	t.Run("EachDimensionItsFieldsAndUnit", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 2, Burst: 3, TokensPerMinute: 600, TokenBurst: 50,
			InputTokensPerMinute: 120, InputTokenBurst: 7, OutputTokensPerMinute: 60, OutputTokenBurst: 1}
		require.Equal(t, []rate{
			{throttle.DimensionRequests, true, 2, 120, 3},
			{throttle.DimensionTokens, true, 10, 600, 50},
			{throttle.DimensionInputTokens, true, 2, 120, 7},
			{throttle.DimensionOutputTokens, true, 1, 60, 1},
		}, collect(l))
	})

	t.Run("UnsetIsTheZeroRate", func(t *testing.T) {
		t.Parallel()
		// A burst without its rate (Validate refuses it) is no rate either.
		l := throttle.Limit{Key: "k", MaxConcurrent: 1, TokenBurst: 5, InputTokensPerMinute: 60}
		require.Equal(t, []rate{
			{D: throttle.DimensionRequests},
			{D: throttle.DimensionTokens},
			{throttle.DimensionInputTokens, true, 1, 60, 0},
			{D: throttle.DimensionOutputTokens},
		}, collect(l))
		require.Equal(t, throttle.Rate{}, l.Rate(throttle.Dimension(4)))
		require.Equal(t, throttle.Rate{}, l.Rate(throttle.Dimension(-1)))
	})

	t.Run("PerMinuteOfATokenBudgetIsItsFigure", func(t *testing.T) {
		t.Parallel()
		// x/60*60 is not x for this figure: the Rate keeps the figure as given.
		var tpm = 250.3030446218004 // a variable: constant arithmetic is exact
		require.NotEqual(t, tpm, tpm/60*60)
		r := throttle.Limit{Key: "k", TokensPerMinute: tpm}.Rate(throttle.DimensionTokens)
		require.Equal(t, tpm, r.PerMinute())
		require.Equal(t, tpm/60, r.PerSecond())
		l := throttle.Limit{Key: "k", RequestsPerSecond: tpm}
		require.Equal(t, tpm, l.Rate(throttle.DimensionRequests).PerSecond())
		require.Equal(t, l.RequestsPerMinute(), l.Rate(throttle.DimensionRequests).PerMinute())
	})

	t.Run("StopsWhenTold", func(t *testing.T) {
		t.Parallel()
		var seen []throttle.Dimension
		for d := range (throttle.Limit{Key: "k", MaxConcurrent: 1}).Rates() {
			seen = append(seen, d)
			if d == throttle.DimensionTokens {
				break
			}
		}
		require.Equal(t, []throttle.Dimension{throttle.DimensionRequests, throttle.DimensionTokens}, seen)
	})
}

func TestDimension(t *testing.T) {
	t.Parallel()
	c := throttle.Cost{Input: 30, Output: 12}
	for _, tt := range []struct {
		d    throttle.Dimension
		name string
		per  time.Duration
		draw int64
	}{
		{throttle.DimensionRequests, "requests", time.Second, 1},
		{throttle.DimensionTokens, "tokens", time.Minute, 42},
		{throttle.DimensionInputTokens, "input_tokens", time.Minute, 30},
		{throttle.DimensionOutputTokens, "output_tokens", time.Minute, 12},
		{throttle.Dimension(4), "unknown", 0, 42},
	} {
		require.Equal(t, tt.name, tt.d.String())
		require.Equal(t, tt.per, tt.d.Per(), tt.name)
		require.Equal(t, tt.draw, tt.d.Draw(c), tt.name)
	}
	require.Equal(t, int64(1), throttle.DimensionRequests.Draw(throttle.Cost{}), "a request is one whatever its cost")
}

func TestState_Bucket(t *testing.T) {
	t.Parallel()
	var s throttle.State
	for i, d := range []throttle.Dimension{throttle.DimensionRequests, throttle.DimensionTokens,
		throttle.DimensionInputTokens, throttle.DimensionOutputTokens} {
		s.Bucket(d).Level = float64(i + 1)
	}
	require.Equal(t, throttle.State{Requests: throttle.Bucket{Level: 1}, Tokens: throttle.Bucket{Level: 2},
		InputTokens: throttle.Bucket{Level: 3}, OutputTokens: throttle.Bucket{Level: 4}}, s)
	require.Nil(t, s.Bucket(throttle.Dimension(4)))
}
