package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// pruneRace is a schema for a Prune test that interleaves transactions by Postgres' own lock waits:
// a queue per role, each on a pool of one connection named for it, so that the test can tell from
// pg_stat_activity when the role's statement waits on a lock.
type pruneRace struct {
	pool   *pgxpool.Pool // for setup and reads
	schema string
}

func newPruneRace(t *testing.T) *pruneRace {
	t.Helper()
	pool := testdb.Pool(t)
	return &pruneRace{pool: pool, schema: testdb.Schema(t, pool)}
}

// queue returns a queue on the schema over a pool of one connection whose application_name is the
// schema's name and role's, for waitingOnLock.
func (r *pruneRace) queue(t *testing.T, role string) *store.Queue {
	t.Helper()
	cfg := testdb.PoolConfig(t)
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.ConnConfig.RuntimeParams["application_name"] = r.schema + "-" + role
	q, err := store.New(testdb.PoolWith(t, cfg), store.Options{Schema: r.schema})
	require.NoError(t, err)
	return q
}

// exec runs sql on the schema ({s} its name) outside any test transaction.
func (r *pruneRace) exec(t *testing.T, ctx context.Context, sql string, args ...any) {
	t.Helper()
	_, err := r.pool.Exec(ctx, r.s(sql), args...)
	require.NoError(t, err)
}

func (r *pruneRace) s(sql string) string {
	return strings.ReplaceAll(sql, "{s}", r.schema)
}

// awaitLockWait returns once the backend of role's queue waits on a heavyweight lock (a row's, here),
// or once done is closed: the statement ended without waiting. It reports which. The wait is an
// event; ctx is only the outer bound.
func (r *pruneRace) awaitLockWait(t *testing.T, ctx context.Context, role string, done <-chan struct{}) bool {
	t.Helper()
	for {
		var waiting bool
		require.NoError(t, r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Lock')`, r.schema+"-"+role).Scan(&waiting))
		if waiting {
			return true
		}
		select {
		case <-done:
			return false
		case <-ctx.Done():
			t.Fatalf("%s neither waited on a lock nor ended: %v", role, ctx.Err())
		case <-time.After(5 * time.Millisecond): // the poll's period, not a margin
		}
	}
}

// TestQueue_PruneDeadlock is bug 4: Prune deleted sluice_fair rows in scan order while an enqueue
// batch upserts them in key order, and one of the two failed with 40P01 (deadlock_detected). The
// interleaving, built from lock waits: a line's fairness rows a < b lie b first on disk; a blocker
// holds a; an enqueue of a and b waits on a; Prune (when it waits at all) has taken b and waits on a;
// the blocker commits. Before the fix the enqueue then took a and waited on b, and Postgres broke the
// cycle by failing one of them. Now Prune never waits on a row another transaction holds.
func TestQueue_PruneDeadlock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // an outer bound only
	defer cancel()
	r := newPruneRace(t)
	q, err := store.New(r.pool, store.Options{Schema: r.schema})
	require.NoError(t, err)
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 10}))
	// Both finish tags behind the line's virtual time: Prune wants both rows. b is written first, so a
	// scan of the table meets it first.
	r.exec(t, ctx, `UPDATE {s}.sluice_limit SET vtime = 100 WHERE key = 'k'`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_fair (line_key, fairness_key, finish) VALUES ('k', 'b', 1)`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_fair (line_key, fairness_key, finish) VALUES ('k', 'a', 1)`)
	var onDisk []string
	require.NoError(t, r.pool.QueryRow(ctx, r.s(`SELECT array_agg(fairness_key ORDER BY ctid) FROM {s}.sluice_fair`)).Scan(&onDisk))
	require.Equal(t, []string{"b", "a"}, onDisk, "b lies first on disk")

	blocker, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(context.WithoutCancel(ctx)) }()
	_, err = blocker.Exec(ctx, r.s(`SELECT 1 FROM {s}.sluice_fair WHERE line_key = 'k' AND fairness_key = 'a' FOR UPDATE`))
	require.NoError(t, err)

	enqueued, enqueueErr := make(chan struct{}), error(nil)
	eq := r.queue(t, "enqueue")
	go func() {
		defer close(enqueued)
		_, enqueueErr = eq.EnqueueMany(ctx, []store.EnqueueParams{
			{LimitKeys: []string{"k"}, FairnessKey: "a", Owner: "o"},
			{LimitKeys: []string{"k"}, FairnessKey: "b", Owner: "o"},
		})
	}()
	require.True(t, r.awaitLockWait(t, ctx, "enqueue", enqueued), "the enqueue waits on a, which the blocker holds")

	pruned, pruneErr := make(chan struct{}), error(nil)
	pq := r.queue(t, "prune")
	go func() {
		defer close(pruned)
		_, pruneErr = pq.Prune(ctx, store.PruneParams{})
	}()
	pruneWaited := r.awaitLockWait(t, ctx, "prune", pruned)
	t.Logf("prune waited on a lock: %v", pruneWaited)

	require.NoError(t, blocker.Commit(ctx))
	<-enqueued
	<-pruned
	requireNoDeadlock(t, "enqueue", enqueueErr)
	requireNoDeadlock(t, "prune", pruneErr)
	require.NoError(t, enqueueErr)
	require.NoError(t, pruneErr)
	require.False(t, pruneWaited, "prune waited on a row another transaction held")

	// The enqueue's tags stand: both rows are ahead of the line's virtual time.
	var ahead int
	require.NoError(t, r.pool.QueryRow(ctx, r.s(`SELECT count(*) FROM {s}.sluice_fair f JOIN {s}.sluice_limit l
		ON l.key = f.line_key WHERE f.finish > l.vtime`)).Scan(&ahead))
	require.Equal(t, 2, ahead)
	requireHealthy(t, q)
}

