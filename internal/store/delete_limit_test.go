package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// countRows returns how many rows of table (in q's schema) match where, with key as $1.
func countRows(t *testing.T, q *store.Queue, table, where, key string) int {
	t.Helper()
	var n int
	require.NoError(t, q.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM `+pgx.Identifier{q.Schema(), table}.Sanitize()+` WHERE `+where, key).Scan(&n))
	return n
}

func TestQueue_DeleteLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RefusedWhileUnfinishedTicketsNameIt", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "line", MaxConcurrent: 5}, throttle.Limit{Key: "k", MaxConcurrent: 5})
		// k is not the ticket's line, only another of its limits: it is in use all the same.
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"line", "k"}})
		err := q.DeleteLimit(ctx, "k")
		require.ErrorIs(t, err, store.ErrLimitInUse)
		require.EqualError(t, err, `sluice: limit in use: "k" is named by 1 unfinished tickets (queued, admitted or running): delete it once they finish`)
		_, err = q.Limit(ctx, "k")
		require.NoError(t, err, "nothing changed")

		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
		require.ErrorIs(t, q.DeleteLimit(ctx, "k"), store.ErrLimitInUse, "admitted")
		_, err = q.TakeAdmitted(ctx, "owner-1", 10)
		require.NoError(t, err)
		require.ErrorIs(t, q.DeleteLimit(ctx, "k"), store.ErrLimitInUse, "running")
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}))
		// Finished, its outcome not yet delivered: it no longer needs the limit.
		require.NoError(t, q.DeleteLimit(ctx, "k"))
		requireHealthy(t, q)
	})

	t.Run("UnknownKey", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		err := q.DeleteLimit(ctx, "nope")
		require.ErrorIs(t, err, store.ErrUnknownLimit)
		require.EqualError(t, err, `sluice: unknown limit: "nope"`)
		require.ErrorContains(t, q.DeleteLimit(ctx, ""), "sluice: delete limit: ")
		require.NoError(t, q.DeleteLimit(ctx, "k"))
		require.ErrorIs(t, q.DeleteLimit(ctx, "k"), store.ErrUnknownLimit, "deleted already")
	})

	t.Run("EnqueueAfterDeleteIsUnknownUntilRecreated", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1, RequestsPerSecond: 1, Burst: 1})
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, FairnessKey: "tenant"})
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: 10, OutcomeKind: store.OutcomeCompleted}))
		require.NoError(t, q.DeleteLimit(ctx, "k"))

		_, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "o"})
		require.ErrorIs(t, err, store.ErrUnknownLimit)
		_, err = q.Limit(ctx, "k")
		require.ErrorIs(t, err, store.ErrUnknownLimit)

		// Created again, it starts afresh: its bucket is full (the old one was spent) and nothing is
		// in flight.
		require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 1, RequestsPerSecond: 1, Burst: 1}))
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, FairnessKey: "tenant"})
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1, "a fresh bucket at the same instant")
		requireHealthy(t, q)
	})

	t.Run("RemovesWhatIsKeptUnderTheKey", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5}, throttle.Limit{Key: "other", MaxConcurrent: 5})
		var done []store.CompleteParams
		for _, keys := range [][]string{{"k"}, {"other"}} {
			tk := enqueue(t, q, store.EnqueueParams{LimitKeys: keys, FairnessKey: "tenant", Cost: 100})
			done = append(done, store.CompleteParams{TicketID: tk.ID, ActualCost: 40, OutcomeKind: store.OutcomeCompleted})
		}
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 2)
		_, err := q.CompleteMany(ctx, done)
		require.NoError(t, err)
		// A ticket handed back for a retry keeps a place in k's line.
		_, err = q.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{q.Schema(), "sluice_ticket"}.Sanitize()+
			` (state, line_key, limit_keys, seq, owner, finished_at) VALUES ('returned', 'k', ARRAY['k'], 0, 'o', now())`)
		require.NoError(t, err)
		kept := map[string]string{ // table: the condition naming a key
			"sluice_fair": "line_key = $1", "sluice_release": "key = $1", "sluice_usage": "key = $1",
			"sluice_run_time": "key = $1", "sluice_ticket": "line_key = $1 AND state = 'returned'",
		}
		for table, where := range kept {
			require.Positive(t, countRows(t, q, table, where, "k"), table)
		}
		require.NoError(t, q.DeleteLimit(ctx, "k"))
		for table, where := range kept {
			require.Zero(t, countRows(t, q, table, where, "k"), table)
		}
		for _, table := range []string{"sluice_fair", "sluice_release", "sluice_usage", "sluice_run_time"} {
			require.Positive(t, countRows(t, q, table, kept[table], "other"), "another key's %s rows are kept", table)
		}
		require.Equal(t, 2, countRows(t, q, "sluice_ticket", "state = 'finished' AND $1 <> ''", "x"),
			"finished tickets wait for the delivery of their outcomes")
		requireHealthy(t, q)
	})

	t.Run("HistoryRecordsTheDeletionAndWho", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 3, RequestsPerSecond: 2})
		b.clock.Add(time.Minute)
		require.NoError(t, q.DeleteLimit(store.WithChangedBy(ctx, "alice@laptop (sluice limits delete)"), "k"))
		hist, err := q.LimitHistory(ctx, "k", time.Time{}, 10)
		require.NoError(t, err, "a deleted key keeps its history")
		require.Len(t, hist, 2)
		last := hist[1]
		require.Equal(t, store.ChangeDeleted, last.Kind)
		require.Equal(t, "alice@laptop (sluice limits delete)", last.Who)
		require.Equal(t, t0.Add(time.Minute), last.At)
		require.Nil(t, last.After)
		require.Equal(t, &throttle.Limit{Key: "k", MaxConcurrent: 3, RequestsPerSecond: 2, Burst: 2}, last.Before)

		require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 1}))
		require.NoError(t, q.DeleteLimit(ctx, "k"))
		hist, err = q.LimitHistory(ctx, "k", time.Time{}, 10)
		require.NoError(t, err)
		require.Len(t, hist, 4)
		require.Equal(t, store.ChangeCreated, hist[2].Kind)
		require.Equal(t, store.ProgramChangedBy(), hist[3].Who, "without WithChangedBy: the program")
	})

	t.Run("VerifyReportsTicketsNamingAMissingKey", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "line", MaxConcurrent: 5}, throttle.Limit{Key: "k", MaxConcurrent: 5})
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"line", "k"}})
		// A DELETE in SQL checks nothing.
		_, err := q.Pool().Exec(ctx, `DELETE FROM `+pgx.Identifier{q.Schema(), "sluice_limit"}.Sanitize()+` WHERE key = 'k'`)
		require.NoError(t, err)
		problems, err := q.Verify(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{`1 unfinished tickets name limit "k", which does not exist`}, problems)
	})

	t.Run("TxRollsBack", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, q.DeleteLimitTx(ctx, tx, "k"))
		require.NoError(t, tx.Rollback(ctx))
		_, err = q.Limit(ctx, "k")
		require.NoError(t, err, "the deletion went with its transaction")
	})
}

// waitForLockWait returns once a session of q's pool waits for a lock in a statement containing
// what, or fails when done yields first (the call that should have waited returned).
func waitForLockWait(t *testing.T, q *store.Queue, what string, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // an outer bound only
	defer cancel()
	for {
		var waiting bool
		require.NoError(t, q.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND query LIKE '%' || $2 || '%')`,
			q.Schema(), what).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("returned without waiting for the lock: %v", err)
		case <-ctx.Done():
			t.Fatal("never waited for the lock")
		case <-time.After(10 * time.Millisecond): // poll pg_stat_activity
		}
	}
}

