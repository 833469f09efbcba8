package throttle_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// TestAllowance_Held: Admit holds what it counts, Release lets go of what the ticket reserved once,
// reported or not; a calendar window holds only its own tickets, a rolling state holds every ticket
// in flight across slices; Refundable is what is held, at most what is counted, and 0 for requests.
func TestAllowance_Held(t *testing.T) {
	t.Parallel()
	day := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 100, Calendar: throttle.CalendarDay}
	rolling := throttle.Allowance{Meter: throttle.MeterOutputTokens, Amount: 100, Rolling: 24 * time.Hour} // slices of an hour
	requests := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 10, Calendar: throttle.CalendarDay}
	late := utc(t, "2026-01-31T23:00:00Z")
	next := utc(t, "2026-02-01T00:30:00Z")
	h := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Hour))) }

	// op admits n at at when admittedAt is zero, else releases a ticket admitted then, reserving n,
	// having used actual (negative: not reported).
	type op struct {
		at, admittedAt time.Time
		n, actual      int64
	}
	admit := func(at time.Time, n int64) op { return op{at: at, n: n} }
	release := func(at, admittedAt time.Time, reserved, actual int64) op {
		return op{at: at, admittedAt: admittedAt, n: reserved, actual: actual}
	}
	for _, tc := range []struct {
		name                 string
		a                    throttle.Allowance
		ops                  []op
		at                   time.Time
		want                 throttle.AllowanceState
		wantUsed, refundable int64
	}{
		{"AdmitHoldsWhatItCounts", day, []op{admit(late, 80)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 80, Held: 80}, 80, 80},
		{"ANegativeCountHoldsNothing", day, []op{admit(late, -5)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z")}, 0, 0},
		{"ReportedBelowGivesBackAndLetsGo", day, []op{admit(late, 80), release(late, late, 80, 30)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 30}, 30, 0},
		{"NotReportedLetsGoToo", day, []op{admit(late, 80), release(late, late, 80, -1)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 80}, 80, 0},
		{"DebtLetsGo", day, []op{admit(late, 80), release(late, late, 80, 130)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 130}, 130, 0},
		{"VoidLetsGo", day, []op{admit(late, 80), release(late, late, 80, 0)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z")}, 0, 0},
		{"OnlyTheReleasedTicketLetsGo", day, []op{admit(late, 60), admit(late, 30), release(late, late, 60, 10)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 40, Held: 30}, 40, 30},
		{"NeverBelowZero", day, []op{admit(late, 20), release(late, late, 50, -1)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 20}, 20, 0},
		{"ANewWindowHoldsNothingOfYesterday", day, []op{admit(late, 80), admit(next, 0)}, next,
			throttle.AllowanceState{Start: utc(t, "2026-02-01T00:00:00Z")}, 0, 0},
		{"YesterdaysReleaseDoesNotLetGoOfToday", day, []op{admit(late, 80), admit(next, 50), release(next, late, 80, 0)}, next,
			throttle.AllowanceState{Start: utc(t, "2026-02-01T00:00:00Z"), Used: 50, Held: 50}, 50, 50},
		{"RequestsRefundNothing", requests, []op{admit(late, 1)}, late,
			throttle.AllowanceState{Start: utc(t, "2026-01-31T00:00:00Z"), Used: 1, Held: 1}, 1, 0},
		{"RollingHoldsAcrossSlices", rolling, []op{admit(h(1), 60), admit(h(20), 30)}, h(20),
			throttle.AllowanceState{Start: h(20), Used: 30, Earlier: append([]int64{60}, make([]int64, 18)...), Held: 90}, 90, 90},
		{"RollingHeldOfAFallenOutSliceRefundsOnlyWhatIsCounted", rolling, []op{admit(h(1), 60), admit(h(20), 30), admit(h(26), 0)}, h(26),
			throttle.AllowanceState{Start: h(26), Earlier: []int64{30, 0, 0, 0, 0, 0}, Held: 90}, 30, 30},
		{"RollingReleaseOfAFallenOutSliceLetsGo", rolling, []op{admit(h(1), 60), admit(h(20), 30), release(h(26), h(1), 60, 0)}, h(26),
			throttle.AllowanceState{Start: h(26), Earlier: []int64{30, 0, 0, 0, 0, 0}, Held: 30}, 30, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s throttle.AllowanceState
			for _, o := range tc.ops {
				if o.admittedAt.IsZero() {
					s = tc.a.Admit(s, o.at, o.n)
				} else {
					s = tc.a.Release(s, o.at, o.admittedAt, o.n, o.actual)
				}
			}
			require.Equal(t, tc.want, s)
			require.Equal(t, tc.wantUsed, tc.a.Used(s, tc.at))
			require.Equal(t, tc.refundable, tc.a.Refundable(s, tc.at))
		})
	}

	t.Run("RefundableOfAnOldWindowIsZero", func(t *testing.T) {
		t.Parallel()
		s := day.Admit(throttle.AllowanceState{}, late, 80)
		require.Equal(t, int64(80), day.Refundable(s, late))
		require.Zero(t, day.Refundable(s, next), "at midnight the window and what it held are gone")
	})
}

// TestSpent_Refuses: a ticket waits while what is in flight may give back room for it, whatever the
// allowance's OnSpent or the deadline; otherwise the old rules apply; a ticket larger than the whole
// allowance is always refused.
func TestSpent_Refuses(t *testing.T) {
	t.Parallel()
	reset := t0.Add(time.Hour)
	refuse := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 1000, Calendar: throttle.CalendarDay, OnSpent: throttle.OnSpentRefuse}
	wait := refuse
	wait.OnSpent = throttle.OnSpentWait
	early, late := reset.Add(-time.Minute), reset.Add(time.Minute)
	for _, tc := range []struct {
		name                    string
		a                       throttle.Allowance
		used, needs, refundable int64
		resetAt, deadline       time.Time
		want                    bool
	}{
		{"WaitNoDeadline", wait, 800, 300, 0, reset, time.Time{}, false},
		{"WaitDeadlineAfterTheReset", wait, 800, 300, 0, reset, late, false},
		{"WaitDeadlineAtTheReset", wait, 800, 300, 0, reset, reset, true},
		{"WaitDeadlineBeforeTheReset", wait, 800, 300, 0, reset, early, true},
		{"Refuse", refuse, 800, 300, 0, reset, time.Time{}, true},
		{"NeverRoom", wait, 0, 1001, 0, time.Time{}, time.Time{}, true},
		{"NeverRoomEvenWithRefunds", wait, 800, 1001, 800, time.Time{}, time.Time{}, true},
		{"RefuseButRefundsMakeRoom", refuse, 800, 300, 800, reset, time.Time{}, false},
		{"DeadlineBeforeTheResetButRefundsMakeRoom", wait, 800, 300, 800, reset, early, false},
		{"RefundsMakeJustEnoughRoom", refuse, 800, 300, 100, reset, time.Time{}, false},
		{"RefundsMakeTooLittleRoom", refuse, 800, 300, 99, reset, time.Time{}, true},
		{"RefundsMakeTooLittleRoomDeadline", wait, 800, 300, 99, reset, early, true},
		{"RefundsMakeTooLittleRoomWaits", wait, 800, 300, 99, reset, late, false},
		{"DebtAboveTheAmountLeftAfterRefunds", refuse, 1500, 1, 400, reset, time.Time{}, true},
		{"ASpentAllowanceAndAZeroTicketWithRefunds", refuse, 1000, 0, 1, reset, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := throttle.Spent{Allowance: tc.a, Used: tc.used, Needs: tc.needs, Refundable: tc.refundable, ResetAt: tc.resetAt}
			require.Equal(t, tc.want, s.Refuses(tc.deadline))
		})
	}
}

