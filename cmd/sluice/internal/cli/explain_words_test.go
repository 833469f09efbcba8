package cli_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// explain tells, in the words the dashboard shows too (package words): a holder that has run longer
// than every recent run, since when and for how long; a ticket nothing holds though tickets before
// it in its line wait for other limits; how a finished ticket finished; a ticket handed back to
// Temporal as which attempt. A ticket with no activity ID names its activity by its type.
func TestCLI_ExplainWords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := explainFixture{clock: &fakeClock{t: t0}, url: testdb.URL(t)}
	f.q = testdb.Engine(t, pgqueue.Options{Now: f.clock.Now})
	require.NoError(t, f.q.UpsertLimits(ctx, throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1},
		throttle.Limit{Key: "openai", MaxConcurrent: 10}, throttle.Limit{Key: "email", MaxConcurrent: 1}))
	enqueue := func(owner string, attempt int, deadline time.Time, keys ...string) int64 {
		t.Helper()
		tk, err := f.q.Enqueue(ctx, store.EnqueueParams{LimitKeys: keys, Owner: owner, Attempt: attempt, WorkflowID: "wf",
			ActivityType: "Call", Deadline: deadline})
		require.NoError(t, err)
		return tk.ID
	}
	claim := func(owner string, ttl time.Duration) []pgqueue.Ticket {
		t.Helper()
		_, err := f.q.RenewLease(ctx, owner, ttl)
		require.NoError(t, err)
		res, err := f.q.Claim(ctx, store.ClaimParams{Owner: owner})
		require.NoError(t, err)
		return res.Admitted
	}
	// Three 2-minute runs on tenant:acme; then one admitted at t0 with an hour's deadline runs on,
	// 40 minutes at the explanation.
	f.clock.Add(-6 * time.Minute)
	for range 3 {
		enqueue("w1", 1, time.Time{}, "tenant:acme")
		for _, tk := range claim("w1", 24*time.Hour) {
			f.clock.Add(2 * time.Minute)
			require.NoError(t, f.q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: -1, OutcomeKind: pgqueue.OutcomeCompleted}))
		}
	}
	require.Equal(t, t0, f.clock.Now())
	enqueue("w1", 1, t0.Add(time.Hour), "tenant:acme")
	require.Len(t, claim("w1", 24*time.Hour), 1)
	// Attempt 3 on email, handed back when its owner's lease lapsed; attempt 2, handed back and
	// delivered: returned.
	f.clock.Add(30 * time.Minute)
	finished := enqueue("w2", 3, time.Time{}, "email")
	require.Len(t, claim("w2", time.Minute), 1)
	f.clock.Add(2 * time.Minute)
	_, err := f.q.HandBack(ctx, store.HandBackParams{})
	require.NoError(t, err)
	returned := enqueue("w3", 2, time.Time{}, "email")
	require.Len(t, claim("w3", time.Minute), 1)
	f.clock.Add(2 * time.Minute)
	_, err = f.q.HandBack(ctx, store.HandBackParams{})
	require.NoError(t, err)
	require.NoError(t, f.q.Delivered(ctx, returned))
	// Two tickets of openai's line wait for tenant:acme; one after them needs only openai.
	f.clock.Add(6 * time.Minute)
	behind := enqueue("w1", 1, time.Time{}, "openai", "tenant:acme")
	enqueue("w1", 1, time.Time{}, "openai", "tenant:acme")
	free := enqueue("w1", 1, time.Time{}, "openai")
	require.Equal(t, t0.Add(40*time.Minute), f.clock.Now())

	for _, c := range []struct {
		name     string
		id       int64
		contains string
	}{
		{"explain-overdue", behind, "1 ticket holding it has been running since 12:00:00 UTC (40m0s), longer than any recent run, " +
			"so it is expected to end by its deadline at the latest"},
		{"explain-held-elsewhere", free, "nothing holds it: every limit has room, and the 2 tickets before it in openai wait for other " +
			"limits; the next claim admits it"},
		{"explain-finished", finished, ", handed back as a retryable failure (its owner stopped before running it to the end), admitted at "},
		{"explain-returned", returned, " as attempt 2: Temporal retries it only if its retry policy allows more than 2 attempts, " +
			"and the retry then takes this ticket's place in line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := f.run(t, "explain", itoa(c.id))
			require.Equal(t, cli.ExitOK, code, errOut)
			require.Contains(t, out, c.contains)
			require.Contains(t, out, ", activity Call (attempt ", "no activity ID: named by its type")
			exactGolden(t, c.name, out)
			t.Logf("sluice explain %d\n%s", c.id, out)
		})
	}
}