// An enqueue not yet committed holds the rows it names: a deletion waits for it and then counts its
// ticket. A deletion not yet committed holds the row: an enqueue waits for it and then finds no limit.
// Either way no ticket is left naming a deleted key.
func TestQueue_DeleteLimitAgainstEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DeleteWaitsForAnEnqueueInFlight", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1}, throttle.Limit{Key: "other", MaxConcurrent: 1})
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = q.EnqueueTx(ctx, tx, store.EnqueueParams{LimitKeys: []string{"other", "k"}, Owner: "o"})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- q.DeleteLimit(ctx, "k") }()
		waitForLockWait(t, q, "FOR UPDATE", done)
		require.NoError(t, tx.Commit(ctx))
		require.ErrorIs(t, <-done, store.ErrLimitInUse)
		requireHealthy(t, q)
	})

	t.Run("EnqueueWaitsForADeleteInFlight", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1}, throttle.Limit{Key: "other", MaxConcurrent: 1})
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, q.DeleteLimitTx(ctx, tx, "k"))
		done := make(chan error, 1)
		go func() {
			_, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"other", "k"}, Owner: "o"})
			done <- err
		}()
		waitForLockWait(t, q, "FOR KEY SHARE", done)
		require.NoError(t, tx.Commit(ctx))
		require.ErrorIs(t, <-done, store.ErrUnknownLimit)
		requireHealthy(t, q)
	})

	t.Run("ClaimsAndEnqueuesDoNotWaitForEachOther", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = q.EnqueueTx(ctx, tx, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "o"})
		require.NoError(t, err)
		// Were the claim's lock FOR UPDATE, it would skip the line the enqueue holds.
		res := claim(t, q, store.ClaimParams{})
		require.Len(t, res.Admitted, 1)
		require.False(t, res.Busy)
		// And the enqueue's lock does not wait for a claim's.
		claimer, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = claimer.Rollback(ctx) }()
		_, err = claimer.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{q.Schema(), "sluice_limit"}.Sanitize()+` WHERE key = 'k' FOR NO KEY UPDATE`)
		require.NoError(t, err)
		_, err = q.EnqueueTx(ctx, tx, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "o"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	})
}
