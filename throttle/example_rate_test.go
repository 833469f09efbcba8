package throttle_test

import (
	"fmt"

	"github.com/sluicehq/sluice/throttle"
)

func ExampleLimit_Rates() {
	// Anthropic's three budgets: requests per minute (given per second), input and output tokens
	// per minute.
	l := throttle.Limit{Key: "anthropic", RequestsPerSecond: 50.0 / 60, InputTokensPerMinute: 400_000,
		OutputTokensPerMinute: 80_000}.WithDefaults()
	for d, r := range l.Rates() {
		if !r.IsSet() {
			continue
		}
		fmt.Printf("%s: %.0f per minute (%.4g per second, given per %v), burst %.4g\n",
			d, r.PerMinute(), r.PerSecond(), d.Per(), r.Burst())
	}
	// Output:
	// requests: 50 per minute (0.8333 per second, given per 1s), burst 1
	// input_tokens: 400000 per minute (6667 per second, given per 1m0s), burst 4e+05
	// output_tokens: 80000 per minute (1333 per second, given per 1m0s), burst 8e+04
}