// TestSpent_Error: the refusal names the allowance, its use and its reset; when an allowance that
// waits refuses because the ticket's deadline is not after the reset, it gives the deadline too.
func TestSpent_Error(t *testing.T) {
	t.Parallel()
	reset := t0.Add(time.Hour)
	early, late := reset.Add(-time.Minute), reset.Add(time.Minute)
	day := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 1, Calendar: throttle.CalendarDay, Zone: "America/Los_Angeles"}
	refuse := day
	refuse.OnSpent = throttle.OnSpentRefuse
	rolling := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 1, Rolling: 24 * time.Hour}
	const spent = "allowance requests=1/day@America/Los_Angeles spent: used 1 request of 1 request, the call needs 1 request; " +
		"resets at 2026-01-01T01:00:00Z (2025-12-31 17:00 PST)"
	for _, tc := range []struct {
		name              string
		a                 throttle.Allowance
		resetAt, deadline time.Time
		want              string
	}{
		{"NoDeadline", day, reset, time.Time{}, spent},
		{"DeadlineAfterTheReset", day, reset, late, spent},
		{"DeadlineBeforeTheReset", day, reset, early, spent + "; the call's deadline, 2026-01-01T00:59:00Z (2025-12-31 16:59 PST), comes before the reset"},
		{"DeadlineAtTheReset", day, reset, reset, spent + "; the call's deadline, 2026-01-01T01:00:00Z (2025-12-31 17:00 PST), comes before the reset"},
		{"RefusesWhateverTheDeadline", refuse, reset, early, spent},
		{"RollingDeadlineBeforeRoom", rolling, reset, early, "allowance requests=1/24h spent: used 1 request of 1 request, the call needs 1 request; " +
			"room again at 2026-01-01T01:00:00Z; the call's deadline, 2026-01-01T00:59:00Z, comes before then"},
		{"NeverRoom", day, time.Time{}, early, "allowance requests=1/day@America/Los_Angeles spent: used 1 request of 1 request, " +
			"the call needs 1 request; the call needs more than the whole allowance, so no window will admit it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := throttle.Spent{Allowance: tc.a, Used: 1, Needs: 1, ResetAt: tc.resetAt, Deadline: tc.deadline}
			require.Equal(t, tc.want, s.Error())
		})
	}
}

