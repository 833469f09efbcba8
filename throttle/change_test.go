package throttle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func ptr[T any](v T) *T { return &v }

func TestLimitChange_Apply(t *testing.T) {
	t.Parallel()

	cur := throttle.Limit{Key: "k", MaxConcurrent: 2, RequestsPerSecond: 10, Burst: 3, TokensPerMinute: 60_000, TokenBurst: 5000,
		MaxInflightTokens: 9000, InputTokensPerMinute: 40_000, InputTokenBurst: 4000, OutputTokensPerMinute: 8000, OutputTokenBurst: 800}
	with := func(f func(l *throttle.Limit)) throttle.Limit {
		l := cur
		f(&l)
		return l
	}
	for _, tc := range []struct {
		name   string
		change throttle.LimitChange
		want   throttle.Limit
	}{
		{"ZeroChangesNothing", throttle.LimitChange{}, cur},
		{"SetsTheCaps", throttle.LimitChange{MaxConcurrent: ptr(4), MaxInflightTokens: ptr(int64(100))},
			with(func(l *throttle.Limit) { l.MaxConcurrent, l.MaxInflightTokens = 4, 100 })},
		{"SetsACapToZero", throttle.LimitChange{MaxConcurrent: ptr(0)}, with(func(l *throttle.Limit) { l.MaxConcurrent = 0 })},
		{"ChangedRateGetsItsDefaultBurst", throttle.LimitChange{RequestsPerSecond: ptr(20.0)},
			with(func(l *throttle.Limit) { l.RequestsPerSecond, l.Burst = 20, 0 })},
		{"RateGivenUnchangedKeepsItsBurst", throttle.LimitChange{RequestsPerSecond: ptr(10.0)}, cur},
		{"RateAndBurstGivenTogether", throttle.LimitChange{RequestsPerSecond: ptr(20.0), Burst: ptr(7.0)},
			with(func(l *throttle.Limit) { l.RequestsPerSecond, l.Burst = 20, 7 })},
		{"BurstAlone", throttle.LimitChange{Burst: ptr(5.0)}, with(func(l *throttle.Limit) { l.Burst = 5 })},
		{"RateRemovedTakesItsBurst", throttle.LimitChange{RequestsPerSecond: ptr(0.0)},
			with(func(l *throttle.Limit) { l.RequestsPerSecond, l.Burst = 0, 0 })},
		{"TokenBudgetLeavesTheRequestBurst", throttle.LimitChange{TokensPerMinute: ptr(90_000.0)},
			with(func(l *throttle.Limit) { l.TokensPerMinute, l.TokenBurst = 90_000, 0 })},
		{"TokenBurstAlone", throttle.LimitChange{TokenBurst: ptr(100.0)}, with(func(l *throttle.Limit) { l.TokenBurst = 100 })},
		{"InputBudget", throttle.LimitChange{InputTokensPerMinute: ptr(1000.0)},
			with(func(l *throttle.Limit) { l.InputTokensPerMinute, l.InputTokenBurst = 1000, 0 })},
		{"InputBudgetUnchangedWithBurst", throttle.LimitChange{InputTokensPerMinute: ptr(40_000.0), InputTokenBurst: ptr(10.0)},
			with(func(l *throttle.Limit) { l.InputTokenBurst = 10 })},
		{"OutputBudget", throttle.LimitChange{OutputTokensPerMinute: ptr(500.0), OutputTokenBurst: ptr(50.0)},
			with(func(l *throttle.Limit) { l.OutputTokensPerMinute, l.OutputTokenBurst = 500, 50 })},
		{"OutputBurstAlone", throttle.LimitChange{OutputTokenBurst: ptr(1.0)}, with(func(l *throttle.Limit) { l.OutputTokenBurst = 1 })},
		{"EveryRateAtOnce", throttle.LimitChange{RequestsPerSecond: ptr(1.0), TokensPerMinute: ptr(2.0),
			InputTokensPerMinute: ptr(3.0), OutputTokensPerMinute: ptr(4.0)},
			with(func(l *throttle.Limit) {
				l.RequestsPerSecond, l.TokensPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute = 1, 2, 3, 4
				l.Burst, l.TokenBurst, l.InputTokenBurst, l.OutputTokenBurst = 0, 0, 0, 0
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.change.Apply(cur)
			require.Equal(t, tc.want, got)
			require.NoError(t, got.WithDefaults().Validate(), "the change applied to a valid limit validates")
		})
	}

	t.Run("ChangedRateBurstDefaultsToTheNewRate", func(t *testing.T) {
		t.Parallel()
		got := throttle.LimitChange{RequestsPerSecond: ptr(20.0), TokensPerMinute: ptr(1200.0)}.Apply(cur).WithDefaults()
		require.Equal(t, 20.0, got.Burst)
		require.Equal(t, 1200.0, got.TokenBurst)
	})

	t.Run("FromTheZeroLimit", func(t *testing.T) {
		t.Parallel()
		got := throttle.LimitChange{MaxConcurrent: ptr(1), Burst: ptr(2.0)}.Apply(throttle.Limit{Key: "new"})
		require.Equal(t, throttle.Limit{Key: "new", MaxConcurrent: 1, Burst: 2}, got)
		require.ErrorContains(t, got.Validate(), "Burst must be 0 when RequestsPerSecond is not set, got 2",
			"Apply does not validate: a burst without its rate is the caller's to refuse")
	})
}

// TestLimitChange_ApplyKeepsOnSpent: allowances given without their OnSpent keep what the limit's
// did, unless OnSpent is given: one of the same meter and period keeps its own; a new one refuses
// when every allowance the limit had refuses, and otherwise waits.
func TestLimitChange_ApplyKeepsOnSpent(t *testing.T) {
	t.Parallel()
	refuse, wait := throttle.OnSpentRefuse, throttle.OnSpentWait
	spec := func(s string, o throttle.OnSpent) throttle.Allowance {
		a, err := throttle.ParseAllowance(s)
		require.NoError(t, err)
		a.OnSpent = o
		return a
	}
	limit := func(as ...throttle.Allowance) throttle.Limit {
		return throttle.Limit{Key: "plan", Allowances: as}
	}
	allRefuse := limit(spec("tokens=100/day", refuse), spec("usd=1.00/day", refuse))
	mixed := limit(spec("tokens=100/day", refuse), spec("usd=1.00/day", ""))
	for _, tc := range []struct {
		name   string
		cur    throttle.Limit
		change throttle.LimitChange
		want   throttle.Limit
	}{
		{"ResizedKeepsItsOwn", mixed, throttle.LimitChange{Allowances: &throttle.Allowances{spec("tokens=200/day", ""), spec("usd=2.00/day", "")}},
			limit(spec("tokens=200/day", refuse), spec("usd=2.00/day", ""))},
		{"NewOnAKeyThatRefusesRefuses", allRefuse, throttle.LimitChange{Allowances: &throttle.Allowances{spec("requests=5/hour", "")}},
			limit(spec("requests=5/hour", refuse))},
		{"NewOnAMixedKeyWaits", mixed, throttle.LimitChange{Allowances: &throttle.Allowances{spec("tokens=100/day", ""), spec("requests=5/hour", "")}},
			limit(spec("tokens=100/day", refuse), spec("requests=5/hour", ""))},
		{"NewOnAKeyWithoutAllowancesWaits", limit(), throttle.LimitChange{Allowances: &throttle.Allowances{spec("requests=5/hour", "")}},
			limit(spec("requests=5/hour", ""))},
		{"AnotherPeriodIsNew", limit(spec("tokens=100/day", wait)), throttle.LimitChange{Allowances: &throttle.Allowances{spec("tokens=100/week", "")}},
			limit(spec("tokens=100/week", ""))},
		{"ItsOwnOnSpentIsKept", allRefuse, throttle.LimitChange{Allowances: &throttle.Allowances{spec("tokens=100/day", wait), spec("requests=5/hour", wait)}},
			limit(spec("tokens=100/day", wait), spec("requests=5/hour", wait))},
		{"OnSpentGivenSetsThemAll", allRefuse, throttle.LimitChange{Allowances: &throttle.Allowances{spec("tokens=100/day", ""), spec("requests=5/hour", "")},
			OnSpent: &wait}, limit(spec("tokens=100/day", wait), spec("requests=5/hour", wait))},
		{"OnSpentAloneSetsThemAll", mixed, throttle.LimitChange{OnSpent: &refuse}, allRefuse},
		{"NoneRemovesThem", allRefuse, throttle.LimitChange{Allowances: &throttle.Allowances{}}, limit()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cur := tc.cur
			cur.Allowances = append(throttle.Allowances(nil), cur.Allowances...)
			got := tc.change.Apply(cur)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.cur, cur, "Apply leaves the limit it is given as it was")
		})
	}
}

func TestLimitChange_Empty(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		change throttle.LimitChange
		want   bool
	}{
		{"Zero", throttle.LimitChange{}, true},
		{"ZeroValuedPointer", throttle.LimitChange{MaxConcurrent: ptr(0)}, false},
		{"OneBurst", throttle.LimitChange{OutputTokenBurst: ptr(3.0)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.change.Empty())
		})
	}
}
