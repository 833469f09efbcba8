package throttle_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

func ExampleLimit_Observe_daily() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	day, _ := throttle.ParseAllowance("requests=20000/day")
	configured := throttle.Limit{Key: "groq", RequestsPerSecond: 1, Allowances: throttle.Allowances{day}}

	// Groq's requests headers count per day: 14,400 a day, 14,370 left.
	h := http.Header{}
	h.Set("x-groq-region", "us-east-1")
	h.Set("x-ratelimit-limit-requests", "14400")
	h.Set("x-ratelimit-remaining-requests", "14370")
	h.Set("x-ratelimit-reset-requests", "2m59.56s")
	info := throttle.ParseRateLimitHeaders(h, now)
	fmt.Printf("requests: %v a window of %v\n", info.RequestsLimit, info.RequestsWindow)

	// The day's allowance learns the provider's figure and counts what the provider has; the
	// per-second rate is not a day's business.
	effective, s := configured.Observe(throttle.State{}, now, info)
	a := effective.Allowances[0]
	fmt.Printf("RequestsPerSecond %v; allowance %v, used %d\n", effective.RequestsPerSecond, a, a.Used(s.Allowances[a.Key()], now))

	// What to keep between observations gives the effective limit back.
	learned := throttle.LearnedLimit(configured, effective)
	fmt.Println(learned.Allowances, throttle.EffectiveLimit(configured, learned).Equal(effective))

	// Output:
	// requests: 14400 a window of 24h0m0s
	// RequestsPerSecond 1; allowance requests=14400/day, used 30
	// [requests=14400/day] true
}
