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

// EnqueueClaiming writes and admits in one transaction: a ticket whose line is empty and whose limits
// have room comes back running for its owner, and nobody is woken for it; a ticket left waiting
// (a full limit, a line another claimer holds, earlier tickets in line) stays queued and its line's
// claimers are woken at the commit, as after any enqueue.
func TestQueue_EnqueueClaiming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, clock := setup(t,
		throttle.Limit{Key: "api", MaxConcurrent: 2},
		throttle.Limit{Key: "tenant:a", MaxConcurrent: 1},
		throttle.Limit{Key: "other", MaxConcurrent: 5},
		throttle.Limit{Key: "plan", MaxConcurrent: 5, Allowances: throttle.Allowances{
			{Meter: throttle.MeterRequests, Amount: 1, Calendar: throttle.CalendarDay, OnSpent: throttle.OnSpentRefuse}}})
	next := listenRaw(t, q)
	own := func(keys ...string) store.EnqueueParams {
		return store.EnqueueParams{LimitKeys: keys, Owner: "me", ActivityID: strings.Join(keys, "+")}
	}
	// A marker: an enqueue that always notifies its line, so that what came before it is known to
	// have been sent or not (notifications arrive in commit order).
	marker := func() {
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"other"}, Owner: "someone", Priority: 1})
		require.Equal(t, "work|other", next())
	}

	// Room: admitted and running at once, with no notification.
	ts, errs, res, err := q.EnqueueClaiming(ctx, []store.EnqueueParams{own("api", "tenant:a")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Len(t, res.Admitted, 1)
	require.Equal(t, ts[0].ID, res.Admitted[0].ID)
	require.Equal(t, store.TicketStateRunning, res.Admitted[0].State)
	require.Equal(t, clock.clock.Now(), res.Admitted[0].AdmittedAt)
	got, err := q.Ticket(ctx, ts[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateRunning, got.State)
	marker()

	// The tenant is full: queued, with its wait reason, and the line's claimers are woken.
	ts, errs, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("api", "tenant:a")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Empty(t, res.Admitted)
	require.Equal(t, "work|api", next())
	got, err = q.Ticket(ctx, ts[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateQueued, got.State)
	require.Equal(t, "concurrency of tenant:a", got.WaitReason)
	waiting := ts[0]

	// Earlier tickets in line go first: the budget of one admits the ticket of another owner ahead,
	// a batch's own tickets wait behind it, and a ticket naming an unknown limit is refused alone.
	them := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"other"}, Owner: "them"})
	require.Equal(t, "work|other", next())
	ts, errs, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("other"), own("nope"), own("api")},
		store.ClaimParams{Max: 2, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrUnknownLimit)
	require.NoError(t, errs[2])
	states := map[int64]string{}
	for _, a := range res.Admitted {
		states[a.ID] = a.Owner + ":" + string(a.State)
	}
	// Lines in key order: "api" passes over the ticket its tenant holds and admits this batch's;
	// "other" then admits its head, "them"'s ticket (the marker's, at priority 1, is behind this
	// batch's), and the budget is spent.
	require.Len(t, res.Admitted, 2, "the budget: %v", states)
	require.Contains(t, states, ts[2].ID, "api admits this batch's ticket behind the one its tenant holds")
	require.Equal(t, "me:running", states[ts[2].ID])
	require.NotContains(t, states, waiting.ID)
	require.Equal(t, "them:admitted", states[them.ID], "another owner's ticket waits for its owner's take")
	// "them" is told, and "other", where this batch's ticket still waits, is woken.
	notes := []string{next(), next()}
	require.ElementsMatch(t, []string{"admitted|them", "work|other"}, notes)
	got, err = q.Ticket(ctx, ts[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateQueued, got.State)

	// A line another claimer holds is skipped, not waited for: the ticket stays queued, Busy says
	// why, and the line's claimers are woken.
	tx, err := q.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{q.Schema(), "sluice_limit"}.Sanitize()+` WHERE key = 'api' FOR NO KEY UPDATE`)
	require.NoError(t, err)
	ts, _, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{own("api")}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, res.Admitted)
	require.True(t, res.Busy)
	require.Equal(t, "work|api", next())
	got, err = q.Ticket(ctx, ts[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateQueued, got.State)

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
	_, errs, res, err = q.EnqueueClaiming(ctx, []store.EnqueueParams{{LimitKeys: []string{"api"}}}, store.ClaimParams{Max: 1, Owner: "me"})
	require.NoError(t, err)
	require.ErrorContains(t, errs[0], "EnqueueParams.Owner")
	require.Empty(t, res.Admitted)
	requireHealthy(t, q)
}
