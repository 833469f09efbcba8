package throttle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBucket_Refill(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name        string
		b           throttle.Bucket
		now         time.Time
		rate, burst float64
		want        throttle.Bucket
	}{
		{"ZeroBucketIsFull", throttle.Bucket{}, t0, 2, 10, throttle.Bucket{Level: 10, At: t0}},
		{"ZeroBucketIsFullEvenWithZeroRate", throttle.Bucket{}, t0.Add(time.Hour), 0, 3, throttle.Bucket{Level: 3, At: t0.Add(time.Hour)}},
		{"ZeroBucketIgnoresStaleLevel", throttle.Bucket{Level: -50}, t0, 2, 10, throttle.Bucket{Level: 10, At: t0}},
		{"AddsRateTimesElapsed", throttle.Bucket{Level: 2, At: t0}, t0.Add(1500 * time.Millisecond), 2, 10, throttle.Bucket{Level: 5, At: t0.Add(1500 * time.Millisecond)}},
		{"AddsFractionalElapsed", throttle.Bucket{Level: 0, At: t0}, t0.Add(250 * time.Millisecond), 4, 10, throttle.Bucket{Level: 1, At: t0.Add(250 * time.Millisecond)}},
		{"CapsAtBurst", throttle.Bucket{Level: 2, At: t0}, t0.Add(10 * time.Second), 2, 10, throttle.Bucket{Level: 10, At: t0.Add(10 * time.Second)}},
		{"PaysDebtFirst", throttle.Bucket{Level: -6, At: t0}, t0.Add(2 * time.Second), 2, 10, throttle.Bucket{Level: -2, At: t0.Add(2 * time.Second)}},
		{"SameInstantAddsNothing", throttle.Bucket{Level: 2, At: t0}, t0, 2, 10, throttle.Bucket{Level: 2, At: t0}},
		{"ZeroRateAddsNothing", throttle.Bucket{Level: 2, At: t0}, t0.Add(time.Hour), 0, 10, throttle.Bucket{Level: 2, At: t0.Add(time.Hour)}},
		{"NowBeforeAtAddsNothing", throttle.Bucket{Level: 2, At: t0.Add(time.Second)}, t0, 2, 10, throttle.Bucket{Level: 2, At: t0.Add(time.Second)}},
		{"NowBeforeAtKeepsDebt", throttle.Bucket{Level: -4, At: t0.Add(time.Minute)}, t0, 100, 10, throttle.Bucket{Level: -4, At: t0.Add(time.Minute)}},
		{"LoweredBurstCapsLevel", throttle.Bucket{Level: 8, At: t0}, t0, 2, 5, throttle.Bucket{Level: 5, At: t0}},
		{"LoweredBurstCapsLevelWhenNowBeforeAt", throttle.Bucket{Level: 8, At: t0.Add(time.Second)}, t0, 2, 5, throttle.Bucket{Level: 5, At: t0.Add(time.Second)}},
		{"LoweredBurstCapsRefilledLevel", throttle.Bucket{Level: 4, At: t0}, t0.Add(time.Second), 2, 5, throttle.Bucket{Level: 5, At: t0.Add(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.b.Refill(tc.now, tc.rate, tc.burst)
			require.Equal(t, tc.want.Level, got.Level)
			require.True(t, tc.want.At.Equal(got.At), "At: want %v, got %v", tc.want.At, got.At)
		})
	}

	t.Run("DoesNotModifyReceiver", func(t *testing.T) {
		t.Parallel()
		b := throttle.Bucket{Level: 1, At: t0}
		_ = b.Refill(t0.Add(time.Second), 5, 10)
		require.Equal(t, throttle.Bucket{Level: 1, At: t0}, b)
	})

	t.Run("RefillInStepsEqualsRefillAtOnce", func(t *testing.T) {
		t.Parallel()
		b := throttle.Bucket{Level: -3, At: t0}
		stepped := b
		for i := 1; i <= 4; i++ {
			stepped = stepped.Refill(t0.Add(time.Duration(i)*500*time.Millisecond), 2, 10)
		}
		once := b.Refill(t0.Add(2*time.Second), 2, 10)
		require.Equal(t, once.Level, stepped.Level)
		require.Equal(t, 1.0, once.Level)
	})
}

