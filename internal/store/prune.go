package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// UsageHistory is how long sluice_usage keeps what each key admitted, and sluice_run_time how long
// runs took.
const UsageHistory = time.Hour

// PruneParams bounds Prune.
type PruneParams struct {
	// ReturnedAge is how long a returned ticket keeps its place for a retry. Defaults to 1 hour.
	ReturnedAge time.Duration
	// OwnerAge is how long after its lease lapsed an owner row with no tickets is kept. Defaults to
	// 1 hour.
	OwnerAge time.Duration
}

// Prune deletes returned tickets and lapsed owners older than the bounds, fairness rows of idle keys,
// usage history older than an hour, limit history older than LimitHistoryRetention, and the
// allowance ledger's rows of limits that no longer have allowances. It is
// maintenance: any process may run it, any number of times.
func (q *Queue) Prune(ctx context.Context, p PruneParams) (int64, error) {
	if p.ReturnedAge <= 0 {
		p.ReturnedAge = time.Hour
	}
	if p.OwnerAge <= 0 {
		p.OwnerAge = time.Hour
	}
	var n int64
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		now, err := q.now(ctx, tx)
		if err != nil {
			return err
		}
		// Every statement locks the rows it deletes in key order and skips the rows another
		// transaction holds (FOR UPDATE SKIP LOCKED), and so never waits on a row lock. Enqueue
		// batches upsert sluice_fair rows in key order, claims and completions lock tickets, usage
		// and ledger rows, and other processes prune at once: a delete that waited, its own rows
		// taken in scan order meanwhile, closed a cycle with them (40P01, bug 4). A skipped row is
		// one that is in use, or that the next prune deletes. FOR UPDATE re-checks the conditions
		// on the row's latest version: a fairness row whose finish a concurrent enqueue raised is
		// kept.
		for _, stmt := range []struct {
			sql  string
			args []any
		}{
			{`DELETE FROM {s}.sluice_ticket WHERE id IN (SELECT id FROM {s}.sluice_ticket
				WHERE state = 'returned' AND finished_at < $1 ORDER BY id FOR UPDATE SKIP LOCKED)`,
				[]any{now.Add(-p.ReturnedAge)}},
			{`DELETE FROM {s}.sluice_owner WHERE id IN (SELECT o.id FROM {s}.sluice_owner o WHERE o.lease_expires_at < $1
				AND NOT EXISTS (SELECT 1 FROM {s}.sluice_ticket t WHERE t.owner = o.id AND t.state IN ('queued', 'admitted', 'running'))
				ORDER BY o.id FOR UPDATE OF o SKIP LOCKED)`,
				[]any{now.Add(-p.OwnerAge)}},
			// A fairness key whose finish tag is behind its line's virtual time has no credit left: its
			// row would give a new ticket the line's virtual time anyway.
			{`DELETE FROM {s}.sluice_fair WHERE (line_key, fairness_key) IN (SELECT f.line_key, f.fairness_key
				FROM {s}.sluice_fair f JOIN {s}.sluice_limit l ON l.key = f.line_key WHERE f.finish < l.vtime
				ORDER BY 1, 2 FOR UPDATE OF f SKIP LOCKED)`, nil},
			{`DELETE FROM {s}.sluice_usage WHERE (key, second) IN (SELECT key, second FROM {s}.sluice_usage
				WHERE second < $1 ORDER BY 1, 2 FOR UPDATE SKIP LOCKED)`, []any{now.Add(-UsageHistory)}},
			// Run times, read by Explain over the last hour; rows are never updated, so a locked
			// row's ctid stays its own.
			{`DELETE FROM {s}.sluice_run_time WHERE ctid = ANY(ARRAY(SELECT ctid FROM {s}.sluice_run_time
				WHERE ended_at < $1 ORDER BY key, ended_at FOR UPDATE SKIP LOCKED))`, []any{now.Add(-UsageHistory)}},
			{`DELETE FROM {s}.sluice_limit_change WHERE id IN (SELECT id FROM {s}.sluice_limit_change
				WHERE at < $1 ORDER BY id FOR UPDATE SKIP LOCKED)`, []any{now.Add(-LimitHistoryRetention)}},
			// Claims take the allowance ledger's rows of limits with allowances only: the rows of a
			// limit whose allowances were removed (or that was deleted) would stay; a removed allowance's
			// kept state (throttle.AllowanceStates) still takes its rows. The ledger has no
			// key of its own; its rows are never updated, so a locked row's ctid stays its own.
			{`DELETE FROM {s}.sluice_allowance_release WHERE ctid = ANY(ARRAY(SELECT a.ctid FROM {s}.sluice_allowance_release a
				WHERE NOT EXISTS (SELECT 1 FROM {s}.sluice_limit l WHERE l.key = a.key
					AND (l.allowances IS NOT NULL OR (l.allowance_state IS NOT NULL AND l.allowance_state <> '{}')))
				ORDER BY a.key, a.admitted_at, a.ctid FOR UPDATE OF a SKIP LOCKED))`, nil},
		} {
			tag, err := tx.Exec(ctx, q.s(stmt.sql), stmt.args...)
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sluice: prune: %w", err)
	}
	return n, nil
}
