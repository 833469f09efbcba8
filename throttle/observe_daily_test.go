package throttle_test

import (
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// mustAllowances parses allowances in the operators' syntax.
func mustAllowances(t *testing.T, specs ...string) throttle.Allowances {
	t.Helper()
	as := make(throttle.Allowances, 0, len(specs))
	for _, s := range specs {
		a, err := throttle.ParseAllowance(s)
		require.NoError(t, err, s)
		as = append(as, a)
	}
	return as
}

// amounts are the Amounts of as, by Key.
func amounts(as throttle.Allowances) map[string]int64 {
	out := map[string]int64{}
	for _, a := range as {
		out[a.Key()] = a.Amount
	}
	return out
}

func TestObserve_DailyFigure(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 15, 30, 0, 0, time.UTC)
	// groq is 1 request a second, and three request allowances: a calendar day in a zone, a rolling
	// 24h and an hour; and a token allowance per day.
	groq := throttle.Limit{Key: "groq", RequestsPerSecond: 1, TokensPerMinute: 30_000,
		Allowances: mustAllowances(t, "requests=20000/day@America/Los_Angeles", "requests=900/24h", "requests=100/hour", "tokens=1000000/day")}
	require.NoError(t, groq.Validate())
	day, rolling, hour, tokens := groq.Allowances[0], groq.Allowances[1], groq.Allowances[2], groq.Allowances[3]

	// Groq's documented headers: 14,400 requests a day, 14,370 left; 18,000 tokens a minute.
	h := headersOf(
		"x-groq-region", "us-east-1",
		"x-ratelimit-limit-requests", "14400", "x-ratelimit-remaining-requests", "14370", "x-ratelimit-reset-requests", "2m59.56s",
		"x-ratelimit-limit-tokens", "18000", "x-ratelimit-remaining-tokens", "17997", "x-ratelimit-reset-tokens", "7.66s",
	)
	info := throttle.ParseRateLimitHeaders(h, now)
	configured := slices.Clone(groq.Allowances)
	eff, s := groq.Observe(throttle.State{}, now, info)

	require.Equal(t, 1.0, eff.RequestsPerSecond, "a daily figure never lowers the per-minute rate (14,400 a minute is 240/s anyway)")
	require.Equal(t, 18_000.0, eff.TokensPerMinute, "the tokens figure is per minute and is learned as one")
	require.Equal(t, map[string]int64{day.Key(): 14_400, rolling.Key(): 900, hour.Key(): 100, tokens.Key(): 1_000_000}, amounts(eff.Allowances),
		"the day's allowance is lowered to the provider's; the rolling day is already lower; an hour is not a day; tokens are per minute")
	require.NoError(t, eff.Validate())
	require.Equal(t, configured, groq.Allowances, "the configured allowances are not modified")
	require.Equal(t, int64(30), eff.Allowances[0].Used(s.Allowances[day.Key()], now), "the 30 requests the provider counted")
	require.Zero(t, rolling.Used(s.Allowances[rolling.Key()], now), "900 < 14,370 left: nothing to count")

	// Stored and read back, the learned amounts give the effective limit again.
	learned := throttle.LearnedLimit(groq, eff)
	require.Equal(t, throttle.Allowances{eff.Allowances[0]}, learned.Allowances)
	require.True(t, eff.Equal(throttle.EffectiveLimit(groq, learned)))
}

// openaiWith is an OpenAI limit of 10 requests a second and 90,000 tokens a minute with the
// allowances specs, in the operators' syntax.
func openaiWith(specs ...string) throttle.Limit {
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000}
	for _, spec := range specs {
		a, err := throttle.ParseAllowance(spec)
		if err != nil {
			panic(err)
		}
		l.Allowances = append(l.Allowances, a)
	}
	return l
}

// dailyCase is a limit, its state and a figure, and what Observe makes of them at dailyNow.
type dailyCase struct {
	name    string
	l       throttle.Limit
	s       throttle.State
	info    throttle.RateLimitInfo
	amounts map[string]int64 // the effective allowances' amounts, by key
	used    map[string]int64 // what each has counted at now after Observe
	rps     float64
}

// dailyNow is when dailyCases are observed.
var dailyNow = time.Date(2026, 3, 10, 15, 30, 0, 0, time.UTC)

