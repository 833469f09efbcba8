package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// TestCLI_Allowances sets allowances with limits set, reads their use in limits get and status, and
// explains a ticket held by a spent allowance and one that will be refused, on a fake clock at noon
// UTC (04:00 in Los Angeles).
func TestCLI_Allowances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	require.NoError(t, f.q.UpsertLimits(ctx, throttle.Limit{Key: "llm", MaxConcurrent: 10}))

	code, out, errOut := f.run(t, "limits", "set", "plan:free", "--create", "--allowance", "tokens=50000/day@America/Los_Angeles",
		"--allowance", "usd=0.50/day@America/Los_Angeles", "--on-spent", "refuse")
	require.Equal(t, cli.ExitOK, code, errOut)
	exactGolden(t, "limits-set-allowance", out)
	code, _, errOut = f.run(t, "limits", "set", "plan:pro", "--create", "--allowance", "requests=1/day")
	require.Equal(t, cli.ExitOK, code, errOut)
	l, err := f.q.Limit(ctx, "plan:free")
	require.NoError(t, err)
	require.Len(t, l.Allowances, 2)
	require.Equal(t, throttle.OnSpentRefuse, l.Allowances[1].OnSpent)

	enqueue := func(p store.EnqueueParams) int64 {
		t.Helper()
		p.Owner, p.Namespace, p.Attempt, p.ActivityType = "worker-a", "default", 1, "Ask"
		tk, err := f.q.Enqueue(ctx, p)
		require.NoError(t, err)
		return tk.ID
	}
	first := enqueue(store.EnqueueParams{LimitKeys: []string{"llm", "plan:free"}, Cost: 40_000, OutputCost: 10_000, CostMoney: 300_000,
		WorkflowID: "chat-1", ActivityID: "1"})
	enqueue(store.EnqueueParams{LimitKeys: []string{"llm", "plan:pro"}, Cost: 100, WorkflowID: "pro-1", ActivityID: "1"})
	res, err := f.q.Claim(ctx, store.ClaimParams{Owner: "worker-a"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)
	require.NoError(t, f.q.Complete(ctx, store.CompleteParams{TicketID: first, ActualCost: 30_000, ActualOutput: 8_000,
		ActualMoney: 250_000, OutcomeKind: pgqueue.OutcomeCompleted}))
	// Held: pro's one request a day is spent; free has 20,000 tokens and $0.25 left, and this one needs
	// $0.30: refused at the next claim.
	waiting := enqueue(store.EnqueueParams{LimitKeys: []string{"llm", "plan:pro"}, Cost: 100, WorkflowID: "pro-2", ActivityID: "1",
		Deadline: t0.Add(24 * time.Hour)})
	refused := enqueue(store.EnqueueParams{LimitKeys: []string{"llm", "plan:free"}, Cost: 5_000, CostMoney: 300_000,
		WorkflowID: "chat-2", ActivityID: "1"})
	f.clock.Add(10 * time.Second)

	for _, c := range []struct {
		name     string
		args     []string
		contains string
	}{
		{"status-allowance", []string{"status", "plan:free", "plan:pro"}, "30,000 tokens  20,000 tokens  2026-01-02 08:00:00 UTC (in 19h59m50s)"},
		{"explain-allowance-wait", []string{"explain", itoa(waiting)},
			"waits for allowance requests=1/day of plan:pro: used 1 request of 1 request, needs 1 request; resets 2026-01-02 00:00:00 UTC (in 11h59m50s)"},
		{"explain-allowance-refused", []string{"explain", itoa(refused)},
			"waits for allowance usd=0.50/day@America/Los_Angeles of plan:free: used 0.25 USD of 0.50 USD, needs 0.30 USD; resets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := f.run(t, c.args...)
			require.Equal(t, cli.ExitOK, code, errOut)
			require.Contains(t, out, c.contains)
			exactGolden(t, c.name, out)
			t.Logf("sluice %s\n%s", strings.Join(c.args, " "), out)
		})
	}

	// The next claim refuses it; explain then tells the refusal.
	res, err = f.q.Claim(ctx, store.ClaimParams{Owner: "worker-a"})
	require.NoError(t, err)
	require.Len(t, res.Refused, 1)
	code, out, errOut = f.run(t, "explain", itoa(refused))
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "refused at 2026-01-01 12:00:10 UTC, never admitted: allowance usd=0.50/day@America/Los_Angeles of plan:free was spent: "+
		"used 0.25 USD of 0.50 USD, the call needed 0.30 USD; it resets at 2026-01-02 08:00:00 UTC (2026-01-02 00:00 PST); the refusal waits")

	code, out, errOut = f.run(t, "limits", "set", "plan:free", "--allowance", "none", "--max-concurrent", "2")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NotContains(t, out, "ALLOWANCE", "none removes them all")
}

