package throttle_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

func ExampleParseAllowance() {
	for _, s := range []string{
		"tokens=5000000/day@America/Los_Angeles",
		"requests=1000/hour",
		"usd=5.00/day",
		"output_tokens=200000/24h",
		"tokens=5M/day",
		"tokens=5000/24h@UTC",
	} {
		a, err := throttle.ParseAllowance(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-40s meter %s, amount %d, calendar %q, zone %q, rolling %v\n", a, a.Meter, a.Amount, a.Calendar, a.Zone, a.Rolling)
	}

	// Output:
	// tokens=5000000/day@America/Los_Angeles   meter tokens, amount 5000000, calendar "day", zone "America/Los_Angeles", rolling 0s
	// requests=1000/hour                       meter requests, amount 1000, calendar "hour", zone "", rolling 0s
	// usd=5.00/day                             meter money, amount 5000000, calendar "day", zone "", rolling 0s
	// output_tokens=200000/24h                 meter output_tokens, amount 200000, calendar "", zone "", rolling 24h0m0s
	// throttle: allowance "tokens=5M/day": amount "5M": want a whole number, e.g. 5000000 or 5_000_000
	// throttle: allowance "tokens=5000/24h@UTC": zone "UTC": a rolling period (24h) takes no zone
}

func ExampleAllowance_Window() {
	a, _ := throttle.ParseAllowance("tokens=5000000/day@America/Los_Angeles")
	for _, now := range []string{
		"2026-03-07T20:00:00Z", // an ordinary day: 24 hours
		"2026-03-08T20:00:00Z", // clocks spring forward at 2am: 23 hours
		"2026-11-01T20:00:00Z", // clocks fall back at 2am: 25 hours
	} {
		at, _ := time.Parse(time.RFC3339, now)
		start, end := a.Window(at)
		fmt.Printf("%s: %s to %s, %v\n", now, start.Format(time.RFC3339), end.Format(time.RFC3339), end.Sub(start))
	}

	// Output:
	// 2026-03-07T20:00:00Z: 2026-03-07T00:00:00-08:00 to 2026-03-08T00:00:00-08:00, 24h0m0s
	// 2026-03-08T20:00:00Z: 2026-03-08T00:00:00-08:00 to 2026-03-09T00:00:00-07:00, 23h0m0s
	// 2026-11-01T20:00:00Z: 2026-11-01T00:00:00-07:00 to 2026-11-02T00:00:00-08:00, 25h0m0s
}

func ExampleAllowances_Check() {
	// A free plan: 50,000 tokens a day, and at most 5 cents a day, midnight to midnight Pacific time.
	plan := throttle.Allowances{}
	for _, s := range []string{"tokens=50000/day@America/Los_Angeles", "usd=0.05/day@America/Los_Angeles"} {
		a, _ := throttle.ParseAllowance(s)
		plan = append(plan, a)
	}
	now := time.Date(2026, 6, 1, 22, 0, 0, 0, time.UTC) // 3pm in Los Angeles
	// A call estimated at 20,000 tokens in and 1,000 out, priced at $1 and $4 a million (in micro-dollars).
	call := throttle.Spend{Tokens: throttle.Cost{Input: 20_000, Output: 1_000}, Money: 20_000*1 + 1_000*4}

	var st throttle.AllowanceStates
	for i := 1; ; i++ {
		d, bind := plan.Check(st, now, call)
		if !d.OK() {
			a := plan[bind]
			fmt.Printf("call %d: %v spent (%d of %d used), resets %s\n", i, a, a.Used(st[a.Key()], now), a.Amount,
				d.RetryAt.In(time.FixedZone("PDT", -7*3600)).Format(time.Kitchen))
			break
		}
		st = plan.Admit(st, now, call)
		fmt.Printf("call %d: admitted\n", i)
	}

	// Output:
	// call 1: admitted
	// call 2: admitted
	// call 3: tokens=50000/day@America/Los_Angeles spent (42000 of 50000 used), resets 12:00AM
}

// A tenant's plan as a limit of allowances alone: CheckSpend applies them with the rates, the
// tightest winning, and SpentAllowance says which is spent, what it counted, and when it resets.
func ExampleLimit_CheckSpend() {
	tokens, _ := throttle.ParseAllowance("tokens=50000/day@America/Los_Angeles")
	spend, _ := throttle.ParseAllowance("usd=1.00/day@America/Los_Angeles")
	spend.OnSpent = throttle.OnSpentRefuse
	plan := throttle.Limit{Key: "tenant:free", Allowances: throttle.Allowances{tokens, spend}}
	now := time.Date(2026, 2, 10, 22, 0, 0, 0, time.UTC)                                        // 14:00 in Los Angeles
	call := throttle.Spend{Tokens: throttle.Cost{Input: 20_000, Output: 1_000}, Money: 400_000} // $0.40

	var s throttle.State
	for i := 1; ; i++ {
		if d := plan.CheckSpend(s, now, call); !d.OK() {
			sp, _ := plan.SpentAllowance(s, now, call)
			fmt.Printf("call %d: %s\n", i, sp.Error())
			fmt.Println("refused rather than left to wait:", sp.Refuses(time.Time{}))
			break
		}
		s = plan.AdmitSpend(s, now, call)
		fmt.Printf("call %d admitted\n", i)
	}

	// Output:
	// call 1 admitted
	// call 2 admitted
	// call 3: allowance tokens=50000/day@America/Los_Angeles spent: used 42000 tokens of 50000 tokens, the call needs 21000 tokens; resets at 2026-02-11T08:00:00Z (2026-02-11 00:00 PST)
	// refused rather than left to wait: false
}
