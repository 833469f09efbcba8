package admit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

func TestDecideClaim_Allowances(t *testing.T) {
	t.Parallel()
	evening := utc(t, "2026-03-07T23:00:00Z")
	midnight := utc(t, "2026-03-08T00:00:00Z")
	page := func(l throttle.Limit, cands ...admit.Candidate) admit.ClaimPage {
		return admit.ClaimPage{Line: "k", Limits: heldLimits(l), Candidates: cands, Now: evening, Budget: 10}
	}

	t.Run("WaitKeepsTheLineUntilTheWindowResets", func(t *testing.T) {
		t.Parallel()
		l := withAllowances(t, throttle.Limit{Key: "k"}, "requests=2/day")
		d := decide(t, page(l, cand(1, "k"), cand(2, "k"), cand(3, "k"), cand(4, "k")))
		require.Equal(t, []int64{1, 2}, admittedIDs(d))
		require.Equal(t, throttle.ReasonAllowance, d.Blocked)
		require.Equal(t, waitsFor("k", throttle.ReasonAllowance, 3, 4), d.Waits)
		require.Equal(t, midnight, d.RetryAt)
		require.Empty(t, d.Refused)
	})

	t.Run("RefuseFailsEveryTicketTheAllowanceHasNoRoomFor", func(t *testing.T) {
		t.Parallel()
		l := withAllowances(t, throttle.Limit{Key: "k"}, "tokens=1000/day")
		l.Allowances[0].OnSpent = throttle.OnSpentRefuse
		// 800 admitted earlier today, released having used all of it: nothing is in flight to give
		// any back.
		p := page(l, costing(cand(2, "k"), 300), costing(cand(3, "k"), 200))
		ls := p.Limits["k"]
		sp := throttle.Spend{Tokens: throttle.Tokens(800)}
		ls.State = l.AdmitSpend(ls.State, evening.Add(-time.Hour), sp)
		ls.State = l.ReleaseSpend(ls.State, evening.Add(-time.Minute), throttle.SpendRelease{AdmittedAt: evening.Add(-time.Hour),
			Reserved: sp, Actual: sp, Reported: true, Charged: l.Allowances.Keys()})
		require.Equal(t, throttle.AllowanceState{Start: utc(t, "2026-03-07T00:00:00Z"), Used: 800}, ls.State.Allowances["tokens/day"])
		p.Limits = map[string]admit.LimitState{"k": ls}
		d := decide(t, p)
		require.Equal(t, []int64{3}, admittedIDs(d), "the small ticket behind the refused one still fits")
		require.Len(t, d.Refused, 1)
		r := d.Refused[0]
		require.Equal(t, int64(2), r.ID)
		require.Equal(t, "k", r.Limit)
		require.Equal(t, throttle.Spent{Allowance: l.Allowances[0], Used: 800, Needs: 300,
			WindowStart: utc(t, "2026-03-07T00:00:00Z"), WindowEnd: midnight, ResetAt: midnight}, r.Spent)
		require.Equal(t, "allowance tokens=1000/day spent: used 800 tokens of 1000 tokens, the call needs 300 tokens; "+
			"resets at 2026-03-08T00:00:00Z (2026-03-08 00:00 UTC)", r.Spent.Error())
		require.Equal(t, throttle.ReasonNone, d.Blocked)
		require.Equal(t, int64(1000), l.Allowances[0].Used(d.States["k"].Allowances["tokens/day"], evening))
	})

	t.Run("ADeadlineBeforeTheResetIsRefusedNotLeftToTimeOut", func(t *testing.T) {
		t.Parallel()
		l := withAllowances(t, throttle.Limit{Key: "k"}, "requests=1/day@America/Los_Angeles")
		early, late := cand(2, "k"), cand(3, "k")
		early.Deadline = evening.Add(time.Hour)     // 00:00 UTC, 16:00 in Los Angeles: before its midnight
		late.Deadline = evening.Add(10 * time.Hour) // 09:00 UTC: after midnight in Los Angeles (08:00 UTC)
		d := decide(t, page(l, cand(1, "k"), early, late))
		require.Equal(t, []int64{1}, admittedIDs(d))
		require.Len(t, d.Refused, 1)
		require.Equal(t, int64(2), d.Refused[0].ID)
		require.Equal(t, utc(t, "2026-03-08T08:00:00Z"), d.Refused[0].Spent.ResetAt)
		require.Equal(t, "allowance requests=1/day@America/Los_Angeles spent: used 1 request of 1 request, the call needs 1 request; "+
			"resets at 2026-03-08T08:00:00Z (2026-03-08 00:00 PST); the call's deadline, 2026-03-08T00:00:00Z (2026-03-07 16:00 PST), "+
			"comes before the reset", d.Refused[0].Spent.Error(), "the refusal says the deadline is why")
		require.Equal(t, waitsFor("k", throttle.ReasonAllowance, 3), d.Waits)
	})

	t.Run("ATicketLargerThanTheAllowanceIsRefusedEvenWhenWaiting", func(t *testing.T) {
		t.Parallel()
		l := withAllowances(t, throttle.Limit{Key: "k"}, "tokens=1000/day")
		d := decide(t, page(l, costing(cand(1, "k"), 1001), costing(cand(2, "k"), 10)))
		require.Equal(t, []int64{2}, admittedIDs(d))
		require.Len(t, d.Refused, 1)
		require.True(t, d.Refused[0].Spent.ResetAt.IsZero())
		require.Contains(t, d.Refused[0].Spent.Error(), "no window will admit it")
	})

	t.Run("ATenantsRefusalDoesNotHoldTheProvidersLine", func(t *testing.T) {
		t.Parallel()
		tenant := withAllowances(t, throttle.Limit{Key: "tenant:free"}, "tokens=100/day")
		tenant.Allowances[0].OnSpent = throttle.OnSpentRefuse
		p := admit.ClaimPage{Line: "llm", Limits: heldLimits(throttle.Limit{Key: "llm", MaxConcurrent: 10}, tenant),
			Candidates: []admit.Candidate{costing(cand(1, "llm", "tenant:free"), 500), costing(cand(2, "llm"), 500)},
			Now:        evening, Budget: 10}
		d := decide(t, p)
		require.Equal(t, []int64{2}, admittedIDs(d))
		require.Equal(t, "tenant:free", d.Refused[0].Limit)
	})
}

