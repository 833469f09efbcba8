package throttle_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// Regressions found by review of the arithmetic; each once failed.
func TestLimit_CheckRegressions(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	t.Run("AdmitsAtItsOwnRetryAt", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", TokensPerMinute: 6000, TokenBurst: 29}
		s := l.Admit(throttle.State{}, t0, 29)
		d := l.Check(s, t0, 29)
		require.Equal(t, throttle.ReasonTokens, d.Reason)
		require.True(t, l.Check(s, d.RetryAt, 29).OK(), "a claim at RetryAt succeeds (100*0.29 rounds below 29)")
	})

	t.Run("GlacialRateDoesNotOverflowRetryAt", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 1e-10, Burst: 1}
		require.NoError(t, l.Validate())
		s := l.Admit(throttle.State{}, t0, 1)
		require.True(t, l.Check(s, t0, 1).RetryAt.After(t0))
	})

	t.Run("HugeCostDoesNotOverflowInflightTokens", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", MaxInflightTokens: 100}
		d := l.Check(throttle.State{InflightCount: 1, InflightTokens: 1}, t0, math.MaxInt64)
		require.Equal(t, throttle.ReasonInflightTokens, d.Reason)
	})

	t.Run("ZeroCostIsReadyAtOnce", func(t *testing.T) {
		t.Parallel()
		b := throttle.Bucket{Level: -20, At: t0}
		require.True(t, b.Allows(0, 10))
		require.Equal(t, t0, b.ReadyAt(0, 2, 10))
	})

	t.Run("DefaultsOfATinyTokenRateValidate", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, throttle.Limit{Key: "k", TokensPerMinute: 0.5}.WithDefaults().Validate())
	})
}