func TestCLI_AllowanceBadInput(t *testing.T) {
	t.Parallel()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "k", "--create", "--allowance", "tokens=5/fortnight"},
			`invalid value "tokens=5/fortnight" for flag -allowance: allowance "tokens=5/fortnight": `},
		{[]string{"limits", "set", "k", "--create", "--allowance", "usd=abc/day"}, `invalid value "usd=abc/day" for flag -allowance: allowance "usd=abc/day"`},
		{[]string{"limits", "set", "k", "--create", "--allowance", "tokens=5/day@Mars/Olympus"}, `Zone must be an IANA time zone, got "Mars/Olympus"`},
		{[]string{"limits", "set", "k", "--create", "--on-spent", "maybe"}, `invalid value "maybe" for flag -on-spent: must be wait or refuse, got "maybe"`},
		{[]string{"limits", "set", "k", "--create", "--allowance", "tokens=5/day", "--allowance", "tokens=9/day"},
			`has the meter and period of an earlier one (tokens/day): keep one`},
	} {
		var errOut bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"--schema", f.q.Schema()}, c.args...), cli.Env{Stdout: &bytes.Buffer{},
			Stderr: &errOut, Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return f.url
				}
				return ""
			}, Now: f.clock.Now})
		require.Equal(t, cli.ExitUsage, code, "%v: %s", c.args, errOut.String())
		require.Contains(t, errOut.String(), c.want, "%v", c.args)
		t.Logf("sluice %s\n%s", strings.Join(c.args, " "), errOut.String())
	}
	_, err := f.q.Limit(context.Background(), "k")
	require.ErrorIs(t, err, pgqueue.ErrUnknownLimit, "nothing was created")
}

// An allowance that waits refuses a ticket whose deadline comes before its reset: explain says so
// with the deadline, before the claim that refuses it and after, from the stored refusal.
func TestCLI_ExplainDeadlineBeforeTheReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	code, _, errOut := f.run(t, "limits", "set", "plan:wait", "--create", "--allowance", "requests=1/day")
	require.Equal(t, cli.ExitOK, code, errOut)
	enqueue := func(p store.EnqueueParams) int64 {
		t.Helper()
		p.LimitKeys, p.Owner, p.Namespace, p.Attempt, p.ActivityType, p.ActivityID = []string{"plan:wait"}, "worker-a", "default", 1, "Ask", "1"
		tk, err := f.q.Enqueue(ctx, p)
		require.NoError(t, err)
		return tk.ID
	}
	first := enqueue(store.EnqueueParams{WorkflowID: "ask-1"})
	res, err := f.q.Claim(ctx, store.ClaimParams{Owner: "worker-a"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	require.NoError(t, f.q.Complete(ctx, store.CompleteParams{TicketID: first, OutcomeKind: pgqueue.OutcomeCompleted}))
	// The day's one request is spent until midnight UTC; this one must be done by 13:00.
	late := enqueue(store.EnqueueParams{WorkflowID: "ask-2", Deadline: t0.Add(time.Hour)})

	code, out, errOut := f.run(t, "explain", itoa(late))
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "it will be refused: allowance requests=1/day of plan:wait: used 1 request of 1 request, needs 1 request; "+
		"resets 2026-01-02 00:00:00 UTC (in 12h0m0s); the next claim fails its activity (its deadline, 13:00:00 UTC, comes before the reset)\n")
	t.Logf("before the claim:\n%s", out)

	res, err = f.q.Claim(ctx, store.ClaimParams{Owner: "worker-a"})
	require.NoError(t, err)
	require.Len(t, res.Refused, 1)
	code, out, errOut = f.run(t, "explain", itoa(late))
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "refused at 2026-01-01 12:00:00 UTC, never admitted: allowance requests=1/day of plan:wait was spent: used 1 request of "+
		"1 request, the call needed 1 request; it resets at 2026-01-02 00:00:00 UTC, after the call's deadline, 2026-01-01 13:00:00 UTC; "+
		"the refusal waits to be delivered to Temporal")
	t.Logf("after the claim:\n%s", out)
}

