package throttle_test

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// dailyPool are allowance specs with distinct keys, daily and not, of every meter.
var dailyPool = []string{
	"requests=%d/day", "requests=%d/day@America/Los_Angeles", "requests=%d/24h", "requests=%d/hour", "requests=%d/12h",
	"requests=%d/week", "tokens=%d/day@Asia/Kolkata", "tokens=%d/24h", "tokens=%d/month", "input_tokens=%d/day",
	"output_tokens=%d/24h", "usd=%d/day",
}

// randomDailyLimit is a valid limit with a random subset of dailyPool's allowances.
func randomDailyLimit(t *testing.T, r *rand.Rand) throttle.Limit {
	l := throttle.Limit{Key: "prop"}
	if r.IntN(3) > 0 {
		l.RequestsPerSecond = 0.01 + r.Float64()*100
	}
	if r.IntN(3) > 0 {
		l.TokensPerMinute = 1 + r.Float64()*1e6
	}
	for _, i := range r.Perm(len(dailyPool))[:r.IntN(len(dailyPool)+1)] {
		a, err := throttle.ParseAllowance(fmt.Sprintf(dailyPool[i], 1+r.Int64N(int64(math.Pow10(1+r.IntN(7))))))
		require.NoError(t, err)
		l.Allowances = append(l.Allowances, a)
	}
	if l.Validate() != nil {
		l.MaxConcurrent = 4 // a limit of allowances alone, or of nothing
	}
	require.NoError(t, l.Validate())
	return l
}

// randomFigure is a provider figure: usually plausible, sometimes hostile.
func randomFigure(r *rand.Rand) float64 {
	switch r.IntN(12) {
	case 0:
		return math.NaN()
	case 1:
		return math.Inf(1)
	case 2:
		return -1
	case 3:
		return r.Float64()
	}
	return math.Floor(r.Float64() * math.Pow10(r.IntN(8)))
}

// randomWindow is a window a hand-built RateLimitInfo may carry.
func randomWindow(r *rand.Rand) time.Duration {
	return []time.Duration{0, 0, time.Minute, 12 * time.Hour, 24 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}[r.IntN(7)]
}

// TestObserve_DailyFigureProperties checks Observe's promises about daily figures on random limits,
// states and figures: rates untouched by a daily figure, allowances only lowered and only the daily
// ones of the figure's meter, nothing admitted past what remains, nothing given modified, and the
// learned limit giving the effective one back.
func TestObserve_DailyFigureProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	t0 := time.Date(2026, 3, 7, 22, 0, 0, 0, time.UTC)
	lowered, counted := 0, 0 // how often an Amount was lowered and a count raised: the test is not vacuous
	for iter := range 3000 {
		cfg := randomDailyLimit(t, r)
		// A state the limit produced: spends admitted over a few days.
		var s throttle.State
		now := t0
		for range r.IntN(20) {
			now = now.Add(time.Duration(r.Int64N(int64(8 * time.Hour))))
			sp := throttle.Spend{Tokens: throttle.Cost{Input: r.Int64N(5000), Output: r.Int64N(2000)}, Money: r.Int64N(100_000)}
			s = cfg.AdmitSpend(s, now, sp)
		}
		info := throttle.RateLimitInfo{
			RequestsLimit: randomFigure(r), RequestsRemaining: randomFigure(r), HasRequestsRemaining: r.IntN(4) > 0, RequestsWindow: randomWindow(r),
			TokensLimit: randomFigure(r), TokensRemaining: randomFigure(r), HasTokensRemaining: r.IntN(4) > 0, TokensWindow: randomWindow(r),
		}
		cfgAllowances := slices.Clone(cfg.Allowances)
		stBefore := maps.Clone(s.Allowances)
		eff, got := cfg.Observe(s, now, info)
		msg := fmt.Sprintf("iteration %d: configured %+v, info %+v", iter, cfg, info)

		require.NoError(t, eff.Validate(), msg)
		require.Equal(t, cfgAllowances, cfg.Allowances, msg)
		require.Equal(t, stBefore, s.Allowances, msg)
		require.True(t, eff.Equal(throttle.EffectiveLimit(cfg, throttle.LearnedLimit(cfg, eff))), msg)
		if info.RequestsWindow >= 24*time.Hour {
			require.Equal(t, cfg.WithDefaults().RequestsPerSecond, eff.RequestsPerSecond, msg)
		}
		if info.TokensWindow >= 24*time.Hour {
			require.Equal(t, cfg.WithDefaults().TokensPerMinute, eff.TokensPerMinute, msg)
		}

		require.Len(t, eff.Allowances, len(cfg.Allowances), msg)
		for i, a := range eff.Allowances {
			c := cfg.Allowances[i]
			limit, remaining, has, daily := dailyFigure(info, c)
			want := c
			want.Amount = a.Amount
			require.Equal(t, want, a, "%s: only the Amount may change", msg)
			require.LessOrEqual(t, a.Amount, c.Amount, msg)
			if a.Amount < c.Amount {
				lowered++
				require.True(t, daily, "%s: %s lowered by no daily figure of its meter", msg, c)
				require.Equal(t, int64(limit), a.Amount, msg)
			}
			before, after := c.Used(s.Allowances[c.Key()], now), a.Used(got.Allowances[a.Key()], now)
			require.GreaterOrEqual(t, after, before, "%s: %s counts less", msg, c)
			if after > before {
				counted++
			}
			if !daily {
				require.Equal(t, before, after, "%s: %s counts more with no daily figure", msg, c)
				continue
			}
			if has && remaining >= 0 && !math.IsInf(remaining, 1) && remaining < float64(a.Amount) {
				require.LessOrEqual(t, float64(a.Amount-after), remaining, "%s: %s has room past what remains", msg, a)
			}
		}
	}
	require.Greater(t, lowered, 100)
	require.Greater(t, counted, 100)
}

