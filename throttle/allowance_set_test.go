package throttle_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func mustParse(t *testing.T, s string) throttle.Allowance {
	t.Helper()
	a, err := throttle.ParseAllowance(s)
	require.NoError(t, err)
	return a
}

func TestAllowance_Of(t *testing.T) {
	t.Parallel()
	sp := throttle.Spend{Tokens: throttle.Cost{Input: 700, Output: 300}, Money: 1234}
	for s, want := range map[string]int64{
		"requests=1/day": 1, "tokens=1/day": 1000, "input_tokens=1/day": 700, "output_tokens=1/day": 300, "usd=1/day": 1234,
	} {
		require.Equal(t, want, mustParse(t, s).Of(sp), s)
	}
	neg := throttle.Spend{Tokens: throttle.Cost{Input: -5, Output: 10}, Money: -1}
	require.Equal(t, int64(10), mustParse(t, "tokens=1/day").Of(neg), "a negative part counts as 0")
	require.Zero(t, mustParse(t, "usd=1/day").Of(neg))
	require.Equal(t, int64(1), mustParse(t, "requests=1/day").Of(throttle.Spend{}), "every ticket is a request")
}

func TestAllowances_Validate(t *testing.T) {
	t.Parallel()
	ok := throttle.Allowances{mustParse(t, "tokens=5000000/day@America/Los_Angeles"), mustParse(t, "tokens=200000/hour"),
		mustParse(t, "usd=5.00/day"), mustParse(t, "usd=100.00/month"), mustParse(t, "requests=1000/24h")}
	require.NoError(t, ok.Validate())
	require.NoError(t, throttle.Allowances(nil).Validate())
	for _, tc := range []struct {
		as   throttle.Allowances
		want string
	}{
		{throttle.Allowances{ok[0], {Meter: throttle.MeterTokens}},
			`throttle: allowance "tokens=0/0s": Amount must be in 1..1000000000000000000, got 0`},
		{throttle.Allowances{ok[0], ok[1], mustParse(t, "tokens=1/day@America/Los_Angeles")},
			`throttle: allowance 2: "tokens=1/day@America/Los_Angeles" has the meter and period of an earlier one (tokens/day@America/Los_Angeles): keep one`},
		{throttle.Allowances{ok[2], mustParse(t, "eur=1/month")},
			`throttle: allowance 1: "eur=1.00/month": Currency must be USD like the others, got EUR`},
	} {
		require.EqualError(t, tc.as.Validate(), tc.want)
	}
}

