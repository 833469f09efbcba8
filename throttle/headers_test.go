package throttle_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// headersOf builds an http.Header from name, value pairs, set the way a client would (Set
// canonicalizes the name).
func headersOf(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// requireInfo compares two RateLimitInfos, instants by Equal, naming the field that differs.
func requireInfo(t *testing.T, want, got throttle.RateLimitInfo) {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(name string, w, g time.Time) {
		t.Helper()
		if w.IsZero() {
			require.True(t, g.IsZero(), "%s: want zero, got %v", name, g)
			return
		}
		require.True(t, w.Equal(g), "%s: want t0%+v, got %v (t0%+v)", name, w.Sub(t0), g, g.Sub(t0))
	}
	require.Equal(t, want.RequestsLimit, got.RequestsLimit, "RequestsLimit")
	require.Equal(t, want.RequestsRemaining, got.RequestsRemaining, "RequestsRemaining")
	require.Equal(t, want.HasRequestsRemaining, got.HasRequestsRemaining, "HasRequestsRemaining")
	at("RequestsReset", want.RequestsReset, got.RequestsReset)
	require.Equal(t, want.TokensLimit, got.TokensLimit, "TokensLimit")
	require.Equal(t, want.TokensRemaining, got.TokensRemaining, "TokensRemaining")
	require.Equal(t, want.HasTokensRemaining, got.HasTokensRemaining, "HasTokensRemaining")
	at("TokensReset", want.TokensReset, got.TokensReset)
	at("RetryAfter", want.RetryAfter, got.RetryAfter)
	require.Equal(t, want.RequestsWindow, got.RequestsWindow, "RequestsWindow")
	require.Equal(t, want.TokensWindow, got.TokensWindow, "TokensWindow")
}

func TestParseRateLimitHeaders_OpenAI(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name string
		h    http.Header
		want throttle.RateLimitInfo
	}{
		{
			"FullSet",
			headersOf(
				"x-ratelimit-limit-requests", "10000", "x-ratelimit-remaining-requests", "9999", "x-ratelimit-reset-requests", "6ms",
				"x-ratelimit-limit-tokens", "90000", "x-ratelimit-remaining-tokens", "89000", "x-ratelimit-reset-tokens", "6m0s",
			),
			throttle.RateLimitInfo{
				RequestsLimit: 10000, RequestsRemaining: 9999, HasRequestsRemaining: true, RequestsReset: t0.Add(6 * time.Millisecond),
				TokensLimit: 90000, TokensRemaining: 89000, HasTokensRemaining: true, TokensReset: t0.Add(6 * time.Minute),
			},
		},
		{
			"NamesAreCaseInsensitive",
			headersOf("X-RATELIMIT-LIMIT-TOKENS", "150000", "X-RateLimit-Remaining-Tokens", "149984", "x-ratelimit-reset-TOKENS", "1s"),
			throttle.RateLimitInfo{TokensLimit: 150000, TokensRemaining: 149984, HasTokensRemaining: true, TokensReset: t0.Add(time.Second)},
		},
		{
			"PerDayRequests", // spent: the reset lies hours ahead
			headersOf("x-ratelimit-limit-requests", "200", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "17h12m0.96s"),
			throttle.RateLimitInfo{
				RequestsLimit: 200, HasRequestsRemaining: true, RequestsReset: t0.Add(17*time.Hour + 12*time.Minute + 960*time.Millisecond),
				RequestsWindow: 24 * time.Hour,
			},
		},
		{
			"CompoundDuration",
			headersOf("x-ratelimit-reset-tokens", "1h2m3.5s"),
			throttle.RateLimitInfo{TokensReset: t0.Add(time.Hour + 2*time.Minute + 3500*time.Millisecond)},
		},
		{
			"Milliseconds",
			headersOf("x-ratelimit-reset-tokens", "20ms"),
			throttle.RateLimitInfo{TokensReset: t0.Add(20 * time.Millisecond)},
		},
		{
			"MicrosecondsBothSpellings",
			headersOf("x-ratelimit-reset-tokens", "1µs500us", "x-ratelimit-reset-requests", "3μs"),
			throttle.RateLimitInfo{TokensReset: t0.Add(501 * time.Microsecond), RequestsReset: t0.Add(3 * time.Microsecond)},
		},
		{
			"FractionalUnits",
			headersOf("x-ratelimit-reset-tokens", "1.5m.5s", "x-ratelimit-reset-requests", "7.66s"),
			throttle.RateLimitInfo{TokensReset: t0.Add(90500 * time.Millisecond), RequestsReset: t0.Add(7660 * time.Millisecond)},
		},
		{
			"BareNumberIsSeconds",
			headersOf("x-ratelimit-reset-tokens", "30", "x-ratelimit-reset-requests", "1.25"),
			throttle.RateLimitInfo{TokensReset: t0.Add(30 * time.Second), RequestsReset: t0.Add(1250 * time.Millisecond)},
		},
		{
			"ZeroResetIsNow",
			headersOf("x-ratelimit-reset-tokens", "0s", "x-ratelimit-reset-requests", "0"),
			throttle.RateLimitInfo{TokensReset: t0, RequestsReset: t0},
		},
		{
			"SpacesAroundValues",
			headersOf("x-ratelimit-limit-tokens", " 90000 ", "x-ratelimit-remaining-tokens", "\t100", "x-ratelimit-reset-tokens", " 2s "),
			throttle.RateLimitInfo{TokensLimit: 90000, TokensRemaining: 100, HasTokensRemaining: true, TokensReset: t0.Add(2 * time.Second)},
		},
		{
			"WithRetryAfter",
			headersOf("x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "retry-after-ms", "1500", "Retry-After", "2"),
			throttle.RateLimitInfo{RequestsLimit: 60, HasRequestsRemaining: true, RetryAfter: t0.Add(1500 * time.Millisecond)},
		},
		{
			"OpenAIWinsOverAnthropic",
			headersOf("x-ratelimit-limit-tokens", "1000", "anthropic-ratelimit-tokens-limit", "5000", "anthropic-ratelimit-tokens-remaining", "10"),
			throttle.RateLimitInfo{TokensLimit: 1000},
		},
		{"NoHeaders", http.Header{}, throttle.RateLimitInfo{}},
		{"NilHeader", nil, throttle.RateLimitInfo{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireInfo(t, tc.want, throttle.ParseRateLimitHeaders(tc.h, t0))
		})
	}
}

func TestParseRateLimitHeaders_Anthropic(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name string
		h    http.Header
		want throttle.RateLimitInfo
	}{
		{
			"FullSet",
			headersOf(
				"anthropic-ratelimit-requests-limit", "4000", "anthropic-ratelimit-requests-remaining", "3999", "anthropic-ratelimit-requests-reset", "2026-01-01T00:00:01Z",
				"anthropic-ratelimit-tokens-limit", "400000", "anthropic-ratelimit-tokens-remaining", "398000", "anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:18Z",
				"anthropic-ratelimit-input-tokens-limit", "300000", "anthropic-ratelimit-input-tokens-remaining", "299000", "anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:12Z",
				"anthropic-ratelimit-output-tokens-limit", "100000", "anthropic-ratelimit-output-tokens-remaining", "99000", "anthropic-ratelimit-output-tokens-reset", "2026-01-01T00:00:36Z",
			),
			throttle.RateLimitInfo{
				RequestsLimit: 4000, RequestsRemaining: 3999, HasRequestsRemaining: true, RequestsReset: t0.Add(time.Second),
				TokensLimit: 400000, TokensRemaining: 398000, HasTokensRemaining: true, TokensReset: t0.Add(18 * time.Second),
			},
		},
		{
			"InputTokensStandInWhenPlainTokensAreAbsent",
			headersOf(
				"anthropic-ratelimit-input-tokens-limit", "300000", "anthropic-ratelimit-input-tokens-remaining", "299000", "anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:12Z",
				"anthropic-ratelimit-output-tokens-limit", "100000", "anthropic-ratelimit-output-tokens-remaining", "5", "anthropic-ratelimit-output-tokens-reset", "2026-01-01T00:00:36Z",
			),
			throttle.RateLimitInfo{TokensLimit: 300000, TokensRemaining: 299000, HasTokensRemaining: true, TokensReset: t0.Add(12 * time.Second)},
		},
		{
			"InputTokensStandInWhenPlainTokensAreUnusable",
			headersOf(
				"anthropic-ratelimit-tokens-limit", "NaN", "anthropic-ratelimit-tokens-remaining", "-1", "anthropic-ratelimit-tokens-reset", "soon",
				"anthropic-ratelimit-input-tokens-limit", "300000", "anthropic-ratelimit-input-tokens-remaining", "10",
			),
			throttle.RateLimitInfo{TokensLimit: 300000, TokensRemaining: 10, HasTokensRemaining: true},
		},
		{
			"FamiliesDoNotMix",
			headersOf("anthropic-ratelimit-tokens-remaining", "7", "anthropic-ratelimit-input-tokens-limit", "300000", "anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:12Z"),
			throttle.RateLimitInfo{TokensRemaining: 7, HasTokensRemaining: true},
		},
		{
			"OutputTokensAloneAreNotUsed",
			headersOf("anthropic-ratelimit-output-tokens-limit", "100000", "anthropic-ratelimit-output-tokens-remaining", "0"),
			throttle.RateLimitInfo{},
		},
		{
			"ResetWithOffsetAndFraction",
			headersOf("anthropic-ratelimit-requests-reset", "2026-01-01T01:00:30+01:00", "anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:01.5Z"),
			throttle.RateLimitInfo{RequestsReset: t0.Add(30 * time.Second), TokensReset: t0.Add(1500 * time.Millisecond)},
		},
		{
			"ResetInThePastIsNow",
			headersOf("anthropic-ratelimit-requests-reset", "2025-12-31T23:59:00Z", "anthropic-ratelimit-tokens-reset", "0001-01-01T00:00:00Z"),
			throttle.RateLimitInfo{RequestsReset: t0, TokensReset: t0},
		},
		{
			"ResetPastADayIsClampedToADay",
			headersOf("anthropic-ratelimit-requests-reset", "2026-01-03T00:00:00Z", "anthropic-ratelimit-tokens-reset", "9999-12-31T23:59:59Z"),
			throttle.RateLimitInfo{RequestsReset: t0.Add(24 * time.Hour), TokensReset: t0.Add(24 * time.Hour)},
		},
		{
			"MalformedTimestampsAreIgnored",
			headersOf("anthropic-ratelimit-requests-reset", "2026-13-01T00:00:00Z", "anthropic-ratelimit-tokens-reset", "2026-01-01 00:00:10"),
			throttle.RateLimitInfo{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireInfo(t, tc.want, throttle.ParseRateLimitHeaders(tc.h, t0))
		})
	}
}

