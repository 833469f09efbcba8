package throttle_test

import (
	"fmt"

	"github.com/sluicehq/sluice/throttle"
)

func ExamplePriceTable_Cost() {
	// Operators keep their own table; these are gpt-4o-mini's prices of September 2025.
	prices, err := throttle.ParsePriceTable([]byte(`{
		"currency": "USD", "as_of": "2025-09-01", "source": "https://openai.com/api/pricing/",
		"models": {"gpt-4o-mini": {"input": 150000, "cached_input": 75000, "output": 600000}}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	dollars := func(micro int64) string { return fmt.Sprintf("$%d.%06d", micro/1_000_000, micro%1_000_000) }

	// At admission: reserve for 12,000 tokens in and up to 1,000 out, with no cache hit assumed.
	estimate := throttle.Cost{Input: 12_000, Output: 1_000}
	reserve, _ := prices.Estimate("gpt-4o-mini", estimate)
	spend := throttle.Spend{Tokens: estimate, Money: reserve}
	fmt.Println("reserved:", dollars(spend.Money))

	// After the call: it read 8,000 of its 12,000 input tokens from the cache and wrote 500.
	cost, _ := prices.Cost("gpt-4o-mini", throttle.Usage{Input: 12_000, CachedInput: 8_000, Output: 500})
	fmt.Println("used:    ", dollars(cost))

	// A single token costs $0.00000015, rounded up to a whole micro-dollar: a cap errs high.
	one, _ := prices.Cost("gpt-4o-mini", throttle.Usage{Input: 1})
	fmt.Println("1 token: ", dollars(one))

	_, err = prices.Cost("gpt-5", throttle.Usage{Input: 1})
	fmt.Println(err)

	// Output:
	// reserved: $0.002400
	// used:     $0.001500
	// 1 token:  $0.000001
	// throttle: price table: unknown model "gpt-5": the table prices ["gpt-4o-mini"]
}