func requireNoDeadlock(t *testing.T, who string, err error) {
	t.Helper()
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		require.Failf(t, "deadlock", "%s failed with 40P01 (deadlock_detected): %v", who, err)
	}
}

// TestQueue_PruneSkipsLockedRows checks every statement of Prune for bug 4's hazard: a prunable row of
// each table it deletes from is held by another transaction, and Prune must neither wait on it nor
// delete it, and still delete the other prunable rows.
func TestQueue_PruneSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // an outer bound only
	defer cancel()
	r := newPruneRace(t)
	q, err := store.New(r.pool, store.Options{Schema: r.schema})
	require.NoError(t, err)
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 10}))
	// Two prunable rows in each table: the first of each held, the second free.
	for range 2 {
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "gone"})
		_, err := q.HandBack(ctx, store.HandBackParams{})
		require.NoError(t, err)
		require.NoError(t, q.Delivered(ctx, tk.ID))
	}
	r.exec(t, ctx, `UPDATE {s}.sluice_ticket SET finished_at = now() - interval '2 hours' WHERE state = 'returned'`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_owner (id, lease_expires_at) VALUES ('o1', now() - interval '2 hours'),
		('o2', now() - interval '2 hours')`)
	r.exec(t, ctx, `UPDATE {s}.sluice_limit SET vtime = 100 WHERE key = 'k'`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_fair (line_key, fairness_key, finish) VALUES ('k', 'a', 1), ('k', 'b', 1)`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_usage (key, second, requests, tokens) VALUES
		('k', date_trunc('second', now()) - interval '2 hours', 1, 1), ('k', date_trunc('second', now()) - interval '3 hours', 1, 1)`)
	r.exec(t, ctx, `DELETE FROM {s}.sluice_limit_change`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_limit_change (key, at, kind, who) VALUES ('k', now() - interval '100 days', 'created', 't'),
		('k', now() - interval '101 days', 'created', 't')`)
	r.exec(t, ctx, `INSERT INTO {s}.sluice_allowance_release (key, admitted_at, reserved_input, reserved_output, reserved_money,
		actual_input, actual_output, actual_money) VALUES ('k', now(), 1, 1, 1, 1, 1, 1), ('k', now() - interval '1 second', 1, 1, 1, 1, 1, 1)`)

	held := map[string]string{ // each table's held row, and the query that reads whether it is there
		"sluice_ticket":            `SELECT 1 FROM {s}.sluice_ticket WHERE id = (SELECT min(id) FROM {s}.sluice_ticket)`,
		"sluice_owner":             `SELECT 1 FROM {s}.sluice_owner WHERE id = 'o1'`,
		"sluice_fair":              `SELECT 1 FROM {s}.sluice_fair WHERE fairness_key = 'b'`,
		"sluice_usage":             `SELECT 1 FROM {s}.sluice_usage WHERE second = (SELECT max(second) FROM {s}.sluice_usage)`,
		"sluice_limit_change":      `SELECT 1 FROM {s}.sluice_limit_change WHERE id = (SELECT min(id) FROM {s}.sluice_limit_change)`,
		"sluice_allowance_release": `SELECT 1 FROM {s}.sluice_allowance_release WHERE admitted_at = (SELECT max(admitted_at) FROM {s}.sluice_allowance_release)`,
	}
	blocker, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(context.WithoutCancel(ctx)) }()
	for table, sql := range held {
		tag, err := blocker.Exec(ctx, r.s(sql+` FOR UPDATE`))
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), table)
	}

	var (
		pruned   = make(chan struct{})
		n        int64
		pruneErr error
	)
	pq := r.queue(t, "prune")
	go func() {
		defer close(pruned)
		n, pruneErr = pq.Prune(ctx, store.PruneParams{})
	}()
	waited := r.awaitLockWait(t, ctx, "prune", pruned)
	require.NoError(t, blocker.Rollback(ctx)) // lets a waiting prune go on, so that the test ends
	<-pruned
	require.NoError(t, pruneErr)
	require.False(t, waited, "prune waited on a row another transaction held")
	require.EqualValues(t, len(held), n, "one row of each table pruned")
	for table, sql := range held {
		var kept int
		require.NoError(t, r.pool.QueryRow(ctx, r.s(`SELECT count(*) FROM (`+sql+`) x`)).Scan(&kept))
		require.Equal(t, 1, kept, "%s: the held row is kept", table)
		require.NoError(t, r.pool.QueryRow(ctx, r.s(`SELECT count(*) FROM {s}.`+table)).Scan(&kept))
		require.Equal(t, 1, kept, "%s: the free row is pruned", table)
	}
}
