package interceptor_test

import (
	"fmt"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
)

// The defaults that bound what one Plugin holds and does at a time, which docs/performance.md
// measures: the invocations it keeps in memory (about 5.6 KB each while they wait), the tickets one
// claim admits for the whole fleet, and how often it looks for work when nothing notifies it.
func ExampleOptions_capacity() {
	fmt.Println("MaxHeld:", sluiceinterceptor.DefaultMaxHeld)
	fmt.Println("ClaimBatch:", sluiceinterceptor.DefaultClaimBatch)
	fmt.Println("PollInterval:", sluiceinterceptor.DefaultPollInterval)
	fmt.Println("PollInterval behind a transaction pooler, without ListenURL:", sluiceinterceptor.DefaultPooledPollInterval)
	fmt.Println("LeaseTTL:", sluiceinterceptor.DefaultLeaseTTL)

	// Output:
	// MaxHeld: 10000
	// ClaimBatch: 1000
	// PollInterval: 1s
	// PollInterval behind a transaction pooler, without ListenURL: 200ms
	// LeaseTTL: 15s
}
