package throttle_test

import (
	"fmt"

	"github.com/sluicehq/sluice/throttle"
)

// A runtime change names only the fields it changes. The request rate changes without a burst, so
// its burst goes back to the new rate's default; the token budget is kept as it was, burst and all.
func ExampleLimitChange_Apply() {
	l := throttle.Limit{Key: "openai", MaxConcurrent: 10, RequestsPerSecond: 5, Burst: 2, TokensPerMinute: 90_000, TokenBurst: 30_000}
	rps, concurrent := 20.0, 50
	changed := throttle.LimitChange{RequestsPerSecond: &rps, MaxConcurrent: &concurrent}.Apply(l).WithDefaults()
	fmt.Printf("max_concurrent %d, %g/s burst %g, %g tokens/min burst %g\n",
		changed.MaxConcurrent, changed.RequestsPerSecond, changed.Burst, changed.TokensPerMinute, changed.TokenBurst)
	// Output: max_concurrent 50, 20/s burst 20, 90000 tokens/min burst 30000
}
