package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// allowanceNow is the clock of the allowance tests: noon UTC, so that a day in UTC resets in 12
// hours and a day in Los Angeles in 20.
var allowanceNow = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// allowed is a schema whose tenants have allowances, on a clock that stands still at allowanceNow:
// llm, the provider's line (10 slots); plan:free with 0.50 USD and 50,000 tokens a day (the tokens'
// day in Los Angeles) and 100 requests in any 24 hours; plan:trial with 0.10 USD a day, refused when
// spent. The workflow free-1 (0.25 USD, 20,000 tokens) and trial-1 (0.10 USD) were admitted: the
// trial's dollars are spent, and trial-1 completed reporting all of them (so nothing in flight can give
// any back). trial-2 (0.05 USD) was refused for it; free-2 (0.30 USD, more than the
// 0.25 left) waits for the day's reset; trial-3 (0.05 USD) is queued and the next claim refuses it.
type allowed struct {
	q   *pgqueue.Queue
	ids map[string]int64 // by workflow ID
}

func parseAllowances(t *testing.T, specs ...string) throttle.Allowances {
	t.Helper()
	var as throttle.Allowances
	for _, s := range specs {
		a, err := throttle.ParseAllowance(s)
		require.NoError(t, err)
		as = append(as, a)
	}
	return as
}

func newAllowed(t *testing.T) allowed {
	t.Helper()
	ctx := context.Background()
	q := testdb.Engine(t, pgqueue.Options{Now: func() time.Time { return allowanceNow }})
	trial := parseAllowances(t, "usd=0.10/day")
	trial[0].OnSpent = throttle.OnSpentRefuse
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "llm", MaxConcurrent: 10},
		throttle.Limit{Key: "plan:free", Allowances: parseAllowances(t, "usd=0.50/day", "tokens=50000/day@America/Los_Angeles", "requests=100/24h")},
		throttle.Limit{Key: "plan:trial", Allowances: trial}))
	a := allowed{q: adminOf(t, q, pgqueue.Options{Now: func() time.Time { return allowanceNow }}), ids: map[string]int64{}}
	enqueue := func(wf, plan string, tokens, money int64) {
		tk, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"llm", plan}, Cost: tokens, CostMoney: money, Owner: "worker-a",
			Namespace: "default", WorkflowID: wf, ActivityID: "1", ActivityType: "Chat", Attempt: 1})
		require.NoError(t, err)
		a.ids[wf] = tk.ID
	}
	enqueue("free-1", "plan:free", 20_000, 250_000)
	enqueue("trial-1", "plan:trial", 1_000, 100_000)
	res, err := q.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: a.ids["trial-1"], ActualCost: 1_000, ActualMoney: 100_000,
		OutcomeKind: pgqueue.OutcomeCompleted}))
	enqueue("trial-2", "plan:trial", 1_000, 50_000)
	enqueue("free-2", "plan:free", 1_000, 300_000)
	res, err = q.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Empty(t, res.Admitted, "free-2 waits for the day's dollars")
	require.Len(t, res.Refused, 1)
	require.Equal(t, a.ids["trial-2"], res.Refused[0].ID, "the trial's allowance refuses when spent")
	enqueue("trial-3", "plan:trial", 1_000, 50_000)
	return a
}

