package throttle_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// A Refusal is the limit and its spent allowance: what a refused ticket's outcome stores and what
// the activity's SluiceAllowanceSpent error carries, as flat JSON a workflow of any release reads.
func ExampleRefusal() {
	a, _ := throttle.ParseAllowance("tokens=50000/day@America/Los_Angeles")
	start := time.Date(2026, 2, 10, 8, 0, 0, 0, time.UTC)
	r := throttle.Refusal{Limit: "tenant:free", Spent: throttle.Spent{Allowance: a, Used: 49_000, Needs: 2_000,
		WindowStart: start, WindowEnd: start.Add(24 * time.Hour), ResetAt: start.Add(24 * time.Hour)}}
	fmt.Println(r.Error())
	b, _ := json.Marshal(r)
	fmt.Println(string(b))

	var back throttle.Refusal
	_ = json.Unmarshal(b, &back)
	fmt.Println(back.Limit, back.Allowance, back.ResetAt.Format(time.RFC3339))

	// Output:
	// sluice: limit tenant:free: allowance tokens=50000/day@America/Los_Angeles spent: used 49000 tokens of 50000 tokens, the call needs 2000 tokens; resets at 2026-02-11T08:00:00Z (2026-02-11 00:00 PST)
	// {"limit":"tenant:free","allowance":"tokens=50000/day@America/Los_Angeles","meter":"tokens","used":49000,"amount":50000,"needs":2000,"reset_at":"2026-02-11T08:00:00Z","window_start":"2026-02-10T08:00:00Z","window_end":"2026-02-11T08:00:00Z"}
	// tenant:free tokens=50000/day@America/Los_Angeles 2026-02-11T08:00:00Z
}