// TestDecideClaim_AllowanceWithATicketInFlight: a ticket an allowance has no room for, while a ticket
// admitted before it is in flight holding enough to make room, waits for that release instead of
// being refused (Spent.Refuses), even when its allowance refuses or its deadline comes before the
// reset; it is refused once the release gave back too little, and admitted when it gave back enough.
func TestDecideClaim_AllowanceWithATicketInFlight(t *testing.T) {
	t.Parallel()
	evening := utc(t, "2026-03-07T23:00:00Z")
	midnight := utc(t, "2026-03-08T00:00:00Z")
	admittedAt := evening.Add(-time.Hour)
	inFlight := throttle.Spend{Tokens: throttle.Tokens(800)}
	for _, tc := range []struct {
		name     string
		onSpent  throttle.OnSpent
		deadline time.Time
	}{
		{"AllowanceRefuses", throttle.OnSpentRefuse, time.Time{}},
		{"DeadlineBeforeTheReset", throttle.OnSpentWait, evening.Add(30 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := withAllowances(t, throttle.Limit{Key: "k"}, "tokens=1000/day")
			l.Allowances[0].OnSpent = tc.onSpent
			l = l.WithDefaults()
			held := l.AdmitSpend(throttle.State{}, admittedAt, inFlight)
			require.Equal(t, throttle.AllowanceState{Start: utc(t, "2026-03-07T00:00:00Z"), Used: 800, Held: 800},
				held.Allowances["tokens/day"])
			c := costing(cand(2, "k"), 300)
			c.Deadline = tc.deadline
			page := func(s throttle.State) admit.ClaimPage {
				return admit.ClaimPage{Line: "k", Limits: map[string]admit.LimitState{"k": {Limit: l, State: s}},
					Candidates: []admit.Candidate{c}, Now: evening, Budget: 10}
			}
			wantSpent := throttle.Spent{Allowance: l.Allowances[0], Used: 800, Needs: 300, Refundable: 800,
				WindowStart: utc(t, "2026-03-07T00:00:00Z"), WindowEnd: midnight, ResetAt: midnight}

			// In flight: its 800 may come back, and 300 fit in what would be left.
			sp, ok := l.SpentAllowance(held, evening, throttle.Spend{Tokens: throttle.Tokens(300)})
			require.True(t, ok)
			require.Equal(t, wantSpent, sp)
			require.False(t, sp.Refuses(tc.deadline))
			d := decide(t, page(held))
			require.Empty(t, d.Admitted)
			require.Empty(t, d.Refused, "it waits for the ticket in flight")
			require.Equal(t, throttle.ReasonAllowance, d.Blocked)
			require.Equal(t, waitsFor("k", throttle.ReasonAllowance, 2), d.Waits)
			require.Equal(t, midnight, d.RetryAt)

			release := func(actual int64) throttle.State {
				return l.ReleaseSpend(held, evening, throttle.SpendRelease{AdmittedAt: admittedAt, Reserved: inFlight,
					Actual: throttle.Spend{Tokens: throttle.Tokens(actual)}, Reported: true, Charged: l.Allowances.Keys()})
			}

			// Released having used all 800: nothing came back, nothing can; refused.
			d = decide(t, page(release(800)))
			require.Empty(t, d.Admitted)
			require.Empty(t, d.Waits)
			require.Equal(t, throttle.ReasonNone, d.Blocked)
			require.Len(t, d.Refused, 1)
			require.Equal(t, int64(2), d.Refused[0].ID)
			wantSpent.Refundable, wantSpent.Deadline = 0, tc.deadline
			require.Equal(t, wantSpent, d.Refused[0].Spent, "the refusal keeps the ticket's deadline")

			// Released having used 100: 700 came back, and the ticket is admitted.
			d = decide(t, page(release(100)))
			require.Equal(t, []int64{2}, admittedIDs(d))
			require.Empty(t, d.Refused)
			require.Equal(t, throttle.AllowanceState{Start: utc(t, "2026-03-07T00:00:00Z"), Used: 400, Held: 300},
				d.States["k"].Allowances["tokens/day"])
		})
	}
}

