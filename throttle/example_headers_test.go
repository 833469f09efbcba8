package throttle_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

func ExampleParseRateLimitHeaders() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	// An OpenAI response: resets are durations.
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "499")
	h.Set("x-ratelimit-reset-requests", "120ms")
	h.Set("x-ratelimit-limit-tokens", "90000")
	h.Set("x-ratelimit-remaining-tokens", "86400")
	h.Set("x-ratelimit-reset-tokens", "2.4s")

	info := throttle.ParseRateLimitHeaders(h, now)
	fmt.Printf("requests: %v of %v left, reset in %v\n", info.RequestsRemaining, info.RequestsLimit, info.RequestsReset.Sub(now))
	fmt.Printf("tokens: %v of %v left, reset in %v\n", info.TokensRemaining, info.TokensLimit, info.TokensReset.Sub(now))

	// Output:
	// requests: 499 of 500 left, reset in 120ms
	// tokens: 86400 of 90000 left, reset in 2.4s
}

func ExampleParseRateLimitHeaders_anthropic() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	// An Anthropic 429: resets are RFC 3339 instants, and Retry-After says how long to wait.
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", "50")
	h.Set("anthropic-ratelimit-requests-remaining", "0")
	h.Set("anthropic-ratelimit-requests-reset", "2026-01-01T12:00:30Z")
	h.Set("anthropic-ratelimit-input-tokens-limit", "40000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "12000")
	h.Set("anthropic-ratelimit-input-tokens-reset", "2026-01-01T12:00:05Z")
	h.Set("retry-after", "30")

	info := throttle.ParseRateLimitHeaders(h, now)
	fmt.Printf("requests: %v of %v left, reset in %v\n", info.RequestsRemaining, info.RequestsLimit, info.RequestsReset.Sub(now))
	fmt.Printf("tokens: %v of %v left, reset in %v\n", info.TokensRemaining, info.TokensLimit, info.TokensReset.Sub(now))
	fmt.Printf("retry after %v\n", info.RetryAfter.Sub(now))

	// Output:
	// requests: 0 of 50 left, reset in 30s
	// tokens: 12000 of 40000 left, reset in 5s
	// retry after 30s
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, h := range []http.Header{
		{"Retry-After": {"2"}},
		{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}}, // retry-after-ms wins
		{"Retry-After": {"Thu, 01 Jan 2026 12:00:10 GMT"}},
		{"Retry-After": {"86400"}}, // clamped to MaxRetryAfter
		{"Retry-After": {"soon"}},
	} {
		t, ok := throttle.ParseRetryAfter(h, now)
		if !ok {
			fmt.Println("no usable Retry-After")
			continue
		}
		fmt.Println(t.Sub(now))
	}

	// Output:
	// 2s
	// 1.5s
	// 10s
	// 1h0m0s
	// no usable Retry-After
}

func ExampleLimit_Observe() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	configured := throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000}

	// The provider's headers say the account's real budget is 60,000 tokens a minute, 1,200 left.
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "60000")
	h.Set("x-ratelimit-remaining-tokens", "1200")
	h.Set("x-ratelimit-reset-tokens", "58.8s")

	effective, s := configured.Observe(throttle.State{}, now, throttle.ParseRateLimitHeaders(h, now))
	fmt.Printf("TokensPerMinute %v, TokenBurst %v, %v tokens left\n", effective.TokensPerMinute, effective.TokenBurst, s.Tokens.Level)

	// A call reserving 2,000 tokens waits until the bucket has refilled at 1,000 a second.
	d := effective.Check(s, now, 2000)
	fmt.Printf("cost 2000: wait (%v) for %v\n", d.Reason, d.RetryAt.Sub(now))

	// Output:
	// TokensPerMinute 60000, TokenBurst 60000, 1200 tokens left
	// cost 2000: wait (tokens) for 800ms
}
