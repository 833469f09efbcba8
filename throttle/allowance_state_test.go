package throttle_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// requireRefused checks that d refuses for an allowance with RetryAt at want (zero: never).
func requireRefused(t *testing.T, d throttle.Decision, want time.Time) {
	t.Helper()
	require.Equal(t, throttle.ReasonAllowance, d.Reason)
	require.False(t, d.OK())
	require.True(t, want.Equal(d.RetryAt), "RetryAt: want %v, got %v", want, d.RetryAt)
}

func TestAllowance_CheckCalendar(t *testing.T) {
	t.Parallel()
	a := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 100, Calendar: throttle.CalendarDay, Zone: "America/Los_Angeles"}
	morning := utc(t, "2026-03-07T10:00:00-08:00")
	midnight := utc(t, "2026-03-08T00:00:00-08:00")

	t.Run("CountsUpToTheAmount", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, morning, 60)
		require.Equal(t, throttle.AllowanceState{Start: utc(t, "2026-03-07T08:00:00Z"), Used: 60, Held: 60}, s)
		require.True(t, a.Check(s, morning, 40).OK())
		requireRefused(t, a.Check(s, morning, 41), midnight)
		require.Equal(t, int64(60), a.Used(s, morning.Add(13*time.Hour)))
	})

	t.Run("ResetsAtLocalMidnight", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, morning, 100)
		requireRefused(t, a.Check(s, midnight.Add(-time.Nanosecond), 1), midnight)
		require.True(t, a.Check(s, midnight, 100).OK(), "a new day: the whole amount")
		require.Zero(t, a.Used(s, midnight))
		s = a.Admit(s, midnight, 30)
		require.Equal(t, throttle.AllowanceState{Start: midnight.UTC(), Used: 30, Held: 30}, s,
			"a new window: yesterday's 100 are neither counted nor held")
		// The day of the spring-forward is 23 hours: the next reset is at 07:00 UTC, not 08:00.
		s = a.Admit(s, midnight, 70)
		requireRefused(t, a.Check(s, midnight.Add(22*time.Hour), 1), utc(t, "2026-03-09T07:00:00Z"))
	})

	t.Run("RefusesForeverWhatIsLargerThanTheAmount", func(t *testing.T) {
		t.Parallel()
		requireRefused(t, a.Check(throttle.AllowanceState{}, morning, 101), time.Time{})
		require.True(t, a.Check(throttle.AllowanceState{}, morning, 100).OK())
	})

	t.Run("SpentRefusesEvenAZeroCost", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, morning, 100)
		requireRefused(t, a.Check(s, morning, 0), midnight)
		s = a.Release(s, morning, morning, 100, 99)
		require.True(t, a.Check(s, morning, 0).OK())
		require.True(t, a.Check(s, morning, -5).OK(), "a negative count is 0")
	})

	t.Run("ClockBehindTheStateErrsHigh", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, midnight, 90) // the next day's window
		requireRefused(t, a.Check(s, morning, 20), utc(t, "2026-03-09T07:00:00Z"))
		require.Equal(t, s, a.Admit(s, morning, 0))
		s2 := a.Admit(s, morning, 5)
		require.Equal(t, int64(95), s2.Used, "counted in the state's window")
		require.Equal(t, s2, a.Release(s2, midnight, morning, 5, 0), "but its refund cannot be placed: dropped")
	})
}

func TestAllowance_ReleaseCalendar(t *testing.T) {
	t.Parallel()
	a := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 100, Calendar: throttle.CalendarDay}
	late := utc(t, "2026-01-31T23:00:00Z")
	next := utc(t, "2026-02-01T00:30:00Z")

	t.Run("ReconcilesInTheSameWindow", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, late, 80)
		require.Equal(t, int64(30), a.Release(s, late.Add(time.Minute), late, 80, 30).Used, "50 unused come back")
		require.Equal(t, int64(130), a.Release(s, late.Add(time.Minute), late, 80, 130).Used, "50 above: debt")
		require.Equal(t, int64(80), a.Release(s, late.Add(time.Minute), late, 80, -1).Used, "not reported: spent")
		require.Equal(t, int64(0), a.Release(s, late.Add(time.Minute), late, 200, 0).Used, "never below 0")
		requireRefused(t, a.Check(a.Release(s, late, late, 80, 130), late, 0), next.Truncate(24*time.Hour))
	})

	t.Run("YesterdaysRefundDoesNotCreditToday", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, late, 80) // January 31st's
		s = a.Admit(s, next, 90)                          // February 1st's
		requireRefused(t, a.Check(s, next, 11), utc(t, "2026-02-02T00:00:00Z"))
		require.Equal(t, int64(90), s.Held, "today's window holds today's ticket only")
		s = a.Release(s, next, late, 80, 0) // the 23:00 ticket used nothing, but its day is over
		require.Equal(t, throttle.AllowanceState{Start: utc(t, "2026-02-01T00:00:00Z"), Used: 90, Held: 90}, s,
			"nor does its release touch what today's window holds")
		requireRefused(t, a.Check(s, next, 11), utc(t, "2026-02-02T00:00:00Z"))
	})

	t.Run("YesterdaysDebtDoesNotChargeToday", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, late, 80)
		s = a.Release(s, next, late, 80, 500)
		require.Equal(t, throttle.AllowanceState{Start: utc(t, "2026-02-01T00:00:00Z")}, s)
		require.True(t, a.Check(s, next, 100).OK())
	})
}