// dailyCases are daily figures (and one per minute) applied to limits with allowances.
var dailyCases = []dailyCase{
	{
		"ADailyFigureLowersTheDaysAllowanceNotTheRate", openaiWith("requests=10000/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 200, RequestsRemaining: 150, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 200}, map[string]int64{"requests/day": 50}, 10,
	},
	{
		"TheSameFigurePerMinuteLowersTheRate", openaiWith("requests=10000/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 200, RequestsRemaining: 150, HasRequestsRemaining: true},
		map[string]int64{"requests/day": 10000}, map[string]int64{"requests/day": 0}, 200.0 / 60,
	},
	{
		"ARollingDayIsADay", openaiWith("requests=10000/24h"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 1000, RequestsRemaining: 0, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/24h": 1000}, map[string]int64{"requests/24h": 1000}, 10,
	},
	{
		"AHigherFigureNeverRaises", openaiWith("requests=500/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 10000, RequestsRemaining: 9800, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 500}, map[string]int64{"requests/day": 0}, 10,
	},
	{
		"RemainingBelowTheAllowanceCountsTheRest", openaiWith("requests=500/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 10000, RequestsRemaining: 120.7, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 500}, map[string]int64{"requests/day": 380}, 10,
	},
	{
		"WhatWasCountedIsNeverLowered", openaiWith("requests=500/day"),
		throttle.State{Allowances: throttle.AllowanceStates{"requests/day": {Start: time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC), Used: 450}}},
		throttle.RateLimitInfo{RequestsLimit: 500, RequestsRemaining: 300, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 500}, map[string]int64{"requests/day": 450}, 10,
	},
	{
		"YesterdaysCountStartsAfresh", openaiWith("requests=500/day"),
		throttle.State{Allowances: throttle.AllowanceStates{"requests/day": {Start: time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC), Used: 450}}},
		throttle.RateLimitInfo{RequestsLimit: 500, RequestsRemaining: 300, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 500}, map[string]int64{"requests/day": 200}, 10,
	},
	{
		"AFractionalLimitIsFloored", openaiWith("requests=500/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 99.9, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 99}, map[string]int64{"requests/day": 0}, 10,
	},
	{
		"OtherMetersAndPeriodsAreLeftAlone", openaiWith("tokens=1000000/day", "requests=5000/week", "requests=300/hour", "requests=900/12h"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 200, RequestsRemaining: 0, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"tokens/day": 1_000_000, "requests/week": 5000, "requests/hour": 300, "requests/12h": 900},
		map[string]int64{"tokens/day": 0, "requests/week": 0, "requests/hour": 0, "requests/12h": 0}, 10,
	},
	{
		"ADailyTokensFigureLowersTheTokensAllowance", openaiWith("tokens=1000000/day", "input_tokens=500000/day"),
		throttle.State{}, throttle.RateLimitInfo{TokensLimit: 200_000, TokensRemaining: 150_000, HasTokensRemaining: true, TokensWindow: 24 * time.Hour},
		map[string]int64{"tokens/day": 200_000, "input_tokens/day": 500_000}, map[string]int64{"tokens/day": 50_000, "input_tokens/day": 0}, 10,
	},
	{
		"ALongerWindowIsLearnedAsADay", openaiWith("requests=500/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 300, RequestsWindow: 7 * 24 * time.Hour},
		map[string]int64{"requests/day": 300}, map[string]int64{"requests/day": 0}, 10,
	},
	{
		"HostileDailyFiguresAreIgnored", openaiWith("requests=500/day"),
		throttle.State{}, throttle.RateLimitInfo{RequestsLimit: 0.5, RequestsRemaining: -3, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour},
		map[string]int64{"requests/day": 500}, map[string]int64{"requests/day": 0}, 10,
	},
}

func TestObserve_DailyFigureTable(t *testing.T) {
	t.Parallel()
	now := dailyNow
	for _, tc := range dailyCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tc.l.Validate())
			before := maps.Clone(tc.s.Allowances)
			eff, s := tc.l.Observe(tc.s, now, tc.info)
			require.NoError(t, eff.Validate())
			require.Equal(t, tc.amounts, amounts(eff.Allowances))
			used := map[string]int64{}
			for _, a := range eff.Allowances {
				used[a.Key()] = a.Used(s.Allowances[a.Key()], now)
			}
			require.Equal(t, tc.used, used)
			require.InDelta(t, tc.rps, eff.RequestsPerSecond, 1e-12)
			require.Equal(t, before, tc.s.Allowances, "the state given is not modified")
			require.True(t, eff.Equal(throttle.EffectiveLimit(tc.l, throttle.LearnedLimit(tc.l, eff))), "round trip")
		})
	}
}

func TestObserve_DailyFigureNeverAddsAnAllowance(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 15, 30, 0, 0, time.UTC)
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 10}
	info := throttle.RateLimitInfo{RequestsLimit: 200, RequestsRemaining: 0, HasRequestsRemaining: true, RequestsWindow: 24 * time.Hour}
	eff, s := l.Observe(throttle.State{}, now, info)
	require.Nil(t, eff.Allowances)
	require.Nil(t, s.Allowances)
	require.Equal(t, l.WithDefaults(), eff, "nothing learned: the rate is per minute, the figure per day")
	require.Equal(t, 0.0, s.Requests.Level, "but nothing is admitted past what the provider says remains")
	require.Equal(t, throttle.Limit{}, throttle.LearnedLimit(l, eff))
}

// TestObserve_OpenAIPerDayFromHeaders follows an RPD-limited OpenAI model from its headers to
// admission: the day's allowance learns the provider's 200 a day and has room for what remains.
func TestObserve_OpenAIPerDayFromHeaders(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 15, 30, 0, 0, time.UTC)
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 5, Allowances: mustAllowances(t, "requests=1000/day")}
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "200")
	h.Set("x-ratelimit-remaining-requests", "2")
	h.Set("x-ratelimit-reset-requests", "23h45m36s") // 198 spent at 432s each
	info := throttle.ParseRateLimitHeaders(h, now)
	require.Equal(t, 24*time.Hour, info.RequestsWindow)

	eff, s := l.Observe(throttle.State{}, now, info)
	require.Equal(t, 5.0, eff.RequestsPerSecond, "before, 200 was taken as per minute: 3.33/s")
	require.Equal(t, int64(200), eff.Allowances[0].Amount)
	for range 2 {
		require.True(t, eff.CheckSpend(s, now, throttle.Spend{}).OK())
		s = eff.AdmitSpend(s, now, throttle.Spend{})
	}
	d := eff.CheckSpend(s, now, throttle.Spend{})
	require.Equal(t, throttle.ReasonAllowance, d.Reason, "the third request waits for the day's end")
	require.Equal(t, time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC), d.RetryAt)
}