func TestParseRateLimitHeaders_Robustness(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	day := t0.Add(24 * time.Hour)

	for _, tc := range []struct {
		name string
		h    http.Header
		want throttle.RateLimitInfo
	}{
		{"NaN", headersOf("x-ratelimit-limit-tokens", "NaN", "x-ratelimit-remaining-tokens", "nan", "x-ratelimit-reset-tokens", "NaN"), throttle.RateLimitInfo{}},
		{"Inf", headersOf("x-ratelimit-limit-tokens", "Inf", "x-ratelimit-remaining-tokens", "+Inf", "x-ratelimit-reset-tokens", "infinity"), throttle.RateLimitInfo{}},
		{"Negative", headersOf("x-ratelimit-limit-tokens", "-90000", "x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "-5s"), throttle.RateLimitInfo{}},
		{"NegativeZero", headersOf("x-ratelimit-remaining-tokens", "-0"), throttle.RateLimitInfo{}},
		{"Empty", headersOf("x-ratelimit-limit-tokens", "", "x-ratelimit-remaining-tokens", "  ", "x-ratelimit-reset-tokens", ""), throttle.RateLimitInfo{}},
		{"Garbage", headersOf("x-ratelimit-limit-tokens", "lots", "x-ratelimit-remaining-tokens", "12abc", "x-ratelimit-reset-tokens", "5x"), throttle.RateLimitInfo{}},
		{"HexAndUnderscores", headersOf("x-ratelimit-limit-tokens", "0x10", "x-ratelimit-remaining-tokens", "1_000", "x-ratelimit-reset-tokens", "0x1p4"), throttle.RateLimitInfo{}},
		{"TwoPoints", headersOf("x-ratelimit-limit-tokens", "1.2.3", "x-ratelimit-reset-tokens", "1..5s"), throttle.RateLimitInfo{}},
		{"DurationWithoutUnit", headersOf("x-ratelimit-reset-tokens", "1m30"), throttle.RateLimitInfo{}},
		{"DurationWithUnknownUnit", headersOf("x-ratelimit-reset-tokens", "2d"), throttle.RateLimitInfo{}},
		{"DurationUnitsAreCaseSensitive", headersOf("x-ratelimit-reset-tokens", "5S"), throttle.RateLimitInfo{}},
		{"BareUnit", headersOf("x-ratelimit-reset-tokens", "s"), throttle.RateLimitInfo{}},
		{"Huge", headersOf("x-ratelimit-limit-tokens", "1e308", "x-ratelimit-remaining-tokens", "99999999999999999999"),
			throttle.RateLimitInfo{TokensLimit: 1e308, TokensRemaining: 99999999999999999999, HasTokensRemaining: true}},
		{"TooLargeForAFloatIsIgnored", headersOf("x-ratelimit-limit-tokens", "1e400", "x-ratelimit-remaining-tokens", "9"+strings.Repeat("9", 400)), throttle.RateLimitInfo{}},
		{"UnderflowIsZero", headersOf("x-ratelimit-remaining-tokens", "1e-400"), throttle.RateLimitInfo{HasTokensRemaining: true}},
		{"RemainingAboveLimitIsClamped", headersOf("x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "5000", "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1e308"),
			throttle.RateLimitInfo{TokensLimit: 1000, TokensRemaining: 1000, HasTokensRemaining: true, RequestsLimit: 60, RequestsRemaining: 60, HasRequestsRemaining: true}},
		{"RemainingWithoutLimitIsKept", headersOf("x-ratelimit-remaining-tokens", "5000"), throttle.RateLimitInfo{TokensRemaining: 5000, HasTokensRemaining: true}},
		{"ZeroRemainingIsPresent", headersOf("x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "0"), throttle.RateLimitInfo{TokensLimit: 1000, HasTokensRemaining: true}},
		{"ZeroLimitIsAbsent", headersOf("x-ratelimit-limit-tokens", "0", "x-ratelimit-remaining-tokens", "50"), throttle.RateLimitInfo{TokensRemaining: 50, HasTokensRemaining: true}},
		{"FractionalFigures", headersOf("x-ratelimit-limit-tokens", "1000.5", "x-ratelimit-remaining-tokens", "+.5e3"), throttle.RateLimitInfo{TokensLimit: 1000.5, TokensRemaining: 500, HasTokensRemaining: true}},
		{"ResetPastADay", headersOf("x-ratelimit-reset-tokens", "25h", "x-ratelimit-reset-requests", "86400.001"), throttle.RateLimitInfo{TokensReset: day, RequestsReset: day}},
		{"ResetOfExactlyADay", headersOf("x-ratelimit-reset-tokens", "24h", "x-ratelimit-reset-requests", "1440m"), throttle.RateLimitInfo{TokensReset: day, RequestsReset: day}},
		{"DurationOverflowIsClamped", headersOf("x-ratelimit-reset-tokens", "9999999999999999999h", "x-ratelimit-reset-requests", "2562047h47m16.854775808s"),
			throttle.RateLimitInfo{TokensReset: day, RequestsReset: day}},
		{"DurationTooLargeForAFloatIsClamped", headersOf("x-ratelimit-reset-tokens", "9"+strings.Repeat("9", 400)+"s", "x-ratelimit-reset-requests", "1e400"),
			throttle.RateLimitInfo{TokensReset: day, RequestsReset: day}},
		{"HugeBareReset", headersOf("x-ratelimit-reset-tokens", "1e308", "x-ratelimit-reset-requests", "99999999999999999999"), throttle.RateLimitInfo{TokensReset: day, RequestsReset: day}},
		{"ManyDurationParts", headersOf("x-ratelimit-reset-tokens", strings.Repeat("1h", 1000)), throttle.RateLimitInfo{TokensReset: day}},
		{"UnusableFiguresLeaveUsableOnes", headersOf("x-ratelimit-limit-tokens", "NaN", "x-ratelimit-remaining-tokens", "42", "x-ratelimit-reset-tokens", "-1s"),
			throttle.RateLimitInfo{TokensRemaining: 42, HasTokensRemaining: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got throttle.RateLimitInfo
			require.NotPanics(t, func() { got = throttle.ParseRateLimitHeaders(tc.h, t0) })
			requireInfo(t, tc.want, got)
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hour := t0.Add(throttle.MaxRetryAfter)

	require.Equal(t, time.Hour, throttle.MaxRetryAfter)
	for _, tc := range []struct {
		name   string
		h      http.Header
		want   time.Time
		wantOK bool
	}{
		{"Seconds", headersOf("Retry-After", "30"), t0.Add(30 * time.Second), true},
		{"DecimalSeconds", headersOf("Retry-After", "1.5"), t0.Add(1500 * time.Millisecond), true},
		{"ZeroSeconds", headersOf("Retry-After", "0"), t0, true},
		{"NameIsCaseInsensitive", headersOf("RETRY-AFTER", "7"), t0.Add(7 * time.Second), true},
		{"HTTPDate", headersOf("Retry-After", "Thu, 01 Jan 2026 00:00:20 GMT"), t0.Add(20 * time.Second), true},
		{"RFC850Date", headersOf("Retry-After", "Thursday, 01-Jan-26 00:01:00 GMT"), t0.Add(time.Minute), true},
		{"ANSICDate", headersOf("Retry-After", "Thu Jan  1 00:00:05 2026"), t0.Add(5 * time.Second), true},
		{"DateInThePastIsNow", headersOf("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), t0, true},
		{"DatePastAnHourIsClamped", headersOf("Retry-After", "Fri, 02 Jan 2026 00:00:00 GMT"), hour, true},
		{"Milliseconds", headersOf("retry-after-ms", "1500"), t0.Add(1500 * time.Millisecond), true},
		{"FractionalMilliseconds", headersOf("retry-after-ms", "250.5"), t0.Add(250500 * time.Microsecond), true},
		{"MillisecondsArePreferred", headersOf("retry-after-ms", "20", "Retry-After", "1"), t0.Add(20 * time.Millisecond), true},
		{"MalformedMillisecondsFallBack", headersOf("retry-after-ms", "soon", "Retry-After", "3"), t0.Add(3 * time.Second), true},
		{"NegativeMillisecondsFallBack", headersOf("retry-after-ms", "-5", "Retry-After", "3"), t0.Add(3 * time.Second), true},
		{"HugeSecondsAreClamped", headersOf("Retry-After", "99999999999999999999"), hour, true},
		{"HugeMillisecondsAreClamped", headersOf("retry-after-ms", "1e308"), hour, true},
		{"SecondsTooLargeForAFloatAreClamped", headersOf("Retry-After", "1e400"), hour, true},
		{"JustUnderAnHour", headersOf("Retry-After", "3599.5"), t0.Add(time.Hour - 500*time.Millisecond), true},
		{"Negative", headersOf("Retry-After", "-1"), time.Time{}, false},
		{"NaN", headersOf("Retry-After", "NaN", "retry-after-ms", "NaN"), time.Time{}, false},
		{"Inf", headersOf("Retry-After", "Inf", "retry-after-ms", "+Inf"), time.Time{}, false},
		{"Garbage", headersOf("Retry-After", "later"), time.Time{}, false},
		{"DurationSyntaxIsNotSeconds", headersOf("Retry-After", "30s"), time.Time{}, false},
		{"Empty", headersOf("Retry-After", ""), time.Time{}, false},
		{"Absent", http.Header{}, time.Time{}, false},
		{"NilHeader", nil, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := throttle.ParseRetryAfter(tc.h, t0)
			require.Equal(t, tc.wantOK, ok)
			require.True(t, tc.want.Equal(got), "want %v, got %v", tc.want, got)
			// ParseRateLimitHeaders carries the same instant.
			require.True(t, tc.want.Equal(throttle.ParseRateLimitHeaders(tc.h, t0).RetryAfter))
		})
	}
}

func TestLimit_Observe(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// openai is 90k tokens a minute (1500/s, burst 90k) and 10 requests a second (burst 10).
	openai := throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000}.WithDefaults()

	t.Run("RemainingBelowTheBucketDelaysTheNextAdmission", func(t *testing.T) {
		t.Parallel()
		var s throttle.State // full: 90k tokens
		requireDecision(t, openai.Check(s, t0, 5000), throttle.ReasonNone, t0)
		info := throttle.ParseRateLimitHeaders(headersOf(
			"x-ratelimit-limit-tokens", "90000", "x-ratelimit-remaining-tokens", "2000", "x-ratelimit-reset-tokens", "6m0s"), t0)
		eff, s := openai.Observe(s, t0, info)
		require.Equal(t, openai, eff, "the provider's limit is the configured one")
		require.Equal(t, 2000.0, s.Tokens.Level)
		// 3000 tokens short at 1500/s: the next 5000-token admission moves from t0 to t0+2s.
		requireDecision(t, eff.Check(s, t0, 5000), throttle.ReasonTokens, t0.Add(2*time.Second))
		requireDecision(t, eff.Check(s, t0, 2000), throttle.ReasonNone, t0)
	})

	t.Run("LearnsALowerTokenLimit", func(t *testing.T) {
		t.Parallel()
		s := openai.Admit(throttle.State{}, t0, 1000) // 89k left
		info := throttle.RateLimitInfo{TokensLimit: 30_000, TokensRemaining: 1000, HasTokensRemaining: true, TokensReset: t0.Add(2 * time.Second)}
		eff, s := openai.Observe(s, t0, info)
		want := openai
		want.TokensPerMinute, want.TokenBurst = 30_000, 30_000
		require.Equal(t, want, eff)
		require.NoError(t, eff.Validate())
		require.Equal(t, 1000.0, s.Tokens.Level)
		// 1000 tokens short at the learned 500/s.
		requireDecision(t, eff.Check(s, t0, 2000), throttle.ReasonTokens, t0.Add(2*time.Second))
	})

	t.Run("LearnsALowerRequestLimit", func(t *testing.T) {
		t.Parallel()
		var s throttle.State
		info := throttle.ParseRateLimitHeaders(headersOf(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"), t0)
		eff, s := openai.Observe(s, t0, info)
		want := openai
		want.RequestsPerSecond, want.Burst = 1, 1 // 60 a minute
		require.Equal(t, want, eff)
		require.Equal(t, 0.0, s.Requests.Level)
		requireDecision(t, eff.Check(s, t0, 1), throttle.ReasonRate, t0.Add(time.Second))
	})

	t.Run("RequestBurstFollowsTheLearnedRate", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 100, Burst: 500}
		eff, _ := l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{RequestsLimit: 1200}) // 20/s
		require.Equal(t, 20.0, eff.RequestsPerSecond)
		require.Equal(t, 20.0, eff.Burst)
		eff, _ = l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{RequestsLimit: 30}) // 0.5/s
		require.Equal(t, 0.5, eff.RequestsPerSecond)
		require.Equal(t, 1.0, eff.Burst, "a burst stays >= 1")
		require.NoError(t, eff.Validate())
	})

	t.Run("BurstIsKeptWhileTheRateIsNotLowered", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 5, Burst: 50, TokensPerMinute: 1000, TokenBurst: 5000}
		eff, _ := l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{RequestsLimit: 600, TokensLimit: 1000})
		require.Equal(t, l, eff)
	})

	t.Run("TokenBurstIsAtMostTheLearnedLimit", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", TokensPerMinute: 90_000, TokenBurst: 20_000}
		eff, _ := l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{TokensLimit: 40_000})
		require.Equal(t, throttle.Limit{Key: "k", TokensPerMinute: 40_000, TokenBurst: 20_000}, eff, "a burst below the learned limit stands")
		eff, _ = l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{TokensLimit: 10_000})
		require.Equal(t, throttle.Limit{Key: "k", TokensPerMinute: 10_000, TokenBurst: 10_000}, eff)
	})

	t.Run("NeverRaisesALimitAboveTheConfiguredCeiling", func(t *testing.T) {
		t.Parallel()
		s := openai.Admit(throttle.State{}, t0, 50_000) // 40k tokens, 9 requests left
		info := throttle.ParseRateLimitHeaders(headersOf(
			"x-ratelimit-limit-requests", "6000", "x-ratelimit-remaining-requests", "6000", // 100/s: 10x
			"x-ratelimit-limit-tokens", "900000", "x-ratelimit-remaining-tokens", "900000"), t0)
		eff, got := openai.Observe(s, t0, info)
		require.Equal(t, openai, eff)
		require.Equal(t, s, got, "remaining above the bucket gives nothing back")
	})

	t.Run("NeverAddsALimitKind", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", MaxConcurrent: 3}
		info := throttle.RateLimitInfo{
			RequestsLimit: 60, RequestsRemaining: 0, HasRequestsRemaining: true,
			TokensLimit: 1000, TokensRemaining: 0, HasTokensRemaining: true,
		}
		eff, s := l.Observe(throttle.State{InflightCount: 2}, t0, info)
		require.Equal(t, l, eff)
		require.Equal(t, throttle.State{InflightCount: 2}, s, "buckets of unset kinds are left alone")
		requireDecision(t, eff.Check(s, t0, 1_000_000), throttle.ReasonNone, t0)
	})

	t.Run("FillsTheConfiguredDefaults", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 5, TokensPerMinute: 600}
		eff, _ := l.Observe(throttle.State{}, t0, throttle.RateLimitInfo{})
		require.Equal(t, l.WithDefaults(), eff)
	})

	t.Run("ProviderLimitsBelowOneAreIgnored", func(t *testing.T) {
		t.Parallel()
		eff, _ := openai.Observe(throttle.State{}, t0, throttle.RateLimitInfo{RequestsLimit: 0.5, TokensLimit: 5e-324})
		require.Equal(t, openai, eff)
	})

	t.Run("HostileFiguresAreIgnored", func(t *testing.T) {
		t.Parallel()
		s := openai.Admit(throttle.State{}, t0, 100)
		for _, info := range []throttle.RateLimitInfo{
			{TokensLimit: math.NaN(), TokensRemaining: math.NaN(), HasTokensRemaining: true, RequestsLimit: math.NaN(), RequestsRemaining: math.NaN(), HasRequestsRemaining: true},
			{TokensLimit: math.Inf(1), TokensRemaining: math.Inf(1), HasTokensRemaining: true, RequestsLimit: math.Inf(1), RequestsRemaining: math.Inf(1), HasRequestsRemaining: true},
			{TokensLimit: -5, TokensRemaining: -5, HasTokensRemaining: true, RequestsLimit: -5, RequestsRemaining: -5, HasRequestsRemaining: true},
			{TokensLimit: math.Inf(-1), TokensRemaining: math.Inf(-1), HasTokensRemaining: true},
			{TokensRemaining: 10, RequestsRemaining: 0}, // remaining without its Has flag
		} {
			eff, got := openai.Observe(s, t0, info)
			require.Equal(t, openai, eff, "%+v", info)
			require.Equal(t, s, got, "%+v", info)
		}
	})

	t.Run("RemainingLowersButNeverRaisesTheBucket", func(t *testing.T) {
		t.Parallel()
		s := openai.Admit(throttle.State{}, t0, 89_500) // 500 tokens left
		_, got := openai.Observe(s, t0, throttle.RateLimitInfo{TokensRemaining: 2000, HasTokensRemaining: true})
		require.Equal(t, 500.0, got.Tokens.Level)
		_, got = openai.Observe(s, t0, throttle.RateLimitInfo{TokensRemaining: 0, HasTokensRemaining: true})
		require.Equal(t, 0.0, got.Tokens.Level)
	})

	t.Run("KeepsDebt", func(t *testing.T) {
		t.Parallel()
		s := openai.Admit(throttle.State{}, t0, 100_000) // 10k in debt
		_, got := openai.Observe(s, t0, throttle.RateLimitInfo{TokensRemaining: 0, HasTokensRemaining: true})
		require.Equal(t, -10_000.0, got.Tokens.Level)
	})

	t.Run("RefillsToNowFirst", func(t *testing.T) {
		t.Parallel()
		s := openai.Admit(throttle.State{}, t0, 90_000) // empty at t0
		now := t0.Add(2 * time.Second)                  // 3000 refilled
		_, got := openai.Observe(s, now, throttle.RateLimitInfo{TokensRemaining: 5000, HasTokensRemaining: true})
		require.Equal(t, throttle.Bucket{Level: 3000, At: now}, got.Tokens)
		_, got = openai.Observe(s, now, throttle.RateLimitInfo{TokensRemaining: 1000, HasTokensRemaining: true})
		require.Equal(t, throttle.Bucket{Level: 1000, At: now}, got.Tokens)
	})

	t.Run("LearnedBurstCapsTheBucket", func(t *testing.T) {
		t.Parallel()
		_, got := openai.Observe(throttle.State{}, t0, throttle.RateLimitInfo{TokensLimit: 6000, RequestsLimit: 120})
		require.Equal(t, 6000.0, got.Tokens.Level)
		require.Equal(t, 2.0, got.Requests.Level)
	})

	t.Run("RecoversAfterTheReset", func(t *testing.T) {
		t.Parallel()
		info := throttle.ParseRateLimitHeaders(headersOf(
			"x-ratelimit-limit-tokens", "30000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1m0s",
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"), t0)
		eff, s := openai.Observe(throttle.State{}, t0, info)
		require.Equal(t, 30_000.0, eff.TokensPerMinute)
		// Both buckets are empty: the request bucket is the first reason, the token bucket the later
		// retry instant.
		requireDecision(t, eff.Check(s, t0, 30_000), throttle.ReasonRate, t0.Add(time.Minute))
		// Recovery follows the learned rate, 500 tokens a second: half the bucket after 30s...
		requireDecision(t, eff.Check(s, t0.Add(30*time.Second), 15_000), throttle.ReasonNone, t0.Add(30*time.Second))
		requireDecision(t, eff.Check(s, t0.Add(30*time.Second), 15_001), throttle.ReasonTokens, t0.Add(30*time.Second+2*time.Millisecond))
		// ...and all of it at the reset, a minute on.
		at := info.TokensReset
		requireDecision(t, eff.Check(s, at, 30_000), throttle.ReasonNone, at)
		full := eff.Admit(s, at, 0)
		require.Equal(t, eff.TokenBurst, full.Tokens.Level)
		require.Equal(t, eff.Burst-1, full.Requests.Level)
		// The next Observe, with the provider's window reset, leaves the bucket full.
		_, again := openai.Observe(s, at, throttle.RateLimitInfo{TokensLimit: 30_000, TokensRemaining: 30_000, HasTokensRemaining: true})
		require.Equal(t, 30_000.0, again.Tokens.Level)
	})

	t.Run("RetryAfterPauses", func(t *testing.T) {
		t.Parallel()
		info := throttle.ParseRateLimitHeaders(headersOf("retry-after-ms", "2500"), t0)
		eff, s := openai.Observe(throttle.State{}, t0, info)
		require.Equal(t, openai, eff)
		require.Equal(t, t0.Add(2500*time.Millisecond), s.PausedUntil)
		requireDecision(t, eff.Check(s, t0, 1), throttle.ReasonPaused, t0.Add(2500*time.Millisecond))
		requireDecision(t, eff.Check(s, t0.Add(2500*time.Millisecond), 1), throttle.ReasonNone, t0.Add(2500*time.Millisecond))
	})

	t.Run("RetryAfterKeepsALaterPause", func(t *testing.T) {
		t.Parallel()
		s := throttle.State{PausedUntil: t0.Add(time.Minute)}
		_, got := openai.Observe(s, t0, throttle.RateLimitInfo{RetryAfter: t0.Add(time.Second)})
		require.Equal(t, t0.Add(time.Minute), got.PausedUntil)
		_, got = openai.Observe(s, t0, throttle.RateLimitInfo{RetryAfter: t0.Add(2 * time.Minute)})
		require.Equal(t, t0.Add(2*time.Minute), got.PausedUntil)
	})

	t.Run("RetryAfterNowOrPastDoesNotPause", func(t *testing.T) {
		t.Parallel()
		for _, at := range []time.Time{t0, t0.Add(-time.Second), {}} {
			_, got := openai.Observe(throttle.State{}, t0, throttle.RateLimitInfo{RetryAfter: at})
			require.True(t, got.PausedUntil.IsZero(), "RetryAfter %v", at)
		}
	})

	t.Run("HandBuiltRetryAfterIsClamped", func(t *testing.T) {
		t.Parallel()
		_, got := openai.Observe(throttle.State{}, t0, throttle.RateLimitInfo{RetryAfter: t0.Add(30 * 24 * time.Hour)})
		require.Equal(t, t0.Add(throttle.MaxRetryAfter), got.PausedUntil)
	})

	t.Run("DoesNotChangeTheFigures", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", MaxConcurrent: 4, MaxInflightTokens: 9000, TokensPerMinute: 90_000}.WithDefaults()
		s := l.Admit(throttle.State{}, t0, 3000)
		eff, got := l.Observe(s, t0, throttle.RateLimitInfo{TokensLimit: 1000, TokensRemaining: 0, HasTokensRemaining: true})
		require.Equal(t, 4, eff.MaxConcurrent)
		require.Equal(t, int64(9000), eff.MaxInflightTokens)
		require.Equal(t, s.InflightCount, got.InflightCount)
		require.Equal(t, s.InflightTokens, got.InflightTokens)
	})
}
