package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// lockFair holds the fair-share row of (line, fairness key) until the returned function is called: an
// enqueue of a ticket with that fairness key waits meanwhile.
func lockFair(t *testing.T, q *store.Queue, line, fairnessKey string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := q.Pool().Begin(ctx)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{q.Schema(), "sluice_fair"}.Sanitize()+
		` WHERE line_key = $1 AND fairness_key = $2 FOR UPDATE`, line, fairnessKey)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	return release
}

func ticketParams(i int, fairnessKey string, keys ...string) store.EnqueueParams {
	return store.EnqueueParams{LimitKeys: keys, Cost: 10, Owner: "o", FairnessKey: fairnessKey,
		Namespace: "default", WorkflowID: fmt.Sprint("wf-", i), RunID: "run", ActivityID: "1", Attempt: 1}
}

// transactionOf returns the transaction that wrote each ticket (its row's xmin).
func transactionOf(ctx context.Context, t *testing.T, q *store.Queue, ids ...int64) map[int64]string {
	t.Helper()
	rows, err := q.Pool().Query(ctx, `SELECT id, xmin::text FROM `+pgx.Identifier{q.Schema(), "sluice_ticket"}.Sanitize()+
		` WHERE id = ANY($1)`, ids)
	require.NoError(t, err)
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var xmin string
		require.NoError(t, rows.Scan(&id, &xmin))
		out[id] = xmin
	}
	require.NoError(t, rows.Err())
	return out
}

func TestEnqueuer_GroupCommit(t *testing.T) {
	const calls = 40
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	e := newDispatcher(t, cfg).enqueuer
	require.NoError(t, e.Start(ctx))
	defer func() { require.NoError(t, e.Stop(ctx)) }()
	_, err := e.Write(ctx, ticketParams(-1, "t1", "k"))
	require.NoError(t, err)

	// The first call takes the loop into a statement that waits on the fair-share row; the others
	// arrive meanwhile and queue up behind it. One of them names a limit that does not exist.
	release := lockFair(t, cfg.Queue, "k", "t1")
	type result struct {
		i   int
		t   store.Ticket
		err error
	}
	results := make(chan result, calls)
	write := func(i int, p store.EnqueueParams) {
		tk, err := e.Write(ctx, p)
		results <- result{i, tk, err}
	}
	go write(0, ticketParams(0, "t1", "k"))
	waitForLockWaiter(ctx, t, cfg.Queue)
	const bad = 17
	for i := 1; i < calls; i++ {
		p := ticketParams(i, []string{"", "t1", "t2"}[i%3], "k")
		if i == bad {
			p.LimitKeys = []string{"k", "nope"}
		}
		go write(i, p)
	}
	require.Eventually(t, func() bool { return e.queued() == calls-1 }, testDeadline, time.Millisecond, "the rest are queued")
	release()

	var ids []int64
	byCall := map[int64]int{}
	for range calls {
		r := <-results
		if r.i == bad {
			require.ErrorIs(t, r.err, store.ErrUnknownLimit, "the bad ticket fails alone")
			continue
		}
		require.NoError(t, r.err, "call %d", r.i)
		require.Equal(t, fmt.Sprint("wf-", r.i), r.t.WorkflowID, "each call gets its own ticket")
		ids = append(ids, r.t.ID)
		byCall[r.t.ID] = r.i
	}
	tx := transactionOf(ctx, t, cfg.Queue, ids...)
	require.Len(t, tx, calls-1, "every answered ticket is durable")
	groups := map[string]int{}
	for id, x := range tx {
		if byCall[id] != 0 {
			groups[x]++
		}
	}
	require.Len(t, groups, 1, "the %d queued behind the first were written by one transaction", calls-2)
	for x, n := range groups {
		require.Equal(t, calls-2, n)
		require.NotEqual(t, x, tx[firstID(byCall)], "the first was written by its own")
	}
}

func firstID(byCall map[int64]int) int64 {
	for id, i := range byCall {
		if i == 0 {
			return id
		}
	}
	return 0
}

func TestEnqueuer_StopAnswersWhatItHolds(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	e := newDispatcher(t, cfg).enqueuer
	require.NoError(t, e.Start(ctx))
	_, err := e.Write(ctx, ticketParams(-1, "t1", "k"))
	require.NoError(t, err)
	release := lockFair(t, cfg.Queue, "k", "t1")
	errs := make(chan error, 3)
	write := func(i int) { _, err := e.Write(ctx, ticketParams(i, "t1", "k")); errs <- err }
	go write(0)
	waitForLockWaiter(ctx, t, cfg.Queue)
	go write(1)
	go write(2)
	require.Eventually(t, func() bool { return e.queued() == 2 }, testDeadline, time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(ctx) }()
	release() // the statement under way ends: cancelled by the stop, or committed just before it
	require.NoError(t, <-stopped)
	written := 0
	for range 3 {
		if err := <-errs; err == nil {
			written++
		}
	}
	require.LessOrEqual(t, written, 1, "only the statement under way at the stop can have committed")
	_, err = e.Write(ctx, ticketParams(3, "", "k"))
	require.ErrorIs(t, err, errEnqueuerStopped, "a stopped enqueuer writes nothing")
	var n int
	require.NoError(t, cfg.Queue.Pool().QueryRow(ctx, `SELECT count(*) FROM `+
		pgx.Identifier{cfg.Queue.Schema(), "sluice_ticket"}.Sanitize()).Scan(&n))
	require.Equal(t, 1+written, n, "a ticket answered with an error is not written; one answered without is")
}

// An enqueue whose line is empty and whose limit has room admits its ticket in the commit that
// writes it, and the run begins with no claim: no claimer runs here. A ticket the limit has no room
// for waits in line, queued, for a claim (another replica's, here) once the first completes.
func TestEnqueuer_AdmitsWhatHasRoom(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := newDispatcher(t, cfg)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	require.NoError(t, d.claimer.Stop(ctx))
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s never ran", what)
		}
	}
	ticketOf := func(wf string) store.Ticket {
		t.Helper()
		var id int64
		require.NoError(t, cfg.Queue.Pool().QueryRow(ctx, `SELECT id FROM `+pgx.Identifier{cfg.Queue.Schema(), "sluice_ticket"}.Sanitize()+
			` WHERE workflow_id = $1`, wf).Scan(&id))
		tk, err := cfg.Queue.Ticket(ctx, id)
		require.NoError(t, err)
		return tk
	}

	first, block, second := make(chan struct{}), make(chan struct{}), make(chan struct{})
	enqueue(t, d, "first", func(context.Context) (any, error) { close(first); <-block; return "done", nil })
	wait(first, "the ticket its own enqueue admitted")
	a := ticketOf("first")
	require.Equal(t, store.TicketStateRunning, a.State)
	require.Equal(t, d.deps.cfg.Owner, a.Owner)

	enqueue(t, d, "second", func(context.Context) (any, error) { close(second); return "done", nil })
	b := ticketOf("second")
	require.Equal(t, store.TicketStateQueued, b.State, "the limit is full: it waits in line")
	require.Equal(t, "concurrency", b.WaitReason)
	close(block)
	waitFor(t, ctx, "the first to complete", func() bool {
		_, err := cfg.Queue.Ticket(ctx, a.ID)
		return err != nil
	})
	res, err := cfg.Queue.Claim(ctx, store.ClaimParams{Owner: "another-replica"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	wait(second, "the ticket another replica admitted")
}