// limits set keeps what each allowance does when spent unless --on-spent is given: an allowance given
// again (the same meter and period) keeps its own, a new one refuses when all the key's refuse and
// otherwise waits.
func TestCLI_AllowanceKeepsOnSpent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	onSpent := func(key string) map[string]throttle.OnSpent {
		t.Helper()
		l, err := f.q.Limit(ctx, key)
		require.NoError(t, err)
		out := map[string]throttle.OnSpent{}
		for _, a := range l.Allowances {
			out[a.String()] = a.OnSpent
		}
		return out
	}
	set := func(args ...string) string {
		t.Helper()
		code, out, errOut := f.run(t, append([]string{"limits", "set"}, args...)...)
		require.Equal(t, cli.ExitOK, code, errOut)
		return out
	}
	refuse, wait := throttle.OnSpentRefuse, throttle.OnSpentWait

	set("plan:free", "--create", "--allowance", "tokens=50000/day@America/Los_Angeles", "--allowance", "usd=0.50/day@America/Los_Angeles",
		"--on-spent", "refuse")
	out := set("plan:free", "--allowance", "tokens=70000/day@America/Los_Angeles", "--allowance", "requests=100/hour")
	require.Contains(t, out, "plan:free  tokens=70000/day@America/Los_Angeles  refuse", "resized, it still refuses")
	require.Equal(t, map[string]throttle.OnSpent{"tokens=70000/day@America/Los_Angeles": refuse, "requests=100/hour": refuse}, onSpent("plan:free"),
		"a new allowance of a key whose allowances all refuse refuses too")

	set("plan:free", "--allowance", "tokens=70000/day@America/Los_Angeles", "--allowance", "requests=100/hour", "--on-spent", "wait")
	require.Equal(t, map[string]throttle.OnSpent{"tokens=70000/day@America/Los_Angeles": wait, "requests=100/hour": wait}, onSpent("plan:free"),
		"--on-spent given sets them all")

	set("plan:mixed", "--create", "--allowance", "tokens=10/day", "--on-spent", "refuse")
	set("plan:mixed", "--allowance", "tokens=10/day", "--allowance", "requests=5/day")
	set("plan:mixed", "--allowance", "tokens=20/day", "--allowance", "requests=5/day", "--allowance", "usd=1/day")
	require.Equal(t, map[string]throttle.OnSpent{"tokens=20/day": refuse, "requests=5/day": refuse, "usd=1.00/day": refuse}, onSpent("plan:mixed"))
	_, err := f.q.ChangeLimit(ctx, "plan:mixed", throttle.LimitChange{Allowances: &throttle.Allowances{
		{Meter: throttle.MeterTokens, Amount: 20, Calendar: throttle.CalendarDay, OnSpent: wait},
		{Meter: throttle.MeterRequests, Amount: 5, Calendar: throttle.CalendarDay}}}, false)
	require.NoError(t, err, "one given with its policy keeps it, the other its own")
	set("plan:mixed", "--allowance", "tokens=20/day", "--allowance", "requests=5/day", "--allowance", "output_tokens=9/day")
	require.Equal(t, map[string]throttle.OnSpent{"tokens=20/day": wait, "requests=5/day": refuse, "output_tokens=9/day": ""}, onSpent("plan:mixed"),
		"a new allowance of a key whose allowances differ waits, the default")

	code, out, errOut := f.run(t, "limits", "history", "plan:free")
	require.Equal(t, cli.ExitOK, code, errOut)
	t.Logf("sluice limits history plan:free\n%s", out)
}