func TestAllowances(t *testing.T) {
	t.Parallel()
	as := throttle.Allowances{mustParse(t, "tokens=1000/day"), mustParse(t, "requests=2/hour"), mustParse(t, "usd=1.00/day")}
	noon := utc(t, "2026-05-05T12:00:00Z")
	sp := throttle.Spend{Tokens: throttle.Cost{Input: 300, Output: 100}, Money: 250_000}

	t.Run("AdmitsWhenEveryOneHasRoom", func(t *testing.T) {
		t.Parallel()
		d, i := as.Check(nil, noon, sp)
		require.True(t, d.OK())
		require.Equal(t, -1, i)
		st := as.Admit(nil, noon, sp)
		day, hour := utc(t, "2026-05-05T00:00:00Z"), utc(t, "2026-05-05T12:00:00Z")
		require.Equal(t, throttle.AllowanceStates{
			"tokens/day":    {Start: day, Used: 400, Held: 400},
			"requests/hour": {Start: hour, Used: 1, Held: 1},
			"usd/day":       {Start: day, Used: 250_000, Held: 250_000},
		}, st, "each holds what it counted until the ticket is released")
	})

	t.Run("TheTightestBinds", func(t *testing.T) {
		t.Parallel()
		st := as.Admit(as.Admit(nil, noon, sp), noon, sp) // 800 tokens, 2 requests, $0.50
		d, i := as.Check(st, noon, sp)
		require.Equal(t, throttle.Decision{Reason: throttle.ReasonAllowance, RetryAt: utc(t, "2026-05-06T00:00:00Z")}, d)
		require.Equal(t, 0, i, "tokens and requests refuse; the day's tokens lift last")
		d, i = as.Check(st, noon, throttle.Spend{Tokens: throttle.Cost{Input: 100}})
		require.Equal(t, throttle.Decision{Reason: throttle.ReasonAllowance, RetryAt: utc(t, "2026-05-05T13:00:00Z")}, d)
		require.Equal(t, 1, i, "only the requests refuse")
		d, i = as.Check(st, noon, throttle.Spend{Money: 2_000_000})
		require.Equal(t, throttle.Decision{Reason: throttle.ReasonAllowance}, d)
		require.Equal(t, 2, i, "more than the whole day's money: never, which binds above any instant")
	})

	t.Run("ReleasesInTheAdmissionsWindow", func(t *testing.T) {
		t.Parallel()
		st := as.Admit(nil, noon, sp)
		day := utc(t, "2026-05-05T00:00:00Z")
		used := throttle.Spend{Tokens: throttle.Cost{Input: 300, Output: 20}, Money: 210_000}
		charged := as.Keys()
		got := as.Release(st, noon.Add(time.Hour), throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Actual: used, Reported: true, Charged: charged})
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 320}, got["tokens/day"], "80 unused come back; nothing held")
		require.Equal(t, throttle.AllowanceState{Start: day, Used: 210_000}, got["usd/day"])
		require.Equal(t, throttle.AllowanceState{Start: noon.Add(time.Hour)}, got["requests/hour"], "a new hour; requests are never refunded")
		got = as.Release(st, noon, throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Actual: used, Charged: charged})
		require.Equal(t, throttle.AllowanceStates{
			"tokens/day": {Start: day, Used: 400}, "requests/hour": {Start: noon, Used: 1}, "usd/day": {Start: day, Used: 250_000},
		}, got, "not reported: the reservation stands, no longer held")
		got = as.Release(st, noon.Add(12*time.Hour), throttle.SpendRelease{AdmittedAt: noon, Reserved: sp, Reported: true, Charged: charged})
		require.Equal(t, throttle.AllowanceStates{"tokens/day": {Start: noon.Add(12 * time.Hour)},
			"requests/hour": {Start: noon.Add(12 * time.Hour)}, "usd/day": {Start: noon.Add(12 * time.Hour)}}, got,
			"the next day: yesterday's refund is dropped")
	})

	t.Run("KeepsTheStateOfAnAllowanceWhoseAmountChanged", func(t *testing.T) {
		t.Parallel()
		st := as.Admit(nil, noon, sp)
		st["retired/day"] = throttle.AllowanceState{Start: noon, Used: 9}
		before := len(st)
		changed := throttle.Allowances{mustParse(t, "tokens=500/day")}
		d, _ := changed.Check(st, noon, sp)
		require.Equal(t, throttle.ReasonAllowance, d.Reason, "400 of 500 used: 400 more do not fit")
		got := changed.Admit(st, noon, throttle.Spend{Tokens: throttle.Cost{Input: 50}})
		day := utc(t, "2026-05-05T00:00:00Z")
		require.Equal(t, throttle.AllowanceStates{
			"tokens/day":    {Start: day, Used: 450, Held: 450},
			"requests/hour": {Start: noon, Used: 1, Held: 1},
			"usd/day":       {Start: day, Used: 250_000, Held: 250_000},
		}, got, "the removed allowances still count something this window: kept; a key that names no allowance is not")
		require.Len(t, st, before, "the map given is not modified")
		require.Equal(t, int64(400), st["tokens/day"].Used)
	})
}

func TestDecision_Join(t *testing.T) {
	t.Parallel()
	ok := throttle.Decision{Reason: throttle.ReasonNone, RetryAt: t0}
	rate := throttle.Decision{Reason: throttle.ReasonRate, RetryAt: t0.Add(time.Second)}
	slots := throttle.Decision{Reason: throttle.ReasonConcurrency}
	day := throttle.Decision{Reason: throttle.ReasonAllowance, RetryAt: t0.Add(time.Hour)}
	never := throttle.Decision{Reason: throttle.ReasonAllowance}
	for _, tc := range []struct{ d, o, want throttle.Decision }{
		{ok, ok, ok},
		{rate, ok, rate},
		{ok, day, day},
		{rate, day, throttle.Decision{Reason: throttle.ReasonRate, RetryAt: t0.Add(time.Hour)}},
		{day, rate, day},
		{slots, day, slots},
		{rate, never, throttle.Decision{Reason: throttle.ReasonRate}},
	} {
		require.Equal(t, tc.want, tc.d.Join(tc.o), "%v join %v", tc.d, tc.o)
	}
}

