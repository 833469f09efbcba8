package throttle_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

func ExampleLimit_Admit() {
	// At most 2 running at once, 5 requests a second with a burst of 2.
	l := throttle.Limit{Key: "email", MaxConcurrent: 2, RequestsPerSecond: 5, Burst: 2}.WithDefaults()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	var s throttle.State
	for i := range 3 {
		if d := l.Check(s, t0, 0); !d.OK() {
			// Only a release makes room for concurrency: RetryAt is zero.
			fmt.Printf("send %d: wait (%v), retry at zero time: %v\n", i, d.Reason, d.RetryAt.IsZero())
			continue
		}
		s = l.Admit(s, t0, 0)
		fmt.Printf("send %d: admitted, %d running\n", i, s.InflightCount)
	}

	// One send finishes at t0+100ms: a slot is free, but the burst of 2 is spent and refills at 5/s.
	s = l.Release(s, t0.Add(100*time.Millisecond), 0, 0)
	d := l.Check(s, t0.Add(100*time.Millisecond), 0)
	fmt.Printf("after a release: wait (%v) until t0+%v\n", d.Reason, d.RetryAt.Sub(t0))

	// Output:
	// send 0: admitted, 1 running
	// send 1: admitted, 2 running
	// send 2: wait (concurrency), retry at zero time: true
	// after a release: wait (rate) until t0+200ms
}

func ExampleLimit_WithDefaults() {
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 0.5, TokensPerMinute: 90_000}.WithDefaults()
	fmt.Printf("Burst %v, TokenBurst %v\n", l.Burst, l.TokenBurst)

	// Output:
	// Burst 1, TokenBurst 90000
}

func ExampleLimit_Validate() {
	for _, l := range []throttle.Limit{
		{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000},
		{Key: "", MaxConcurrent: 1},
		{Key: "openai", MaxConcurrent: -1},
		{Key: "openai", Burst: 5},
		{Key: "openai", TokensPerMinute: 90_000, TokenBurst: -1},
	} {
		fmt.Println(l.WithDefaults().Validate())
	}

	// Output:
	// <nil>
	// throttle: limit Key must not be empty
	// throttle: limit "openai": MaxConcurrent must be >= 0 (0 means no cap), got -1
	// throttle: limit "openai": Burst must be 0 when RequestsPerSecond is not set, got 5
	// throttle: limit "openai": TokenBurst must be >= 0 (0 means not set), got -1
}