// --on-spent sets what a key's allowances do: on a key left with none it would change nothing, so it
// is refused as bad input, naming the value, with nothing printed on stdout and no row changed.
func TestCLI_OnSpentWithoutAllowances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	for _, args := range [][]string{{"plan:none", "--create", "--max-concurrent", "3"},
		{"plan:free", "--create", "--allowance", "tokens=100/day", "--on-spent", "refuse"}} {
		code, _, errOut := f.run(t, append([]string{"limits", "set"}, args...)...)
		require.Equal(t, cli.ExitOK, code, errOut)
	}
	before := map[string]throttle.Limit{}
	for _, k := range []string{"plan:none", "plan:free"} {
		l, err := f.q.Limit(ctx, k)
		require.NoError(t, err)
		before[k] = l
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan:none", "--on-spent", "refuse"}, `limit "plan:none": --on-spent "refuse" would apply to no allowance: the limit is left with none (give --allowance with it)`},
		{[]string{"plan:none", "--on-spent", "wait", "--max-concurrent", "4"}, `--on-spent "wait" would apply to no allowance`},
		{[]string{"plan:free", "--allowance", "none", "--on-spent", "wait"}, `limit "plan:free": --on-spent "wait" would apply to no allowance`},
		{[]string{"plan:new", "--create", "--on-spent", "refuse"}, `limit "plan:new": --on-spent "refuse" would apply to no allowance`},
	} {
		code, out, errOut := f.run(t, append([]string{"limits", "set"}, c.args...)...)
		require.Equal(t, cli.ExitUsage, code, "%v: %s", c.args, errOut)
		require.Empty(t, out, "%v", c.args)
		require.Contains(t, errOut, c.want, "%v", c.args)
		t.Logf("sluice limits set %s\n%s", strings.Join(c.args, " "), errOut)
	}
	for k, want := range before {
		l, err := f.q.Limit(ctx, k)
		require.NoError(t, err)
		require.Equal(t, want, l, "%s is unchanged", k)
		h, err := f.q.LimitHistory(ctx, k, time.Time{}, 10)
		require.NoError(t, err)
		require.Len(t, h, 1, "%s: only its creation is recorded", k)
	}
	_, err := f.q.Limit(ctx, "plan:new")
	require.ErrorIs(t, err, pgqueue.ErrUnknownLimit, "nothing was created")
}

// --allowance none removes every allowance: given with another --allowance, in either order, it is
// refused with one message naming both, nothing printed on stdout and nothing changed.
func TestCLI_AllowanceNoneWithOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	code, _, errOut := f.run(t, "limits", "set", "plan:free", "--create", "--max-concurrent", "2", "--allowance", "requests=9/day")
	require.Equal(t, cli.ExitOK, code, errOut)
	before, err := f.q.Limit(ctx, "plan:free")
	require.NoError(t, err)
	const want = `limits set plan:free: --allowance none removes every allowance, so it cannot be given with another ` +
		`(tokens=5/day): give none alone, or the allowances to keep`
	var msgs []string
	for _, args := range [][]string{
		{"--allowance", "tokens=5/day", "--allowance", "none"},
		{"--allowance", "none", "--allowance", "tokens=5/day"},
		{"--allowance", "none", "--max-concurrent", "3", "--allowance", "tokens=5/day", "--allowance", "none"},
	} {
		code, out, errOut := f.run(t, append([]string{"limits", "set", "plan:free"}, args...)...)
		require.Equal(t, cli.ExitUsage, code, "%v: %s", args, errOut)
		require.Empty(t, out, "%v", args)
		require.Equal(t, "sluice: "+want+"\n", errOut, "%v", args)
		msgs = append(msgs, errOut)
	}
	t.Logf("sluice limits set plan:free --allowance tokens=5/day --allowance none\n%s", msgs[0])
	after, err := f.q.Limit(ctx, "plan:free")
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing changed")

	code, out, errOut := f.run(t, "limits", "set", "plan:free", "--allowance", "none", "--allowance", "none")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NotContains(t, out, "ALLOWANCE", "none twice is none")
}
