package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is the clock of the fixture's queue and of the command: tests move it, never sleep.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// explainFixture is a schema on a fake clock with a ticket held in each way explain tells apart. Two
// runs on tenant:acme took 20 s each, ending at t0. At t0 the workflow "summarize" enqueues two tickets on openai (room for 20) and tenant:acme (room for
// 1); the first is admitted and runs. At t0+10s anthropic (6,000 output tokens a minute) admits a
// ticket of 5,000 output tokens, leaving 1,000 to the next, which needs 4,000; gemini is paused for
// 2 minutes with a ticket waiting; three tickets wait on email (2 a second, a burst of 1); and one
// waits on batch, whose one slot has been held for two hours.
type explainFixture struct {
	q     *store.Queue
	clock *fakeClock
	url   string
	// running, tenant, output, paused, ahead and unknown are the tickets explained.
	running, tenant, output, paused, ahead, unknown int64
}

func newExplainFixture(t *testing.T) explainFixture {
	t.Helper()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	require.NoError(t, f.q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 20}, throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1},
		throttle.Limit{Key: "anthropic", OutputTokensPerMinute: 6_000}, throttle.Limit{Key: "gemini", RequestsPerSecond: 5},
		throttle.Limit{Key: "email", RequestsPerSecond: 2, Burst: 1}, throttle.Limit{Key: "batch", MaxConcurrent: 1}))
	enqueue := func(p store.EnqueueParams) int64 {
		t.Helper()
		p.Owner, p.Namespace, p.Attempt = "worker-a", "default", 1
		tk, err := f.q.Enqueue(ctx, p)
		require.NoError(t, err)
		return tk.ID
	}
	claim := func(n int) {
		t.Helper()
		res, err := f.q.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
		require.NoError(t, err)
		require.Len(t, res.Admitted, n)
	}
	// batch's one slot is held by a ticket admitted two hours before t0: no run on batch ended in the
	// last hour to time one, so when it ends is not known.
	f.clock.Add(-2 * time.Hour)
	enqueue(store.EnqueueParams{LimitKeys: []string{"batch"}, WorkflowID: "nightly", ActivityID: "1", ActivityType: "Export"})
	claim(1)
	// Two runs on tenant:acme took 20 s each, ending at t0: how long acme's runs take. Their outcomes
	// are delivered, so they are gone from the tables of tickets.
	f.clock.Add(2*time.Hour - 40*time.Second)
	for _, act := range []string{"1", "2"} {
		id := enqueue(store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, WorkflowID: "earlier", ActivityID: act})
		claim(1)
		f.clock.Add(20 * time.Second)
		require.NoError(t, f.q.Complete(ctx, store.CompleteParams{TicketID: id, ActualCost: -1, OutcomeKind: pgqueue.OutcomeCompleted}))
		ds, err := f.q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		for _, d := range ds {
			require.NoError(t, f.q.Delivered(ctx, d.ID))
		}
	}
	f.running = enqueue(store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Cost: 1_000, WorkflowID: "summarize",
		ActivityID: "1", ActivityType: "Summarize"})
	f.tenant = enqueue(store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Cost: 40_000, OutputCost: 2_000,
		WorkflowID: "summarize", ActivityID: "2", ActivityType: "Summarize", Deadline: t0.Add(15 * time.Second)})
	claim(1) // its owner's claim: the ticket runs at once

	f.clock.Add(10 * time.Second)
	enqueue(store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 5_500, OutputCost: 5_000, WorkflowID: "draft-1", ActivityType: "Draft"})
	f.output = enqueue(store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 4_500, OutputCost: 4_000, WorkflowID: "draft-2",
		ActivityID: "7", ActivityType: "Draft"})
	claim(1)
	require.NoError(t, f.q.Pause(ctx, "gemini", f.clock.Now().Add(2*time.Minute)))
	f.paused = enqueue(store.EnqueueParams{LimitKeys: []string{"gemini"}, WorkflowID: "translate", ActivityID: "1", ActivityType: "Translate"})
	f.unknown = enqueue(store.EnqueueParams{LimitKeys: []string{"batch"}, WorkflowID: "nightly", ActivityID: "2", ActivityType: "Export"})
	for i := range 3 {
		f.ahead = enqueue(store.EnqueueParams{LimitKeys: []string{"email"}, WorkflowID: "notify", ActivityID: string(rune('1' + i)),
			ActivityType: "Send"})
	}
	return f
}

// run runs the command on the fixture's schema and clock.
func (f explainFixture) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), append([]string{"--schema", f.q.Schema()}, args...), cli.Env{Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return f.url
			}
			return ""
		}, Now: f.clock.Now})
	return code, out.String(), errOut.String()
}

// exactGolden compares got with testdata/name.golden as it is: on the fake clock, nothing varies.
func exactGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/sluice/internal/cli -update to write it")
	require.Equal(t, string(want), got)
}

