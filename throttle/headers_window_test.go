package throttle_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// windowCase is a header set shaped like a provider's own and the windows it tells.
type windowCase struct {
	name               string
	h                  http.Header
	requests, tokens   time.Duration
	requestsLimitWants float64 // the figure is read whatever its window
}

// windowCases are header sets shaped like the providers' own (see docs/provider-headers.md), read at
// 2026-01-01T00:00:00Z.
var windowCases = []windowCase{
	{
		// 5000 requests a minute, one spent: it refills in 60s/5000 = 12ms.
		"OpenAIPerMinute",
		headersOf(
			"x-ratelimit-limit-requests", "5000", "x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-limit-tokens", "160000", "x-ratelimit-remaining-tokens", "159976", "x-ratelimit-reset-tokens", "9ms",
		),
		0, 0, 5000,
	},
	{
		// 1000 requests a day, 20 spent: they refill in 20 * 86.4s. Tokens are per minute.
		"OpenAIPerDay",
		headersOf(
			"x-ratelimit-limit-requests", "1000", "x-ratelimit-remaining-requests", "980", "x-ratelimit-reset-requests", "28m48s",
			"x-ratelimit-limit-tokens", "200000", "x-ratelimit-remaining-tokens", "199000", "x-ratelimit-reset-tokens", "300ms",
		),
		24 * time.Hour, 0, 1000,
	},
	{
		"OpenAIPerDaySpent",
		headersOf("x-ratelimit-limit-requests", "200", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "23h58m33.6s"),
		24 * time.Hour, 0, 200,
	},
	{
		// One request of 10,000 a day spent refills in 8.64s: too soon to tell from a minute.
		"OpenAIPerDayBarelyUsedIsNotTold",
		headersOf("x-ratelimit-limit-requests", "10000", "x-ratelimit-remaining-requests", "9999", "x-ratelimit-reset-requests", "8.64s"),
		0, 0, 10000,
	},
	{
		// OpenAI's documented sample values. 1s for 1 of 60 requests is a minute's refill; 6m0s for
		// 16 of 150,000 tokens implies 39 days, no continuous refill's: not taken as a day.
		"OpenAIDocumentedSample",
		headersOf(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s",
		),
		0, 0, 60,
	},
	{
		// In debt on a per-minute budget: the reset lies minutes ahead but implies minutes.
		"PerMinuteInDebt",
		headersOf("x-ratelimit-limit-tokens", "30000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "2m30s"),
		0, 0, 0,
	},
	{
		// An hourly budget half spent resets in 30 minutes and implies an hour: not a day.
		"HourlyIsNotADay",
		headersOf("x-ratelimit-limit-requests", "100", "x-ratelimit-remaining-requests", "50", "x-ratelimit-reset-requests", "30m0s"),
		0, 0, 100,
	},
	{
		"ResetAloneTellsNothing",
		headersOf("x-ratelimit-reset-requests", "20h", "x-ratelimit-reset-tokens", "20h"),
		0, 0, 0,
	},
	{
		// Groq's documented sample: requests are per day, tokens per minute.
		"Groq",
		headersOf(
			"x-groq-region", "us-east-1",
			"x-ratelimit-limit-requests", "14400", "x-ratelimit-remaining-requests", "14370", "x-ratelimit-reset-requests", "2m59.56s",
			"x-ratelimit-limit-tokens", "18000", "x-ratelimit-remaining-tokens", "17997", "x-ratelimit-reset-tokens", "7.66s",
		),
		24 * time.Hour, 0, 14400,
	},
	{
		// Groq's requests are per day by its documentation, however few are spent.
		"GroqBarelyUsed",
		headersOf("x-groq-region", "gcp-europe-west3", "x-ratelimit-limit-requests", "1000", "x-ratelimit-remaining-requests", "999", "x-ratelimit-reset-requests", "1m26.4s"),
		24 * time.Hour, 0, 1000,
	},
	{
		// Groq's tokens are per minute by its documentation, whatever their reset implies.
		"GroqTokensArePerMinute",
		headersOf("x-groq-region", "us-east-1", "x-ratelimit-limit-tokens", "6000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "20h"),
		0, 0, 0,
	},
	{
		// A proxy that drops x-groq-region: the figures still tell the requests' day.
		"GroqWithoutItsRegion",
		headersOf(
			"x-ratelimit-limit-requests", "14400", "x-ratelimit-remaining-requests", "14370", "x-ratelimit-reset-requests", "2m59.56s",
			"x-ratelimit-limit-tokens", "18000", "x-ratelimit-remaining-tokens", "17997", "x-ratelimit-reset-tokens", "7.66s",
		),
		24 * time.Hour, 0, 14400,
	},
	{
		"GroqRegionWithoutFigures",
		headersOf("x-groq-region", "us-east-1", "x-ratelimit-reset-requests", "2m59.56s"),
		0, 0, 0,
	},
	{
		// Anthropic's figures are per minute by its documentation, even with a reset hours ahead
		// (a clock far behind the provider's).
		"AnthropicIsPerMinute",
		headersOf(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2026-01-01T03:00:00Z",
			"anthropic-ratelimit-tokens-limit", "48000", "anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2026-01-01T03:00:00Z",
		),
		0, 0, 50,
	},
	{
		// Azure OpenAI sends remaining figures without a limit or reset.
		"AzureRemainingOnly",
		headersOf("x-ratelimit-remaining-requests", "19", "x-ratelimit-remaining-tokens", "19913"),
		0, 0, 0,
	},
	{
		// OpenRouter's X-RateLimit-* (on its own 429s only) are not a family Sluice reads.
		"OpenRouterIsNotRead",
		headersOf("X-RateLimit-Limit", "50", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1767312000000"),
		0, 0, 0,
	},
}

// TestParseRateLimitHeaders_Windows checks which window ParseRateLimitHeaders gives each kind of
// windowCases.
func TestParseRateLimitHeaders_Windows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range windowCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info := throttle.ParseRateLimitHeaders(tc.h, t0)
			require.Equal(t, tc.requests, info.RequestsWindow, "RequestsWindow")
			require.Equal(t, tc.tokens, info.TokensWindow, "TokensWindow")
			require.Equal(t, tc.requestsLimitWants, info.RequestsLimit)
		})
	}
}