func (a allowed) server(t *testing.T, opts dashboard.Options) string {
	t.Helper()
	d, err := dashboard.New(a.q, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(http.StripPrefix("/sluice", d))
	t.Cleanup(srv.Close)
	return srv.URL + "/sluice/"
}

// api/status carries each allowance of a key, under the names the page reads: its spec, what it used
// and what remains (money in micro-units), its window and when it resets, and what a ticket it has no
// room for does; a key without allowances has none in its JSON.
func TestDashboard_StatusAllowances(t *testing.T) {
	t.Parallel()
	a := newAllowed(t)
	base := a.server(t, dashboard.Options{})
	var raw struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	code, body := getAnswer(t, base+"api/status?key=llm&key=plan:free&key=plan:trial", &raw)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, raw.Keys, 3)
	require.NotContains(t, raw.Keys[0], "allowances", "llm has none: left out")
	require.JSONEq(t, `[
		{"allowance": {"meter": "money", "currency": "USD", "amount": 500000, "calendar": "day"}, "spec": "usd=0.50/day",
		 "used": 250000, "remaining": 250000, "window_start": "2026-03-02T00:00:00Z", "resets_at": "2026-03-03T00:00:00Z"},
		{"allowance": {"meter": "tokens", "amount": 50000, "calendar": "day", "zone": "America/Los_Angeles"},
		 "spec": "tokens=50000/day@America/Los_Angeles", "used": 20000, "remaining": 30000,
		 "window_start": "2026-03-02T08:00:00Z", "resets_at": "2026-03-03T08:00:00Z"},
		{"allowance": {"meter": "requests", "amount": 100, "rolling": 86400000000000}, "spec": "requests=100/24h",
		 "used": 1, "remaining": 99, "resets_at": "2026-03-03T13:00:00Z"}
	]`, string(raw.Keys[1]["allowances"]), "plan:free: 0.25 USD, 20,000 tokens and a request of free-1")
	require.JSONEq(t, `[
		{"allowance": {"meter": "money", "currency": "USD", "amount": 100000, "calendar": "day", "on_spent": "refuse"},
		 "spec": "usd=0.10/day", "used": 100000, "remaining": 0, "window_start": "2026-03-02T00:00:00Z", "resets_at": "2026-03-03T00:00:00Z"}
	]`, string(raw.Keys[2]["allowances"]), "plan:trial: spent by trial-1; the refused trial-2 counts nothing")

	var st dashboard.Status
	code, body = getAnswer(t, base+"api/status?key=plan:trial", &st)
	require.Equal(t, http.StatusOK, code, body)
	want, err := a.q.Status(context.Background(), "plan:trial")
	require.NoError(t, err)
	require.Equal(t, want[0].Allowances, st.Keys[0].Allowances, "pgqueue's allowances, through the JSON")
}

