package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// admitted writes n tickets on limit "k" and admits them.
func admitted(t *testing.T, q *store.Queue, n int) []store.Ticket {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		_, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 10, Owner: "o",
			Namespace: "default", WorkflowID: fmt.Sprint("wf-", i), RunID: "run", ActivityID: "1", Attempt: 1})
		require.NoError(t, err)
	}
	res, err := q.Claim(ctx, store.ClaimParams{Max: n})
	require.NoError(t, err)
	require.Len(t, res.Admitted, n)
	return res.Admitted
}

// lockTicket holds ticket id's row in a transaction of its own until the returned function is
// called: a completion of it, which locks it, waits meanwhile.
func lockTicket(t *testing.T, q *store.Queue, id int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := q.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{q.Schema(), "sluice_ticket"}.Sanitize()+` WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	return release
}

// waitForLockWaiter waits until a statement on q's schema waits for a lock: the completer's (or
// enqueuer's) statement has reached the row the test holds. It polls pg_stat_activity: Postgres
// signals no lock wait, and the statement, blocked inside the service, can signal nothing.
func waitForLockWaiter(ctx context.Context, t *testing.T, q *store.Queue) {
	t.Helper()
	for {
		var waiting bool
		err := q.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0)`, q.Schema()).Scan(&waiting)
		require.NoError(t, err)
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no completion reached the locked row")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestCompleter_GroupCommit(t *testing.T) {
	const runs = 40
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: runs, TokensPerMinute: 60_000})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := newDispatcher(t, cfg)
	c := d.completer
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	ts := admitted(t, cfg.Queue, runs)

	// The first completion takes the loop into a statement that waits on its ticket's row; the
	// others finish meanwhile and queue up behind it.
	release := lockTicket(t, cfg.Queue, ts[0].ID)
	results := make(chan bool, runs)
	record := func(tk store.Ticket) {
		tk.OutcomeKind, tk.Outcome = store.OutcomeCompleted, []byte(fmt.Sprint(tk.ID))
		results <- c.Record(ctx, tk, runReport{actual: 4}, false)
	}
	go record(ts[0])
	waitForLockWaiter(ctx, t, cfg.Queue)
	for _, tk := range ts[1:] {
		go record(tk)
	}
	require.Eventually(t, func() bool { return c.queued() == runs-1 }, testDeadline, time.Millisecond, "the rest are queued")
	release()
	for range runs {
		require.True(t, <-results)
	}

	var transactions = map[time.Time]int{} // tickets completed together share the transaction's instant
	for _, tk := range ts {
		got, err := cfg.Queue.Ticket(ctx, tk.ID)
		require.NoError(t, err)
		require.Equal(t, store.TicketStateFinished, got.State)
		require.Equal(t, []byte(fmt.Sprint(tk.ID)), got.Outcome, "each ticket has its own outcome")
		require.Equal(t, int64(4), got.ActualCost)
		transactions[got.FinishedAt]++
	}
	require.Len(t, transactions, 2, "one transaction for the first, one for the %d queued behind it", runs-1)
	st, err := cfg.Queue.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, st.State.InflightCount)
	require.Zero(t, st.State.InflightTokens)
}

func TestCompleter_StopAnswersWhatItHolds(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	before := goleak.IgnoreCurrent()
	c := newDispatcher(t, cfg).completer
	require.NoError(t, c.Start(ctx))
	ts := admitted(t, cfg.Queue, 3)
	release := lockTicket(t, cfg.Queue, ts[0].ID)
	results := make(chan bool, len(ts))
	record := func(tk store.Ticket) {
		tk.OutcomeKind = store.OutcomeCompleted
		results <- c.Record(ctx, tk, runReport{actual: -1}, false)
	}
	go record(ts[0])
	waitForLockWaiter(ctx, t, cfg.Queue)
	for _, tk := range ts[1:] {
		go record(tk)
	}
	require.Eventually(t, func() bool { return c.queued() == len(ts)-1 }, testDeadline, time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctx) }()
	release() // the transaction under way ends: cancelled by the stop, or committed just before it
	require.NoError(t, <-stopped)
	recorded := 0
	for range ts {
		if <-results {
			recorded++
		}
	}
	require.LessOrEqual(t, recorded, 1, "only the transaction under way at the stop can have committed")
	require.False(t, c.Record(ctx, ts[0], runReport{actual: -1}, false), "a stopped completer records nothing")
	finished := 0
	for i, tk := range ts {
		got, err := cfg.Queue.Ticket(ctx, tk.ID)
		require.NoError(t, err)
		if got.State == store.TicketStateFinished {
			require.Zero(t, i, "only the first was in the transaction under way")
			finished++
		}
	}
	require.Equal(t, recorded, finished, "a completion answered true is recorded, one answered false is not")
	goleak.VerifyNone(t, append(ignoreShared, before)...)
}