// dailyFigure is the figure of info that applies to allowance a: its meter's figure, and whether it
// is daily and a counts in a day.
func dailyFigure(info throttle.RateLimitInfo, a throttle.Allowance) (limit, remaining float64, has, daily bool) {
	isDay := a.Calendar == throttle.CalendarDay || (a.Calendar == "" && a.Rolling == 24*time.Hour)
	switch a.Meter {
	case throttle.MeterRequests:
		return info.RequestsLimit, info.RequestsRemaining, info.HasRequestsRemaining, isDay && info.RequestsWindow >= 24*time.Hour
	case throttle.MeterTokens:
		return info.TokensLimit, info.TokensRemaining, info.HasTokensRemaining, isDay && info.TokensWindow >= 24*time.Hour
	}
	return 0, 0, false, false
}

// TestParseRateLimitHeaders_WindowIsADayOrZero checks, on random OpenAI-shaped headers, that a window
// is a day or zero, and a day only for figures whose reset lies over 2 minutes ahead.
func TestParseRateLimitHeaders_WindowIsADayOrZero(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 2000 {
		limit := 1 + r.Int64N(100_000)
		remaining := r.Int64N(limit + 1)
		reset := time.Duration(r.Int64N(int64(30 * time.Hour)))
		h := headersOf("x-ratelimit-limit-requests", fmt.Sprint(limit), "x-ratelimit-remaining-requests", fmt.Sprint(remaining),
			"x-ratelimit-reset-requests", reset.String())
		info := throttle.ParseRateLimitHeaders(h, t0)
		require.Contains(t, []time.Duration{0, 24 * time.Hour}, info.RequestsWindow)
		if info.RequestsWindow != 0 {
			require.Greater(t, reset, 2*time.Minute, "%v", h)
			implied := float64(min(reset, 24*time.Hour)) // a later reset is clamped to a day
			if remaining < limit {
				implied *= float64(limit) / float64(limit-remaining)
			}
			require.GreaterOrEqual(t, implied, float64(12*time.Hour), "%v", h)
			require.LessOrEqual(t, implied, float64(48*time.Hour), "%v", h)
		}
		// A continuously refilling per-minute figure never reads as a day.
		perMinute := time.Duration(float64(limit-remaining) / float64(limit) * float64(time.Minute))
		h.Set("x-ratelimit-reset-requests", perMinute.String())
		require.Zero(t, throttle.ParseRateLimitHeaders(h, t0).RequestsWindow, "%v", h)
		// A continuously refilling daily figure reads as a day once its reset lies 2 minutes ahead.
		perDay := time.Duration(float64(limit-remaining) / float64(limit) * float64(24*time.Hour))
		h.Set("x-ratelimit-reset-requests", perDay.String())
		if want := time.Duration(0); perDay > 2*time.Minute {
			require.Equal(t, 24*time.Hour, throttle.ParseRateLimitHeaders(h, t0).RequestsWindow, "%v", h)
		} else {
			require.Equal(t, want, throttle.ParseRateLimitHeaders(h, t0).RequestsWindow, "%v", h)
		}
	}
}
