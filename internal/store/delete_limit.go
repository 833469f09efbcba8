package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// ErrLimitInUse is wrapped by DeleteLimit's error when unfinished tickets (queued, admitted or
// running) still name the key: deleting it would leave them waiting in no line, or holding a limit
// that no longer exists.
var ErrLimitInUse = errors.New("sluice: limit in use")

// unfinishedStates are the states of a ticket that still needs its limits: waiting for them, or
// holding a reservation on them. A finished ticket has released them (its outcome waits for delivery
// only); a returned one keeps a place for its retry, which names the key again.
const unfinishedStates = `('queued', 'admitted', 'running')`

// DeleteLimit deletes the limit key with what is kept under its key: its fair-share tags, its pending
// releases and allowance ledger rows, its usage and run-time history, and the returned tickets that
// keep a retry's place in its line. The limit history keeps the deletion (ChangeDeleted, with the
// configuration it had) as made by who ctx names (WithChangedBy), else by the program, and the
// earlier records of the key, until Prune's retention.
//
// A key that unfinished tickets (queued, admitted or running) name, as their line or as another of
// their limits, is not deleted: the error wraps ErrLimitInUse and says how many, and nothing changes.
// An unknown key is an error wrapping ErrUnknownLimit. Once deleted, an Enqueue naming the key fails
// with ErrUnknownLimit until it is created again (UpsertLimits, ChangeLimit with create), which
// starts it afresh.
//
// It is safe against concurrent enqueues: Enqueue locks the limit rows it names (FOR KEY SHARE) until
// its transaction ends, and DeleteLimit locks the row FOR UPDATE before it counts the tickets, so a
// ticket is either counted or refused, never written for a deleted key. Claims and enqueues do not
// wait for each other; DeleteLimit waits for the transactions that enqueue on, claim or change the
// key (an EnqueueTx inside a long transaction holds it up until that commits).
func (q *Queue) DeleteLimit(ctx context.Context, key string) error {
	return q.DeleteLimitTx(ctx, nil, key)
}

// DeleteLimitTx is DeleteLimit inside tx (or on the pool when tx is nil): the limit is gone when, and
// only when, tx commits, and its row stays locked until then. Who ctx names is set for the rest of tx,
// as UpsertLimitsTx does.
func (q *Queue) DeleteLimitTx(ctx context.Context, tx pgx.Tx, key string) error {
	if err := throttle.ValidateKey(key); err != nil {
		return fmt.Errorf("sluice: delete limit: %w", err)
	}
	var db DB = q.pool
	if tx != nil {
		db = tx
	}
	return InTx(ctx, db, func(tx pgx.Tx) error {
		if err := q.setChangedBy(ctx, tx, changedBy(ctx)); err != nil {
			return fmt.Errorf("sluice: delete limit %q: %w", key, err)
		}
		// The lock first: an enqueue that read the row before it holds KEY SHARE until it commits, and
		// this waits for it, so the count below (a statement of its own, with a snapshot taken after
		// the lock) sees its tickets; an enqueue after it waits for this transaction.
		var found bool
		err := tx.QueryRow(ctx, q.s(`SELECT true FROM {s}.sluice_limit WHERE key = $1 FOR UPDATE`), key).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
		}
		if err != nil {
			return fmt.Errorf("sluice: delete limit %q: lock its row: %w", key, err)
		}
		var inUse int64
		if err := tx.QueryRow(ctx, q.s(`SELECT count(*) FROM {s}.sluice_ticket
			WHERE state IN `+unfinishedStates+` AND $1 = ANY(limit_keys)`), key).Scan(&inUse); err != nil {
			return fmt.Errorf("sluice: delete limit %q: count its tickets: %w", key, err)
		}
		if inUse > 0 {
			return fmt.Errorf("%w: %q is named by %d unfinished tickets (queued, admitted or running): delete it once they finish",
				ErrLimitInUse, key, inUse)
		}
		// What is kept under the key would dangle: no claim folds or prunes it once the row is gone
		// (Prune keeps fair-share rows of lines it cannot find the virtual time of, for one). Nothing
		// writes these rows for the key meanwhile: claims and releases hold the row's lock to, and
		// completions append only for tickets that were unfinished, which the count refused.
		for _, stmt := range []string{
			`DELETE FROM {s}.sluice_fair WHERE line_key = $1`,
			`DELETE FROM {s}.sluice_release WHERE key = $1`,
			`DELETE FROM {s}.sluice_allowance_release WHERE key = $1`,
			`DELETE FROM {s}.sluice_usage WHERE key = $1`,
			`DELETE FROM {s}.sluice_run_time WHERE key = $1`,
			`DELETE FROM {s}.sluice_ticket WHERE state = 'returned' AND line_key = $1`,
			// The history's trigger records the deletion, with who setChangedBy named.
			`DELETE FROM {s}.sluice_limit WHERE key = $1`,
		} {
			if _, err := tx.Exec(ctx, q.s(stmt), key); err != nil {
				return fmt.Errorf("sluice: delete limit %q: %w", key, err)
			}
		}
		return nil
	})
}
