package throttle_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

func ExampleLimit_Check() {
	// 2 requests a second (burst 2) and 600 tokens a minute (10 a second, burst 600).
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 2, TokensPerMinute: 600}.WithDefaults()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	var s throttle.State
	try := func(at time.Duration, cost int64) {
		now := start.Add(at)
		d := l.Check(s, now, cost)
		if !d.OK() {
			fmt.Printf("t=%v cost=%d: wait (%v) until t=%v\n", at, cost, d.Reason, d.RetryAt.Sub(start))
			return
		}
		s = l.Admit(s, now, cost)
		fmt.Printf("t=%v cost=%d: admitted, %.0f tokens left\n", at, cost, s.Tokens.Level)
	}

	try(0, 400)
	try(0, 400) // 200 tokens left: 200 more take 20s
	try(0, 100)
	try(0, 100) // both requests of the burst are spent
	try(500*time.Millisecond, 100)

	// At t=1s the bucket has refilled to 10; the first call reports that it used 100 of its 400
	// tokens, so 300 go back.
	s = l.Release(s, start.Add(time.Second), 400, 100)
	fmt.Printf("released: %.0f tokens, %d running\n", s.Tokens.Level, s.InflightCount)
	try(time.Second, 400)

	// Output:
	// t=0s cost=400: admitted, 200 tokens left
	// t=0s cost=400: wait (tokens) until t=20s
	// t=0s cost=100: admitted, 100 tokens left
	// t=0s cost=100: wait (rate) until t=500ms
	// t=500ms cost=100: admitted, 5 tokens left
	// released: 310 tokens, 2 running
	// t=1s cost=400: wait (tokens) until t=10s
}