func TestExplain_Allowances(t *testing.T) {
	t.Parallel()
	noon := utc(t, "2026-03-07T12:00:00Z")
	wait := withAllowances(t, throttle.Limit{Key: "plan"}, "requests=1/day")
	refuse := wait
	refuse.Allowances = throttle.Allowances{wait.Allowances[0]}
	refuse.Allowances[0].OnSpent = throttle.OnSpentRefuse
	for _, tc := range []struct {
		name     string
		limit    throttle.Limit
		deadline time.Time
		refused  string
	}{
		{"Wait", wait, time.Time{}, ""},
		{"Refuse", refuse, time.Time{}, "the next claim refuses it: allowance requests=1/day spent: used 1 request of 1 request, the call needs 1 request; " +
			"resets at 2026-03-08T00:00:00Z (2026-03-08 00:00 UTC)"},
		{"RefuseDeadlineBeforeTheReset", refuse, noon.Add(time.Hour), "the next claim refuses it: allowance requests=1/day spent: used 1 request of 1 request, " +
			"the call needs 1 request; resets at 2026-03-08T00:00:00Z (2026-03-08 00:00 UTC)"},
		{"WaitDeadlineBeforeTheReset", wait, noon.Add(time.Hour), "the next claim refuses it: allowance requests=1/day spent: used 1 request of 1 request, " +
			"the call needs 1 request; resets at 2026-03-08T00:00:00Z (2026-03-08 00:00 UTC); " +
			"the call's deadline, 2026-03-07T13:00:00Z (2026-03-07 13:00 UTC), comes before the reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.limit.AdmitSpend(throttle.State{}, noon, throttle.Spend{})
			c := cand(1, "plan")
			c.Deadline = tc.deadline
			e := admit.Explain(admit.ExplainInput{Ticket: c, Now: noon,
				Limits: map[string]admit.LimitState{"plan": {Limit: tc.limit, State: s}}})
			require.Equal(t, "allowance", e.WaitsFor)
			require.NotNil(t, e.Limits[0].Spent)
			require.Equal(t, int64(1), e.Limits[0].Spent.Used)
			if tc.refused == "" {
				require.Nil(t, e.Refused)
				require.Equal(t, utc(t, "2026-03-08T00:00:00Z"), e.Estimate, "admitted when the day resets")
				return
			}
			require.NotNil(t, e.Refused)
			require.True(t, e.Estimate.IsZero())
			require.Equal(t, tc.refused, e.Unknown)
		})
	}
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}

func withAllowances(t *testing.T, l throttle.Limit, specs ...string) throttle.Limit {
	t.Helper()
	for _, s := range specs {
		a, err := throttle.ParseAllowance(s)
		require.NoError(t, err)
		l.Allowances = append(l.Allowances, a)
	}
	require.NoError(t, l.Validate())
	return l
}
