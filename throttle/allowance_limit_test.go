package throttle_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func withAllowances(t *testing.T, l throttle.Limit, specs ...string) throttle.Limit {
	t.Helper()
	for _, s := range specs {
		l.Allowances = append(l.Allowances, mustParse(t, s))
	}
	require.NoError(t, l.Validate())
	return l
}

func TestLimit_CheckSpend(t *testing.T) {
	t.Parallel()
	noon := utc(t, "2026-03-07T12:00:00Z")
	midnight := utc(t, "2026-03-08T00:00:00Z")
	l := withAllowances(t, throttle.Limit{Key: "k", RequestsPerSecond: 1, Burst: 1}, "tokens=1000/day")
	sp := throttle.Spend{Tokens: throttle.Cost{Input: 600}}

	s := l.AdmitSpend(throttle.State{}, noon, sp)
	require.Equal(t, int64(600), l.Allowances[0].Used(s.Allowances["tokens/day"], noon))
	// The request bucket refills in a second, the day's tokens at midnight: the allowance binds.
	d := l.CheckSpend(s, noon, sp)
	require.Equal(t, throttle.Decision{Reason: throttle.ReasonAllowance, RetryAt: midnight}, d)
	// A second later, only the allowance refuses.
	require.Equal(t, d, l.CheckSpend(s, noon.Add(time.Second), sp))
	// A small ticket fits in both once the request bucket refills.
	require.True(t, l.CheckSpend(s, noon.Add(time.Second), throttle.Spend{Tokens: throttle.Tokens(400)}).OK())
	// The rate binds when the allowance has room.
	require.Equal(t, throttle.ReasonRate, l.CheckSpend(s, noon, throttle.Spend{Tokens: throttle.Tokens(1)}).Reason)
	// After midnight the window is new.
	require.True(t, l.CheckSpend(s, midnight, sp).OK())

	// A ticket larger than the whole allowance is refused for good, even over a full concurrency cap.
	capped := withAllowances(t, throttle.Limit{Key: "k", MaxConcurrent: 1}, "tokens=1000/day")
	full := capped.AdmitSpend(throttle.State{}, noon, throttle.Spend{})
	require.Equal(t, throttle.Decision{Reason: throttle.ReasonAllowance},
		capped.CheckSpend(full, noon, throttle.Spend{Tokens: throttle.Tokens(1001)}))
	require.Equal(t, throttle.Decision{Reason: throttle.ReasonConcurrency},
		capped.CheckSpend(full, noon, throttle.Spend{Tokens: throttle.Tokens(10)}))
}

// A limit without allowances decides as it did before allowances existed: CheckSpend is CheckCost.
func TestLimit_CheckSpendWithoutAllowancesIsCheckCost(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 28))
	for range 5000 {
		l := throttle.Limit{Key: "k", MaxConcurrent: r.IntN(3), RequestsPerSecond: float64(r.IntN(3)),
			TokensPerMinute: float64(r.IntN(3) * 600), OutputTokensPerMinute: float64(r.IntN(2) * 300)}.WithDefaults()
		s, now := throttle.State{}, t0
		for range 5 {
			c := throttle.Cost{Input: r.Int64N(400), Output: r.Int64N(200)}
			sp := throttle.Spend{Tokens: c, Money: r.Int64N(1000)}
			require.Equal(t, l.CheckCost(s, now, c), l.CheckSpend(s, now, sp))
			require.Equal(t, l.AdmitCost(s, now, c), l.AdmitSpend(s, now, sp))
			s, now = l.AdmitCost(s, now, c), now.Add(time.Duration(r.IntN(3000))*time.Millisecond)
		}
	}
}

func TestLimit_EqualAndValidateAllowances(t *testing.T) {
	t.Parallel()
	a := withAllowances(t, throttle.Limit{Key: "k", MaxConcurrent: 1}, "tokens=10/day", "usd=1.00/month")
	b := withAllowances(t, throttle.Limit{Key: "k", MaxConcurrent: 1}, "tokens=10/day", "usd=1.00/month")
	require.True(t, a.Equal(b))
	b.Allowances[1].OnSpent = throttle.OnSpentRefuse
	require.False(t, a.Equal(b))
	require.True(t, throttle.Limit{Key: "k"}.Equal(throttle.Limit{Key: "k", Allowances: throttle.Allowances{}}))

	only := withAllowances(t, throttle.Limit{Key: "k"}, "requests=10/hour")
	require.NoError(t, only.Validate(), "a limit may be allowances alone")
	bad := throttle.Limit{Key: "k", Allowances: throttle.Allowances{{Meter: "coins", Amount: 1, Calendar: throttle.CalendarDay}}}
	require.EqualError(t, bad.Validate(), `throttle: limit "k": throttle: allowance "coins=1/day": Meter must be one of requests, tokens, input_tokens, output_tokens, money, got "coins"`)
}
