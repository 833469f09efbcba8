package admit_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

func ExampleDecideClaim() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	held := map[string]admit.LimitState{
		"openai":   {Limit: throttle.Limit{Key: "openai", MaxConcurrent: 3}},
		"tenant:a": {Limit: throttle.Limit{Key: "tenant:a", MaxConcurrent: 1}},
	}
	d, err := admit.DecideClaim(admit.ClaimPage{
		Line:   "openai",
		Limits: held,
		Candidates: []admit.Candidate{
			{ID: 1, LimitKeys: []string{"openai", "tenant:a"}},
			{ID: 2, LimitKeys: []string{"openai", "tenant:a"}}, // tenant:a is full: passed over
			{ID: 3, LimitKeys: []string{"openai"}},
			{ID: 4, LimitKeys: []string{"openai"}},
			{ID: 5, LimitKeys: []string{"openai"}}, // openai is full: the line waits
		},
		Now:    now,
		Budget: 10,
	})
	if err != nil {
		panic(err)
	}
	for _, a := range d.Admitted {
		fmt.Println("admitted", a.ID)
	}
	for _, w := range d.Waits {
		fmt.Printf("%d waits for %s (%v)\n", w.ID, w.Key, w.Reason)
	}
	fmt.Println("line blocked:", d.Blocked)
	// Output:
	// admitted 1
	// admitted 3
	// admitted 4
	// 2 waits for tenant:a (concurrency)
	// 5 waits for openai (concurrency)
	// line blocked: concurrency
}
