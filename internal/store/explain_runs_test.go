package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// runFor admits ticket tk (the next claim must admit it alone), lets d pass and completes it.
func runFor(t *testing.T, q *store.Queue, b *testBundle, tk store.Ticket, d time.Duration) {
	t.Helper()
	require.Equal(t, []int64{tk.ID}, ids(claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted))
	b.clock.Add(d)
	require.NoError(t, q.Complete(context.Background(), store.CompleteParams{TicketID: tk.ID, ActualCost: -1,
		OutcomeKind: store.OutcomeCompleted}))
}

// An idle spell does not stretch the run time: a key with cap 2 ran 500 ms runs, idled, and got a
// batch. The estimate is from the runs' own lengths (Little's law over a window with the idle spell
// in it implied 1.4 s, and minutes after 20 idle minutes).
func TestQueue_ExplainAfterAnIdleSpell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 2})
	for range 6 {
		runFor(t, q, b, enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}}), 500*time.Millisecond)
	}
	for _, idle := range []time.Duration{5 * time.Second, 20 * time.Minute} {
		b.clock.Add(idle)
		now := b.clock.Now()
		var batch []store.Ticket
		for range 10 {
			batch = append(batch, enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}}))
		}
		admitted := claim(t, q, store.ClaimParams{Owner: "owner-1", Max: 2}).Admitted
		require.Len(t, admitted, 2)
		te, err := q.Explain(ctx, batch[9].ID)
		require.NoError(t, err)
		// Two run now; eight wait, two at a time, 500 ms each: the tenth goes in after four rounds.
		require.Equal(t, now.Add(2*time.Second), te.Explanation.Estimate, "after %v idle", idle)
		for _, a := range admitted {
			require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: a.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}))
		}
		for _, tk := range batch[2:] {
			require.NoError(t, q.Cancel(ctx, tk.ID))
		}
	}
}

// Tickets ahead in the line that a full tenant holds back keep the ticket's place but are not
// waited for; a holder past every recent run is expected by its deadline at the latest.
func TestQueue_ExplainAheadHeldElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 10}, throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1},
		throttle.Limit{Key: "tenant:b", MaxConcurrent: 1})
	runFor(t, q, b, enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}}), time.Second)
	long := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Deadline: b.clock.Now().Add(time.Hour)})
	require.Len(t, claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted, 1)
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}})
	mine := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:b"}})
	b.clock.Add(time.Minute)

	te, err := q.Explain(ctx, mine.ID)
	require.NoError(t, err)
	e := te.Explanation
	require.Equal(t, 3, e.Place, "third in openai's line")
	require.Equal(t, 0, e.Limits[0].Ahead, "both ahead wait for tenant:acme")
	require.Equal(t, 2, e.Limits[0].HeldElsewhere)
	require.Equal(t, throttle.WaitNothing, e.WaitsFor)
	require.Equal(t, b.clock.Now(), e.Estimate, "the next claim admits it")

	// One of acme's behind the long run: overdue (a minute, against 1 s), so by its deadline.
	acme := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"tenant:acme"}})
	te, err = q.Explain(ctx, acme.ID)
	require.NoError(t, err)
	e = te.Explanation
	require.Equal(t, 1, e.Limits[0].Overdue)
	// The long run ends by its deadline at the latest (any moment at the earliest); the two ahead
	// then run a second each.
	require.Equal(t, long.Deadline.Add(2*time.Second), e.Estimate)
	require.Equal(t, b.clock.Now().Add(2*time.Second), e.EstimateLow)
	require.Equal(t, e.Estimate, e.EstimateHigh)
}

// Explain reads the share of the output reservations the runs used apart from the share in all: runs
// that reserve 500 input and 1,000 output tokens and report 500 and 600 give 400 output tokens back
// each, which the estimate counts on.
func TestQueue_ExplainUsedShareOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "anthropic", OutputTokensPerMinute: 6_000, OutputTokenBurst: 1_000})
	p := store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 1_500, OutputCost: 1_000}
	complete := func(tk store.Ticket) {
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: 1_100, ActualOutput: 600,
			OutcomeKind: store.OutcomeCompleted}))
	}
	for range 3 {
		b.clock.Add(time.Minute) // the bucket full again
		tk := enqueue(t, q, p)
		require.Equal(t, []int64{tk.ID}, ids(claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted))
		b.clock.Add(time.Second)
		complete(tk)
	}
	b.clock.Add(time.Minute)
	now := b.clock.Now()
	first := enqueue(t, q, p)
	enqueue(t, q, p)
	last := enqueue(t, q, p)
	require.Equal(t, []int64{first.ID}, ids(claim(t, q, store.ClaimParams{Owner: "owner-1"}).Admitted))

	te, err := q.Explain(ctx, last.ID)
	require.NoError(t, err)
	// Of the four admissions, three gave 400 output tokens back and one runs: 2,800 of 4,000 output
	// tokens used, 70% (4,800 of 6,000 in all, 80%). The first releases at +1 s (runs take 1 s) and
	// gives 300 back: with 100 refilled, the second waits for 600 more, to +7 s; it gives 300 back
	// at +8 s, and the last waits 6 s more.
	require.Equal(t, now.Add(14*time.Second), te.Explanation.Estimate)
}