// TestAllowances_ReleaseReconcilesOnlyWhatCharged: a release reconciles only the allowances that
// counted the ticket (SpendRelease.Charged), so an allowance added while a ticket was in flight is
// not given back what it never counted (which would let it admit more than its amount).
func TestAllowances_ReleaseReconcilesOnlyWhatCharged(t *testing.T) {
	t.Parallel()
	noon := utc(t, "2026-05-05T12:00:00Z")
	day := utc(t, "2026-05-05T00:00:00Z")
	sp := throttle.Spend{Tokens: throttle.Tokens(1000)}

	t.Run("AnAllowanceAddedInFlightIsNotRefunded", func(t *testing.T) {
		t.Parallel()
		before := throttle.Limit{Key: "k", MaxConcurrent: 10}
		s := before.AdmitSpend(throttle.State{}, noon, sp) // t1, with no allowance
		t1 := before.Allowances.Keys()
		require.Empty(t, t1)
		after := withAllowances(t, before, "tokens=1500/day")
		s = after.AdmitSpend(s, noon.Add(time.Minute), sp) // t2, counted on the new allowance
		t2 := after.Allowances.Keys()
		require.Equal(t, []string{"tokens/day"}, t2)
		want := throttle.AllowanceState{Start: day, Used: 1000, Held: 1000}
		require.Equal(t, want, s.Allowances["tokens/day"])
		for _, r := range []throttle.SpendRelease{
			{AdmittedAt: noon, Reserved: sp, Void: true, Charged: t1},
			{AdmittedAt: noon, Reserved: sp, Reported: true, Charged: t1},
			{AdmittedAt: noon, Reserved: sp, Reported: true},
		} {
			got := after.ReleaseSpend(s, noon.Add(2*time.Minute), r)
			require.Equal(t, want, got.Allowances["tokens/day"], "t1 was never counted: %+v", r)
			require.Equal(t, throttle.ReasonAllowance, after.CheckSpend(got, noon.Add(2*time.Minute), throttle.Spend{Tokens: throttle.Tokens(600)}).Reason,
				"1000 of t2 in flight: 600 more would overrun 1500")
		}
		got := after.ReleaseSpend(s, noon.Add(2*time.Minute), throttle.SpendRelease{AdmittedAt: noon.Add(time.Minute), Reserved: sp,
			Actual: throttle.Spend{Tokens: throttle.Tokens(200)}, Reported: true, Charged: t2})
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 200}, got.Allowances["tokens/day"], "t2 was counted: reconciled")
	})

	t.Run("OnlyTheKeysCharged", func(t *testing.T) {
		t.Parallel()
		as := throttle.Allowances{mustParse(t, "tokens=5000/day"), mustParse(t, "requests=10/day")}
		st := as.Admit(nil, noon, sp)
		got := as.Release(st, noon, throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Void: true, Charged: []string{"requests/day"}})
		require.Equal(t, throttle.AllowanceStates{
			"tokens/day":   {Start: day, Used: 1000, Held: 1000},
			"requests/day": {Start: day},
		}, got)
		got = as.Release(st, noon, throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Void: true})
		require.Equal(t, st, got, "charged on nothing: nothing reconciled")
		got = as.Release(st, noon, throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Void: true,
			Charged: []string{"output_tokens/day", "not a key"}})
		require.Equal(t, st, got, "keys with no state, or naming no allowance, are skipped")
	})
}