// explain prints why a ticket waits in the words of its binding limit (the tenant, not the provider
// with room; the output tokens with their figures; the pause), and when it is expected to run.
func TestCLI_Explain(t *testing.T) {
	t.Parallel()
	f := newExplainFixture(t)
	for _, c := range []struct {
		name     string
		args     []string
		contains string
	}{
		{"explain-tenant", []string{"explain", itoa(f.tenant)}, "waits for concurrency of tenant:acme (1/1 in flight)"},
		{"explain-output", []string{"explain", itoa(f.output)}, "waits for output tokens of anthropic: needs 4,000, has 1,000, refills 100/s"},
		{"explain-paused", []string{"explain", itoa(f.paused)}, "waits for the pause of gemini: paused until 12:02:10 UTC (in 2m0s)"},
		{"explain-running", []string{"explain", itoa(f.running)}, "admitted at 2026-01-01 12:00:00 UTC after waiting 0s; running"},
		{"explain-ahead", []string{"explain", itoa(f.ahead)}, "waits behind 2 tickets ahead in email"},
		{"explain-unknown", []string{"explain", itoa(f.unknown)}, "expected admission: not known: batch: waits for a running ticket to finish"},
		{"explain-workflow", []string{"explain", "--workflow", "summarize"}, "expected admission: in 10s (at 12:00:20 UTC)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := f.run(t, c.args...)
			require.Equal(t, cli.ExitOK, code, errOut)
			require.Contains(t, out, c.contains)
			exactGolden(t, c.name, out)
			t.Logf("sluice %s\n%s", strings.Join(c.args, " "), out)
		})
	}

	t.Run("ByWorkflowAndActivity", func(t *testing.T) {
		_, byID, _ := f.run(t, "explain", itoa(f.tenant))
		for _, args := range [][]string{
			{"explain", "--workflow", "summarize", "--activity", "2"},
			{"explain", "--workflow", "summarize", "--activity", "2", "--namespace", "default"},
			{"explain", "--workflow", "summarize", "--max", "1"},
		} {
			code, out, errOut := f.run(t, args...)
			require.Equal(t, cli.ExitOK, code, errOut)
			require.True(t, strings.HasPrefix(out, byID), "%v: the newest ticket of the workflow, explained as by its ID:\n%s", args, out)
		}
		_, out, _ := f.run(t, "explain", "--workflow", "summarize", "--max", "1")
		require.Contains(t, out, "more of the workflow's tickets are not shown: narrow with --activity, or raise --max (now 1)")
		_, out, _ = f.run(t, "explain", "--workflow", "summarize")
		require.Less(t, strings.Index(out, "ticket "+itoa(f.tenant)+","), strings.Index(out, "ticket "+itoa(f.running)+","), "newest first")
		require.NotContains(t, out, "more of the workflow's")
	})

	t.Run("Tickets", func(t *testing.T) {
		// The tenant's list holds the ticket its cap holds, though the ticket waits in openai's line.
		code, out, errOut := f.run(t, "tickets", "tenant:acme")
		require.Equal(t, cli.ExitOK, code, errOut)
		exactGolden(t, "tickets-tenant", out)
		code, out, errOut = f.run(t, "tickets", "anthropic")
		require.Equal(t, cli.ExitOK, code, errOut)
		var line []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "draft-2") {
				line = strings.Fields(l)
			}
		}
		require.Equal(t, []string{itoa(f.output), "queued", "1", "draft-2", "Draft", "1", "0s", "500", "4000", "output", "tokens", "of", "anthropic", "0", "none"}, line)
	})

	t.Run("JSON", func(t *testing.T) {
		ctx := context.Background()
		code, out, errOut := f.run(t, "--json", "explain", itoa(f.tenant))
		require.Equal(t, cli.ExitOK, code, errOut)
		var got []pgqueue.TicketExplanation
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		want, err := f.q.Explain(ctx, f.tenant)
		require.NoError(t, err)
		want.Ticket.TaskToken, want.Ticket.Outcome, want.Ticket.TraceContext = nil, nil, ""
		want.Ticket.ActualCost, want.Ticket.ActualMoney = 0, 0 // no usage reported: null in the JSON, not -1
		require.Equal(t, []pgqueue.TicketExplanation{want}, got)
		require.Contains(t, out, `"actual_cost":null`)
		require.Equal(t, "tenant:acme", got[0].Explanation.Key)

		var rows []struct {
			WaitedSeconds     float64  `json:"waited_s"`
			ExpectedInSeconds *float64 `json:"expected_in_s"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rows))
		require.InDelta(t, 10, rows[0].WaitedSeconds, 1e-9)
		require.NotNil(t, rows[0].ExpectedInSeconds)
		require.InDelta(t, 10, *rows[0].ExpectedInSeconds, 1e-9)

		code, out, errOut = f.run(t, "--json", "explain", "--workflow", "summarize")
		require.Equal(t, cli.ExitOK, code, errOut)
		got = nil
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Len(t, got, 2)
		require.Equal(t, []int64{f.tenant, f.running}, []int64{got[0].Ticket.ID, got[1].Ticket.ID})
		require.Nil(t, got[1].Explanation, "a running ticket has none")
		require.NotContains(t, out, "expected_in_s\":null")
		require.Equal(t, 1, strings.Count(out, "expected_in_s"), "only the queued ticket's")
	})
}

// --watch refreshes the explanation until interrupted, one line of JSON a refresh.
func TestCLI_ExplainWatch(t *testing.T) {
	t.Parallel()
	f := newExplainFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watchCtx, stop := context.WithCancel(ctx)
	out := &frames{n: 2, cancel: stop}
	code := cli.Run(watchCtx, []string{"--database", f.url, "--schema", f.q.Schema(), "explain", itoa(f.tenant), "--watch", "100ms", "--json"},
		cli.Env{Stdout: out, Stderr: os.Stderr, Getenv: func(string) string { return "" }, Now: f.clock.Now})
	require.Equal(t, cli.ExitOK, code)
	require.NoError(t, ctx.Err(), "the watch ended at the interrupt, not the deadline")
	lines := strings.Split(strings.TrimSpace(out.buf.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	for _, l := range lines {
		var got []pgqueue.TicketExplanation
		require.NoError(t, json.Unmarshal([]byte(l), &got))
		require.Equal(t, f.tenant, got[0].Ticket.ID)
	}
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// Every bad input to explain is refused with a message naming it, and an unknown ticket or workflow
// with the not-found code.
func TestCLI_ExplainBadInput(t *testing.T) {
	t.Parallel()
	f := newExplainFixture(t)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"explain"}, cli.ExitUsage, "explain takes a TICKET_ID or --workflow ID"},
		{[]string{"explain", "abc"}, cli.ExitUsage, `TICKET_ID must be a ticket's ID, a positive integer (as sluice tickets lists them), got "abc"`},
		{[]string{"explain", "0"}, cli.ExitUsage, `TICKET_ID must be a ticket's ID, a positive integer (as sluice tickets lists them), got "0"`},
		{[]string{"explain", "-3"}, cli.ExitUsage, `TICKET_ID must be a ticket's ID, a positive integer (as sluice tickets lists them), got "-3"`},
		{[]string{"explain", "--", "-3"}, cli.ExitUsage, `got "-3"`},
		{[]string{"explain", "1.5"}, cli.ExitUsage, `got "1.5"`},
		{[]string{"explain", "99999999999999999999"}, cli.ExitUsage, `got "99999999999999999999"`},
		{[]string{"explain", "1", "2"}, cli.ExitUsage, `explain takes one TICKET_ID, got 2: ["1" "2"]`},
		{[]string{"explain", "999"}, cli.ExitNotFound, "no ticket 999 (a ticket is gone once its outcome is delivered to Temporal)"},
		{[]string{"explain", "1", "--workflow", "summarize"}, cli.ExitUsage, `give a TICKET_ID or --workflow, not both (got "1" and --workflow "summarize")`},
		{[]string{"explain", "--activity", "2"}, cli.ExitUsage, "--activity goes with --workflow, which is not given"},
		{[]string{"explain", "--namespace", "default"}, cli.ExitUsage, "--namespace goes with --workflow, which is not given"},
		{[]string{"explain", "1", "--activity", "2"}, cli.ExitUsage, "--activity goes with --workflow, which is not given"},
		{[]string{"explain", "1", "--max", "3"}, cli.ExitUsage, "--max goes with --workflow, which is not given"},
		{[]string{"explain", "1", "--max", "-3"}, cli.ExitUsage, `invalid value "-3" for flag -max: must be a whole number from 1 to 2147483647, got "-3"`},
		{[]string{"explain", "--workflow", ""}, cli.ExitUsage, `--workflow must not be blank, got ""`},
		{[]string{"explain", "--workflow", "summarize", "--activity", " "}, cli.ExitUsage, `--activity must not be blank, got " "`},
		{[]string{"explain", "--workflow", "summarize", "--max", "0"}, cli.ExitUsage, `invalid value "0" for flag -max: must be a whole number from 1 to 2147483647, got "0"`},
		{[]string{"explain", "--workflow", "nope"}, cli.ExitNotFound, `no tickets of workflow "nope"`},
		{[]string{"explain", "--workflow", "summarize", "--activity", "9"}, cli.ExitNotFound, `no tickets of workflow "summarize", activity "9"`},
		{[]string{"explain", "--workflow", "summarize", "--namespace", "prod"}, cli.ExitNotFound, `no tickets of workflow "summarize" in namespace "prod"`},
		{[]string{"explain", "1", "--watch", "1ms"}, cli.ExitUsage, "--watch must be at least 100ms, got 1ms"},
		{[]string{"--json", "explain", "-3"}, cli.ExitUsage, `{"error":"TICKET_ID must be a ticket's ID`},
	} {
		code, out, errOut := f.run(t, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg, "%v", c.args)
		require.Empty(t, out, "%v", c.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %q", c.args, errOut)
		t.Logf("sluice %s -> %d: %s", strings.Join(c.args, " "), code, strings.TrimSpace(errOut))
	}
}