func TestAllowance_Rolling(t *testing.T) {
	t.Parallel()
	a := throttle.Allowance{Meter: throttle.MeterOutputTokens, Amount: 100, Rolling: 24 * time.Hour} // slices of an hour
	h := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Hour))) }

	t.Run("ConservativeByAtMostOneSlice", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, h(0.5), 100)
		require.Equal(t, throttle.AllowanceState{Start: h(0), Used: 100, Held: 100}, s)
		// An exact log would admit at 24:30; the slice of 00:00-01:00 falls out at 25:00.
		requireRefused(t, a.Check(s, h(10), 1), h(25))
		requireRefused(t, a.Check(s, h(24.9), 1), h(25))
		require.True(t, a.Check(s, h(25), 100).OK())
		require.Equal(t, int64(100), a.Used(s, h(24.99)))
		require.Zero(t, a.Used(s, h(25)))
	})

	t.Run("RetryAtIsWhenEnoughFallsOut", func(t *testing.T) {
		t.Parallel()
		var s throttle.AllowanceState
		for i, n := range []int64{30, 30, 30} { // at 00:00, 02:00, 04:00
			s = a.Admit(s, h(float64(2*i)), n)
		}
		require.Equal(t, throttle.AllowanceState{Start: h(4), Used: 30, Earlier: []int64{30, 0, 30, 0}, Held: 90}, s)
		requireRefused(t, a.Check(s, h(5), 11), h(25))
		requireRefused(t, a.Check(s, h(5), 41), h(27))
		requireRefused(t, a.Check(s, h(5), 71), h(29))
		requireRefused(t, a.Check(s, h(5), 101), time.Time{})
		require.True(t, a.Check(s, h(5), 10).OK())
		s2 := a.Admit(s, h(26), 0)                       // the first slice has fallen out
		earlier := make([]int64, throttle.RollingSlices) // the slices of 02:00 to 25:00
		earlier[0], earlier[2] = 30, 30
		require.Equal(t, throttle.AllowanceState{Start: h(26), Earlier: earlier, Held: 90}, s2, "still in flight: still held")
		require.Equal(t, throttle.AllowanceState{Start: h(100), Held: 90}, a.Admit(s, h(100), 0), "all fallen out, all still held")
	})

	t.Run("ReconcilesInTheAdmissionSlice", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, h(1), 60)
		s = a.Admit(s, h(3), 40)
		s = a.Release(s, h(4), h(1), 60, 10)
		require.Equal(t, throttle.AllowanceState{Start: h(4), Earlier: []int64{10, 0, 40}, Held: 40}, s)
		// Its slice falls out at 26:00; after that its refund (or debt) has nowhere to go.
		s = a.Admit(throttle.AllowanceState{}, h(1), 60)
		require.Equal(t, throttle.AllowanceState{Start: h(26)}, a.Release(s, h(26), h(1), 60, 0))
		require.Equal(t, throttle.AllowanceState{Start: h(26)}, a.Release(s, h(26), h(1), 60, 900))
		require.Equal(t, int64(99), a.Release(s, h(25.5), h(1), 60, 99).Earlier[0], "still covered: debt counts")
	})

	t.Run("DoesNotModifyItsInput", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(a.Admit(throttle.AllowanceState{}, h(1), 10), h(2), 10)
		before := append([]int64(nil), s.Earlier...)
		_ = a.Admit(s, h(2), 5)
		_ = a.Admit(s, h(1.5), 5)
		_ = a.Release(s, h(2), h(1), 10, 0)
		require.Equal(t, before, s.Earlier)
	})

	t.Run("ClockFarBehindCountsInTheOldestSliceKept", func(t *testing.T) {
		t.Parallel()
		s := a.Admit(throttle.AllowanceState{}, h(30), 10)
		s = a.Admit(s, h(2), 7) // 28 hours behind: before every slice kept
		earlier := make([]int64, throttle.RollingSlices)
		earlier[0] = 7 // the oldest slice kept, 06:00
		require.Equal(t, throttle.AllowanceState{Start: h(30), Used: 10, Earlier: earlier, Held: 17}, s)
		require.Equal(t, throttle.AllowanceState{Start: h(30), Used: 10, Earlier: earlier, Held: 10}, a.Release(s, h(30), h(2), 7, 0),
			"its refund cannot be placed: dropped; but it is no longer held")
	})

	t.Run("ShortDurationsCutInMilliseconds", func(t *testing.T) {
		t.Parallel()
		sec := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 2, Rolling: time.Second} // slices of 42ms
		s := sec.Admit(throttle.AllowanceState{}, t0, 1)
		s = sec.Admit(s, t0.Add(500*time.Millisecond), 1)
		requireRefused(t, sec.Check(s, t0.Add(999*time.Millisecond), 1), t0.Add(25*42*time.Millisecond))
		require.True(t, sec.Check(s, t0.Add(25*42*time.Millisecond), 1).OK())
	})
}

func TestAllowanceState_JSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(throttle.AllowanceState{})
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(b), "the zero state is empty")
	s := throttle.AllowanceState{Start: t0, Used: 5, Earlier: []int64{1, 0, 2}}
	b, err = json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, `{"start":"2026-01-01T00:00:00Z","used":5,"earlier":[1,0,2]}`, string(b))
	var back throttle.AllowanceState
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, s, back)

	a := throttle.Allowance{Meter: throttle.MeterMoney, Currency: "USD", Amount: 5_000_000, Calendar: throttle.CalendarDay,
		Zone: "America/Los_Angeles", OnSpent: throttle.OnSpentRefuse}
	b, err = json.Marshal(a)
	require.NoError(t, err)
	require.JSONEq(t, `{"meter":"money","currency":"USD","amount":5000000,"calendar":"day","zone":"America/Los_Angeles","on_spent":"refuse"}`, string(b))
	var backA throttle.Allowance
	require.NoError(t, json.Unmarshal(b, &backA))
	require.Equal(t, a, backA)
}