// TestAllowances_KeepsARemovedAllowancesState: the state of an allowance removed from the limit is
// kept while it counts something, so that adding it back in the same window goes on from its count
// and the tickets it counted are reconciled on it; it is dropped once it counts nothing.
func TestAllowances_KeepsARemovedAllowancesState(t *testing.T) {
	t.Parallel()
	noon := utc(t, "2026-05-05T12:00:00Z")
	day := utc(t, "2026-05-05T00:00:00Z")
	tokens := mustParse(t, "tokens=1000/day")
	with := throttle.Allowances{tokens}
	without := throttle.Allowances{mustParse(t, "requests=100/hour")}
	sp := throttle.Spend{Tokens: throttle.Tokens(600)}
	small := throttle.Spend{Tokens: throttle.Tokens(10)}
	st := with.Admit(nil, noon, sp) // t1: 600 counted and held
	charged := with.Keys()

	t.Run("ReAddedInTheSameWindowContinuesItsCount", func(t *testing.T) {
		t.Parallel()
		removed := without.Admit(st, noon.Add(time.Minute), small)
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 600, Held: 600}, removed["tokens/day"], "removed but counting: kept")
		d, _ := with.Check(removed, noon.Add(2*time.Minute), throttle.Spend{Tokens: throttle.Tokens(500)})
		require.Equal(t, throttle.ReasonAllowance, d.Reason, "added back: 600 still counted, 500 more do not fit")
		d, _ = with.Check(removed, noon.Add(2*time.Minute), throttle.Spend{Tokens: throttle.Tokens(400)})
		require.True(t, d.OK())
		back := with.Admit(removed, noon.Add(2*time.Minute), throttle.Spend{Tokens: throttle.Tokens(400)})
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 1000, Held: 1000}, back["tokens/day"])
	})

	t.Run("ATicketReleasedWhileRemovedIsReconciledOnIt", func(t *testing.T) {
		t.Parallel()
		removed := without.Admit(st, noon.Add(time.Minute), small)
		released := without.Release(removed, noon.Add(2*time.Minute), throttle.SpendRelease{AdmittedAt: noon, Reserved: sp,
			Actual: throttle.Spend{Tokens: throttle.Tokens(100)}, Reported: true, Charged: charged})
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 100}, released["tokens/day"], "500 came back to it")
		d, _ := with.Check(released, noon.Add(3*time.Minute), throttle.Spend{Tokens: throttle.Tokens(900)})
		require.True(t, d.OK(), "added back: 100 counted")
		d, _ = with.Check(released, noon.Add(3*time.Minute), throttle.Spend{Tokens: throttle.Tokens(901)})
		require.Equal(t, throttle.ReasonAllowance, d.Reason)
	})

	t.Run("ReleaseSpendOfALimitWithNoAllowancesLeft", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", MaxConcurrent: 1}
		s := l.ReleaseSpend(throttle.State{Allowances: st}, noon.Add(time.Minute), throttle.SpendRelease{AdmittedAt: noon, Reserved: sp,
			Void: true, Charged: charged})
		require.Equal(t, throttle.AllowanceStates{"tokens/day": {Start: day}}, s.Allowances)
	})

	t.Run("DroppedOnceItsWindowPassed", func(t *testing.T) {
		t.Parallel()
		tomorrow := utc(t, "2026-05-06T00:00:00Z")
		got := without.Admit(st, tomorrow, small)
		require.NotContains(t, got, "tokens/day", "held or not, yesterday's window counts nothing today")
		require.Equal(t, throttle.AllowanceStates{"requests/hour": {Start: tomorrow, Used: 1, Held: 1}}, got)
		got = without.Release(st, tomorrow, throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Reported: true, Charged: charged})
		require.Equal(t, throttle.AllowanceStates{"tokens/day": {Start: tomorrow}}, got,
			"a release after the window: yesterday's refund is dropped, nothing is counted")
		require.Empty(t, without.Release(got, tomorrow, throttle.SpendRelease{}), "counting nothing: dropped by the next")
	})

	t.Run("DroppedOnceItCountsNothing", func(t *testing.T) {
		t.Parallel()
		voided := without.Release(st, noon, throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Void: true, Charged: charged})
		require.Equal(t, throttle.AllowanceStates{"tokens/day": {Start: day}}, voided, "reconciled in this call")
		require.Empty(t, without.Release(voided, noon, throttle.SpendRelease{}), "counting nothing: dropped by the next")
	})

	t.Run("DebtOfATicketThatReservedNothingIsCounted", func(t *testing.T) {
		t.Parallel()
		zero := with.Admit(nil, noon, throttle.Spend{}) // counted on tokens/day, reserving nothing
		require.Equal(t, throttle.AllowanceStates{"tokens/day": {Start: day}}, zero)
		got := without.Release(zero, noon.Add(time.Minute), throttle.SpendRelease{AdmittedAt: noon,
			Actual: throttle.Spend{Tokens: throttle.Tokens(500)}, Reported: true, Charged: charged})
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 500}, got["tokens/day"], "removed, but it counted the ticket: its debt is counted")
		d, _ := with.Check(got, noon.Add(2*time.Minute), throttle.Spend{Tokens: throttle.Tokens(501)})
		require.Equal(t, throttle.ReasonAllowance, d.Reason, "added back: 500 counted")
	})

	t.Run("RollingKeptWhileHeld", func(t *testing.T) {
		t.Parallel()
		h := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Hour))) }
		rolling := throttle.Allowances{mustParse(t, "output_tokens=1000/24h")}
		key := rolling[0].Key()
		out := throttle.Spend{Tokens: throttle.Cost{Output: 300}}
		rst := rolling.Admit(nil, h(1), out)
		got := without.Admit(rst, h(30), small)
		require.Equal(t, throttle.AllowanceState{Start: h(1), Used: 300, Held: 300}, got[key],
			"fallen out of the window but still in flight: kept as it was")
		got = without.Release(got, h(30), throttle.SpendRelease{AdmittedAt: h(1), Reserved: out, Void: true, Charged: rolling.Keys()})
		require.Equal(t, throttle.AllowanceState{Start: h(30)}, got[key], "released: its refund has nowhere to go")
		require.NotContains(t, without.Admit(got, h(30), small), key, "counting nothing, holding nothing: dropped")
	})
}

// TestLimit_AdmitCostSaturatesInflightTokens: the tokens in flight saturate at the largest int64
// instead of overflowing to a negative sum that would lift MaxInflightTokens.
func TestLimit_AdmitCostSaturatesInflightTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before int64
		cost   throttle.Cost
		want   int64
	}{
		{"Sums", 990, throttle.Cost{Input: 20, Output: 30}, 1040},
		{"SaturatesAtTheMax", math.MaxInt64 - 10, throttle.Cost{Input: 100}, math.MaxInt64},
		{"SaturatesOnAHugeCost", 1, throttle.Cost{Input: math.MaxInt64, Output: math.MaxInt64}, math.MaxInt64},
		{"StaysAtTheMax", math.MaxInt64, throttle.Cost{Input: 1}, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := throttle.Limit{Key: "k", MaxInflightTokens: 1000}.WithDefaults()
			s := l.AdmitCost(throttle.State{InflightTokens: tc.before}, t0, tc.cost)
			require.Equal(t, tc.want, s.InflightTokens)
			require.Equal(t, 1, s.InflightCount)
			require.Equal(t, throttle.ReasonInflightTokens, l.CheckCost(s, t0, throttle.Tokens(1)).Reason, "still over the cap")
		})
	}
}