// api/explain says which allowance holds a queued ticket (its limit's spent) and that the next claim
// refuses one (refused); it gives every allowance of the ticket's limits with what the ticket needs
// of it, and why a claim refused a finished ticket.
func TestDashboard_ExplainAllowances(t *testing.T) {
	t.Parallel()
	a := newAllowed(t)
	base := a.server(t, dashboard.Options{})
	var ex dashboard.Explained
	code, body := getAnswer(t, base+"api/explain?workflow=free-2", &ex)
	require.Equal(t, http.StatusOK, code, body)
	x := ex.Tickets[0]
	require.Equal(t, "allowance", x.Explanation.WaitsFor)
	require.Equal(t, "plan:free", x.Explanation.Key)
	require.Nil(t, x.Explanation.Refused, "the free plan's allowances wait")
	w := x.Explanation.Limits[1]
	require.NotNil(t, w.Spent)
	require.Equal(t, "usd=0.50/day", w.Spent.Allowance.String())
	// free-1 is still running: all it reserved may come back (Refundable), and then free-2 would fit.
	require.Equal(t, throttle.Spent{Allowance: w.Spent.Allowance, Used: 250_000, Needs: 300_000, Refundable: 250_000, WindowStart: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		WindowEnd: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC), ResetAt: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)}, *w.Spent)
	require.NotContains(t, x.Allowances, "llm")
	uses := x.Allowances["plan:free"]
	require.Len(t, uses, 3)
	for i, want := range []struct {
		spec               string
		used, remain, need int64
	}{{"usd=0.50/day", 250_000, 250_000, 300_000}, {"tokens=50000/day@America/Los_Angeles", 20_000, 30_000, 1_000}, {"requests=100/24h", 1, 99, 1}} {
		require.Equal(t, want.spec, uses[i].Spec)
		require.Equal(t, want.used, uses[i].Used, want.spec)
		require.Equal(t, want.remain, uses[i].Remaining, want.spec)
		require.Equal(t, want.need, uses[i].Needs, want.spec)
	}
	require.Contains(t, body, `"needs":300000`, "the JSON names the page reads")
	require.Equal(t, "waits for allowance usd=0.50/day of plan:free: used 0.25 USD of 0.50 USD, needs 0.30 USD; resets 2026-03-03 00:00:00 UTC (in 12h0m0s)",
		x.Words.Holds)
	require.Equal(t, "usd=0.50/day: used 0.25 USD of 0.50 USD, needs 0.30 USD, resets 2026-03-03 00:00:00 UTC · "+
		"tokens=50000/day@America/Los_Angeles: used 20,000 tokens of 50,000 tokens, needs 1,000 tokens · "+
		"requests=100/24h: used 1 request of 100 requests, needs 1 request", x.Words.Limits[1].Figures)
	require.Contains(t, body, `"spent":{"allowance":{"meter":"money","currency":"USD","amount":500000,"calendar":"day"}`)

	ex = dashboard.Explained{}
	code, body = getAnswer(t, base+"api/explain?workflow=trial-3", &ex)
	require.Equal(t, http.StatusOK, code, body)
	x = ex.Tickets[0]
	require.NotNil(t, x.Explanation.Refused, "the trial's allowance refuses when spent")
	require.Equal(t, throttle.OnSpentRefuse, x.Explanation.Refused.Allowance.OnSpent)
	require.Equal(t, int64(50_000), x.Explanation.Refused.Needs)
	require.Contains(t, body, `"refused":{"allowance":{"meter":"money","currency":"USD","amount":100000,"calendar":"day","on_spent":"refuse"},"used":100000,"needs":50000`)
	require.Equal(t, int64(0), x.Allowances["plan:trial"][0].Remaining)
	require.Nil(t, x.Refusal, "queued: not refused yet")
	require.Equal(t, "it will be refused: allowance usd=0.10/day of plan:trial: used 0.10 USD of 0.10 USD, needs 0.05 USD; resets 2026-03-03 "+
		"00:00:00 UTC (in 12h0m0s); the next claim fails its activity (the allowance refuses when spent)", x.Words.Refused)
	require.Equal(t, "none: the next claim refuses it", x.Words.Expected)
	require.Equal(t, "usd=0.10/day: used 0.10 USD of 0.10 USD, needs 0.05 USD, resets 2026-03-03 00:00:00 UTC", x.Words.Limits[len(x.Words.Limits)-1].Figures)

	ex = dashboard.Explained{}
	code, body = getAnswer(t, base+"api/explain?workflow=trial-2", &ex)
	require.Equal(t, http.StatusOK, code, body)
	x = ex.Tickets[0]
	require.Equal(t, pgqueue.TicketStateFinished, x.Ticket.State)
	require.Equal(t, pgqueue.OutcomeRefused, x.Ticket.OutcomeKind)
	require.Equal(t, "allowance of plan:trial", x.Ticket.WaitReason)
	require.NotNil(t, x.Refusal)
	require.Equal(t, "sluice: limit plan:trial: allowance usd=0.10/day spent: used 0.10 USD of 0.10 USD, the call needs 0.05 USD; "+
		"resets at 2026-03-03T00:00:00Z (2026-03-03 00:00 UTC)", x.Refusal.Error())
	require.Contains(t, body, `"refusal":{"limit":"plan:trial","allowance":"usd=0.10/day","meter":"money","currency":"USD",`)
	require.Nil(t, x.Explanation)
	require.Empty(t, x.Allowances)
	require.Equal(t, "refused at 2026-03-02 12:00:00 UTC, never admitted: allowance usd=0.10/day of plan:trial was spent: used 0.10 USD of "+
		"0.10 USD, the call needed 0.05 USD; it resets at 2026-03-03 00:00:00 UTC; the refusal waits to be delivered to Temporal", x.Words.State)
}