func TestBucket_Allows(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		level    float64
		n, burst float64
		want     bool
	}{
		{"ExactlyEnough", 3, 3, 10, true},
		{"MoreThanEnough", 5, 3, 10, true},
		{"TooLittle", 2.999, 3, 10, false},
		{"FractionalTooLittle", 3, 3.5, 10, false},
		{"ZeroAlwaysAllowed", -5, 0, 10, true},
		{"NegativeAlwaysAllowed", -5, -1, 10, true},
		{"NothingInDebt", -0.5, 1, 10, false},
		{"EqualToBurstNeedsFullBucket", 10, 10, 10, true},
		{"EqualToBurstNotFull", 9.5, 10, 10, false},
		{"OverBurstWithFullBucket", 10, 15, 10, true},
		{"FarOverBurstWithFullBucket", 10, 1e6, 10, true},
		{"OverBurstWithoutFullBucket", 9.99, 15, 10, false},
		{"OverBurstEmptyBucket", 0, 15, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, throttle.Bucket{Level: tc.level, At: t0}.Allows(tc.n, tc.burst))
		})
	}
}

func TestBucket_Take(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		level, n float64
		want     float64
	}{
		{"WithinLevel", 5, 3, 2},
		{"ToZero", 3, 3, 0},
		{"IntoDebt", 2, 5, -3},
		{"DeeperIntoDebt", -3, 4, -7},
		{"Zero", 4, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := throttle.Bucket{Level: tc.level, At: t0}.Take(tc.n)
			require.Equal(t, tc.want, got.Level)
			require.True(t, got.At.Equal(t0), "Take must not move At")
		})
	}
}

func TestBucket_Give(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name            string
		level, n, burst float64
		want            float64
	}{
		{"GivesBack", 2, 3, 10, 5},
		{"CapsAtBurst", 8, 5, 10, 10},
		{"CapsWhenAlreadyFull", 10, 1, 10, 10},
		{"RepaysDebt", -4, 3, 10, -1},
		{"NegativeMakesDebt", 2, -5, 10, -3},
		{"NegativeDeepensDebt", -1, -4, 10, -5},
		{"CapsAtLoweredBurst", 8, 0, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := throttle.Bucket{Level: tc.level, At: t0}.Give(tc.n, tc.burst)
			require.Equal(t, tc.want, got.Level)
			require.True(t, got.At.Equal(t0), "Give must not move At")
		})
	}
}

func TestBucket_ReadyAt(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name           string
		level          float64
		n, rate, burst float64
		want           time.Time
	}{
		{"AlreadyAllowedReturnsAt", 5, 3, 2, 10, t0},
		{"ExactlyAllowedReturnsAt", 3, 3, 2, 10, t0},
		{"AlreadyAllowedWithZeroRateReturnsAt", 5, 3, 0, 10, t0},
		{"ZeroRateReturnsZeroTime", 0, 1, 0, 10, time.Time{}},
		{"NegativeRateReturnsZeroTime", 0, 1, -1, 10, time.Time{}},
		{"WholeSeconds", 0, 4, 2, 10, t0.Add(2 * time.Second)},
		{"PaysDebtFirst", -2, 1, 2, 10, t0.Add(1500 * time.Millisecond)},
		{"RoundsUpToMicrosecond", 0, 1, 3, 10, t0.Add(333334 * time.Microsecond)},
		{"RoundsUpTinyShortfall", 0.9999999, 1, 1, 10, t0.Add(time.Microsecond)},
		{"ExactMicrosecondNotRoundedFurther", 0, 1, 1e6, 10, t0.Add(time.Microsecond)},
		{"OverBurstWaitsForFullBucket", 4, 20, 2, 10, t0.Add(3 * time.Second)},
		{"OverBurstInDebtWaitsForFullBucket", -10, 20, 5, 10, t0.Add(4 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := throttle.Bucket{Level: tc.level, At: t0}.ReadyAt(tc.n, tc.rate, tc.burst)
			if tc.want.IsZero() {
				require.True(t, got.IsZero(), "want zero time, got %v", got)
				return
			}
			require.True(t, tc.want.Equal(got), "want %v, got %v", tc.want, got)
		})
	}

	t.Run("RefilledBucketAllowsAtReadyAt", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ level, n, rate, burst float64 }{
			{0, 1, 3, 10}, {-2, 1, 2, 10}, {4, 20, 2, 10}, {0.5, 7, 0.7, 9}, {-100, 1, 1e6, 1},
		} {
			b := throttle.Bucket{Level: tc.level, At: t0}
			at := b.ReadyAt(tc.n, tc.rate, tc.burst)
			require.True(t, at.After(t0), "%+v", tc)
			require.True(t, b.Refill(at, tc.rate, tc.burst).Allows(tc.n, tc.burst), "%+v: not allowed at ReadyAt %v", tc, at)
			require.False(t, b.Refill(at.Add(-time.Microsecond), tc.rate, tc.burst).Allows(tc.n, tc.burst), "%+v: allowed a microsecond before ReadyAt", tc)
		}
	})
}