// TestAllowances_LimitAndAllowancesTogether: a limit's decision joined with its allowances'
// (Decision.Join) is the limit's alone when the allowances have room, and when every window's
// admissions stay within each allowance, on a random stream that runs for days.
func TestAllowances_LimitAndAllowancesTogether(t *testing.T) {
	t.Parallel()
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 0.01, TokensPerMinute: 600}.WithDefaults()
	as := throttle.Allowances{mustParse(t, "tokens=20000/day@America/Los_Angeles"), mustParse(t, "output_tokens=2500/6h"),
		mustParse(t, "usd=0.03/day@America/Los_Angeles"), mustParse(t, "requests=20/hour")}
	require.NoError(t, as.Validate())
	r := rand.New(rand.NewPCG(28, 300))
	var (
		s    throttle.State
		st   throttle.AllowanceStates
		log  []heldSpend
		held []int
		// binds counts the refusals by the allowance that bound them.
		binds = make([]int, len(as))
	)
	now := utc(t, "2026-10-30T00:00:00Z") // over the end of daylight saving time in Los Angeles
	for step := range 6000 {
		now = now.Add(time.Duration(r.Int64N(int64(2 * time.Minute))))
		in, out := 1+r.Int64N(400), r.Int64N(300)
		if step >= 3000 {
			out = 0 // cheap calls: the tokens bind before the money
		}
		sp := throttle.Spend{Tokens: throttle.Cost{Input: in, Output: out}, Money: in*1 + out*4} // $1 and $4 a million
		dl := l.CheckCost(s, now, sp.Tokens)
		da, bind := as.Check(st, now, sp)
		if bind >= 0 {
			binds[bind]++
		}
		d := dl.Join(da)
		if da.OK() {
			require.Equal(t, dl, d)
		}
		if d.OK() && r.IntN(3) > 0 {
			s, st = l.AdmitCost(s, now, sp.Tokens), as.Admit(st, now, sp)
			log = append(log, heldSpend{at: now, sp: sp})
			held = append(held, len(log)-1)
		}
		if len(held) > 0 && r.IntN(3) == 0 {
			i := r.IntN(len(held))
			h := &log[held[i]]
			h.used = throttle.Spend{Tokens: throttle.Cost{Input: h.sp.Tokens.Input, Output: r.Int64N(h.sp.Tokens.Output + 1)}}
			h.used.Money = h.used.Tokens.Input + 4*h.used.Tokens.Output
			s = l.ReleaseMany(s, now, throttle.ReleasedCost(h.sp.Tokens, h.used.Tokens, true))
			st = as.Release(st, now, throttle.SpendRelease{AdmittedAt: h.at, Reserved: h.sp, Actual: h.used, Reported: true, Charged: as.Keys()})
			held = append(held[:i], held[i+1:]...)
		}
	}
	require.Greater(t, len(log), 300)
	t.Logf("admitted %d; refusals by allowance %v", len(log), binds)
	for i, n := range binds {
		require.Positive(t, n, "%s never bound", as[i])
	}
	for _, a := range as {
		perWindow := map[time.Time]int64{}
		for j, h := range log {
			if a.Calendar != "" {
				w, _ := a.Window(h.at)
				perWindow[w.UTC()] += h.charge(a)
				continue
			}
			var sum int64 // the rolling window ending at this admission
			for _, o := range log[:j+1] {
				if !o.at.Before(h.at.Add(-a.Rolling)) {
					sum += o.charge(a)
				}
			}
			perWindow[h.at] = sum
		}
		for w, c := range perWindow {
			require.LessOrEqual(t, c, a.Amount, "%s: the window of %v", a, w)
		}
	}
}

// heldSpend is a ticket admitted with sp at at, and what it used once released (zero before).
type heldSpend struct {
	at       time.Time
	sp, used throttle.Spend
}

// charge is what the ticket counts against a's bound: its usage once released (never above the
// reservation in this test), else its reservation.
func (h heldSpend) charge(a throttle.Allowance) int64 {
	if h.used == (throttle.Spend{}) {
		return a.Of(h.sp)
	}
	return min(a.Of(h.sp), a.Of(h.used))
}
