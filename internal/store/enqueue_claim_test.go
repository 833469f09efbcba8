package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// listenRaw listens on Sluice's notification channel on a connection of its own, and returns a
// function that reads the next notification's payload (after the schema), waiting up to a minute (an
// outer bound: every call expects one).
func listenRaw(t *testing.T, q *store.Queue) func() string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `LISTEN `+store.NotifyChannel)
	require.NoError(t, err)
	return func() string {
		for {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			if p, ok := strings.CutPrefix(n.Payload, q.Schema()+"|"); ok {
				return p
			}
		}
	}
}

// EnqueueClaiming writes and admits in one transaction: a ticket whose line is empty and whose
// limits have room comes back running for its owner, and nobody is woken for it; a ticket left
// waiting (a full limit, a line another claimer holds, a line with a backlog, which it does not
// claim) stays queued and its line's claimers are woken at the commit, as after any enqueue.
func TestQueue_EnqueueClaiming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, clock := setup(t,
		throttle.Limit{Key: "api", MaxConcurrent: 2},
		throttle.Limit{Key: "tenant:a", MaxConcurrent: 1},
		throttle.Limit{Key: "other", MaxConcurrent: 5},
		throttle.Limit{Key: "held", MaxConcurrent: 5},
		throttle.Limit{Key: "mark", MaxConcurrent: 5},
		throttle.Limit{Key: "plan", MaxConcurrent: 5, Allowances: throttle.Allowances{
			{Meter: throttle.MeterRequests, Amount: 1, Calendar: throttle.CalendarDay, OnSpent: throttle.OnSpentRefuse}}})
	next := listenRaw(t, q)
	own := func(keys ...string) store.EnqueueParams {
		return store.EnqueueParams{LimitKeys: keys, Owner: "me", ActivityID: strings.Join(keys, "+")}
	}
	state := func(id int64) store.Ticket {
		t.Helper()
		got, err := q.Ticket(ctx, id)
		require.NoError(t, err)
		return got
	}
	// A marker: an enqueue that always notifies its line, so that what came before it is known to
	// have been sent or not (notifications arrive in commit order).
	marker := func() {
		t.Helper()
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"mark"}, Owner: "someone"})
		require.Equal(t, "work|mark", next())
	}

	// Room: admitted and running at once, with no notification.
	ts, errs, res, err := q.EnqueueClaiming(ctx, []store.EnqueueParams{own("api", "tenant:a")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Len(t, res.Admitted, 1)
	require.Equal(t, ts[0].ID, res.Admitted[0].ID)
	require.Equal(t, store.TicketStateRunning, res.Admitted[0].State)
	require.Equal(t, clock.clock.Now(), res.Admitted[0].AdmittedAt)
	require.Equal(t, store.TicketStateRunning, state(ts[0].ID).State)
	marker()

	// The tenant is full: queued, with its wait reason, and the line's claimers are woken.
	ts, errs, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("api", "tenant:a")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Empty(t, res.Admitted)
	require.Equal(t, "work|api", next())
	waiting := state(ts[0].ID)
	require.Equal(t, store.TicketStateQueued, waiting.State)
	require.Equal(t, "concurrency of tenant:a", waiting.WaitReason)

	// A line with a backlog ("api": the ticket its tenant holds) is not claimed, though its limit
	// has room: the ticket waits for the claimers, whom the commit wakes. An empty line ("other")
	// admits, and a ticket naming an unknown limit is refused alone.
	ts, errs, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("other"), own("nope"), own("api")},
		store.ClaimParams{Max: 3, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrUnknownLimit)
	require.NoError(t, errs[2])
	require.Equal(t, []int64{ts[0].ID}, ids(res.Admitted))
	require.Equal(t, "work|api", next())
	backlog := state(ts[2].ID)
	require.Equal(t, store.TicketStateQueued, backlog.State)
	require.Empty(t, backlog.WaitReason, "no claim looked at it")
	got := claim(t, q, store.ClaimParams{Max: 5})
	require.Contains(t, ids(got.Admitted), backlog.ID, "the claimers admit it, past the ticket its tenant holds")
	require.NotContains(t, ids(got.Admitted), waiting.ID)
	require.ElementsMatch(t, []string{"admitted|me", "admitted|someone"}, []string{next(), next()}, "the claim tells the owners")

	// A line another claimer holds is skipped, not waited for: the ticket stays queued, and the
	// line's claimers are woken.
	tx, err := q.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{q.Schema(), "sluice_limit"}.Sanitize()+` WHERE key = 'held' FOR NO KEY UPDATE`)
	require.NoError(t, err)
	ts, _, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("held")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, res.Admitted)
	require.Equal(t, "work|held", next())
	require.Equal(t, store.TicketStateQueued, state(ts[0].ID).State)

	// A spent allowance that refuses: the ticket is finished with its refusal in the same commit.
	_, _, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("plan")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	ts, _, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("plan")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.Empty(t, res.Admitted)
	require.Len(t, res.Refused, 1)
	require.Equal(t, ts[0].ID, res.Refused[0].ID)
	require.Equal(t, store.OutcomeRefused, res.Refused[0].OutcomeKind)
	marker()

	// Bad input: the claim's bounds, and a ticket's own fault, named.
	_, _, _, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("api")}, store.ClaimParams{Max: -1})
	require.ErrorContains(t, err, "ClaimParams.Max")
	_, _, _, err = q.EnqueueClaiming(ctx, make([]store.EnqueueParams, store.MaxEnqueueBatch+1), store.ClaimParams{Max: 1, Owner: "me"})
	require.ErrorContains(t, err, "EnqueueClaiming takes at most 10000 tickets, got 10001")
	_, errs, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{{LimitKeys: []string{"api"}}}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.ErrorContains(t, errs[0], "EnqueueParams.Owner")
	require.Empty(t, res.Admitted)
	requireHealthy(t, q)
}
