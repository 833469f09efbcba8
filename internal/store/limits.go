package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// lockLimits locks the limit rows of keys, in key order, and returns those it locked. With skipLocked,
// rows another transaction holds are left out rather than waited for.
func (q *Queue) lockLimits(ctx context.Context, tx pgx.Tx, keys []string, skipLocked bool) (map[string]*limitRow, error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	lock := "FOR NO KEY UPDATE"
	if skipLocked {
		lock += " SKIP LOCKED"
	}
	rows, err := tx.Query(ctx, q.s(`SELECT `+limitColumns+` FROM {s}.sluice_limit WHERE key = ANY($1) ORDER BY key `+lock), keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*limitRow{}
	for rows.Next() {
		r, err := scanLimit(rows)
		if err != nil {
			return nil, err
		}
		out[r.limit.Key] = r
	}
	return out, rows.Err()
}

// UpsertLimits creates the limits or, for keys that exist, replaces their configuration. The admission
// state (buckets, in-flight figures, pauses) of an existing key is kept, so a worker restarting with
// the same limits loses nothing and a changed limit applies at the next admission on every replica.
// Each limit is validated (after its defaults are filled in) before anything is written. Each key
// created or changed is recorded in the limit history (LimitHistory) as made by who ctx names
// (WithChangedBy), else by the program; an upsert that changes nothing records nothing.
func (q *Queue) UpsertLimits(ctx context.Context, limits ...throttle.Limit) error {
	return q.UpsertLimitsTx(ctx, nil, limits...)
}

// UpsertLimitsTx is UpsertLimits inside tx (or on the pool when tx is nil). Who ctx names is set for
// the rest of tx: the history records it for the limits tx changes afterwards, in SQL too.
func (q *Queue) UpsertLimitsTx(ctx context.Context, tx pgx.Tx, limits ...throttle.Limit) error {
	seen := map[string]bool{}
	for i, l := range limits {
		l = l.WithDefaults()
		if err := l.Validate(); err != nil {
			return fmt.Errorf("sluice: limits[%d]: %w", i, err)
		}
		if seen[l.Key] {
			return fmt.Errorf("sluice: limits[%d]: key %q is given twice", i, l.Key)
		}
		seen[l.Key] = true
		limits[i] = l
	}
	var db DB = q.pool
	if tx != nil {
		db = tx
	}
	return InTx(ctx, db, func(tx pgx.Tx) error {
		if err := q.setChangedBy(ctx, tx, changedBy(ctx)); err != nil {
			return fmt.Errorf("sluice: upsert limits: %w", err)
		}
		// Key order, so that concurrent upserts of overlapping sets cannot deadlock.
		sorted := slices.Clone(limits)
		slices.SortFunc(sorted, func(a, b throttle.Limit) int { return cmpString(a.Key, b.Key) })
		for _, l := range sorted {
			_, err := tx.Exec(ctx, q.s(insertLimitSQL+` ON CONFLICT (key) DO UPDATE SET `+limitConfigUpdate+`, updated_at = now()`),
				limitConfigArgs(l)...)
			if err != nil {
				return fmt.Errorf("sluice: upsert limit %q: %w", l.Key, err)
			}
		}
		// A limit raised at runtime may let queued work in: wake the claimers.
		return q.notify(ctx, tx, kindWork, "")
	})
}

// EnsureLimits creates those of limits whose keys do not exist yet and leaves existing ones alone,
// configuration included, so that a limit changed at runtime keeps its change. It is how limits on
// keys derived at run time (one per tenant) come into being. Each limit is validated first. The keys
// it creates are recorded in the limit history as created by who ctx names (WithChangedBy), else by
// the program.
func (q *Queue) EnsureLimits(ctx context.Context, limits ...throttle.Limit) error {
	vals := make([][]any, len(limits))
	for i, l := range limits {
		l = l.WithDefaults()
		if err := l.Validate(); err != nil {
			return fmt.Errorf("sluice: limits[%d]: %w", i, err)
		}
		vals[i] = limitConfigArgs(l)
	}
	// Key order, so that concurrent calls creating overlapping sets cannot deadlock.
	slices.SortFunc(vals, func(a, b []any) int { return cmpString(a[0].(string), b[0].(string)) })
	return InTx(ctx, q.pool, func(tx pgx.Tx) error {
		if err := q.setChangedBy(ctx, tx, changedBy(ctx)); err != nil {
			return fmt.Errorf("sluice: ensure limits: %w", err)
		}
		for _, v := range vals {
			if _, err := tx.Exec(ctx, q.s(insertLimitSQL+` ON CONFLICT (key) DO NOTHING`), v...); err != nil {
				return fmt.Errorf("sluice: ensure limit %q: %w", v[0], err)
			}
		}
		return nil
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Limit returns the current configuration of key, with defaults filled in.
func (q *Queue) Limit(ctx context.Context, key string) (throttle.Limit, error) {
	r, err := scanLimit(q.pool.QueryRow(ctx, q.s(`SELECT `+limitReadColumns+` FROM {s}.sluice_limit l WHERE key = $1`), key))
	if err == pgx.ErrNoRows {
		return throttle.Limit{}, fmt.Errorf("%w: %q", ErrUnknownLimit, key)
	}
	if err != nil {
		return throttle.Limit{}, fmt.Errorf("sluice: read limit %q: %w", key, err)
	}
	return r.configured, nil
}

// pauseSQL pauses the limits of keys $1 until the later of their pause in force and $2: throttle's
// State.Pause, in the UPDATE that takes the rows' locks rather than after a read. Pause and a
// requeue's pause (RequeueParams.PauseKeys) both run it; TestQueue_PauseMatchesThrottle holds it to
// State.Pause.
const pauseSQL = `UPDATE {s}.sluice_limit SET paused_until = greatest(paused_until, $2), updated_at = now() WHERE key = ANY($1)`

// Pause stops admissions on key until until, on every replica; a later pause already in force is kept
// (throttle's State.Pause, in SQL so that the update needs no read first; TestQueue_PauseMatchesThrottle
// checks the two agree). It is what a provider's 429 with a Retry-After turns into.
func (q *Queue) Pause(ctx context.Context, key string, until time.Time) error {
	tag, err := q.pool.Exec(ctx, q.s(pauseSQL), []string{key}, until)
	if err != nil {
		return fmt.Errorf("sluice: pause limit %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
	}
	return nil
}

// SetPause sets key's pause to exactly until, on every replica: an operator's pause, which shortens
// a pause in force (a provider's 429 included) as readily as it extends it, where Pause keeps the
// later of the two. An until not after now (the queue's clock) lifts the pause, as Resume does. Either
// way it wakes the claimers, so that a pause shortened or lifted lets the work it held in at once.
// The sluice command's pause and the dashboard's call it; the plugin's 429 path calls Pause, so that
// one provider's pause is never shortened by another's. An unknown key is an error wrapping
// ErrUnknownLimit. It is safe for concurrent use.
func (q *Queue) SetPause(ctx context.Context, key string, until time.Time) error {
	tag, err := q.pool.Exec(ctx, q.s(`UPDATE {s}.sluice_limit
		SET paused_until = CASE WHEN $2 > coalesce($3::timestamptz, statement_timestamp()) THEN $2::timestamptz END,
			updated_at = now()
		WHERE key = $1`), key, until, q.nowArg())
	if err != nil {
		return fmt.Errorf("sluice: set pause of limit %q to %s: %w", key, until.Format(time.RFC3339Nano), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
	}
	if err := q.notify(ctx, q.pool, kindWork, ""); err != nil {
		return fmt.Errorf("sluice: set pause of limit %q: wake the claimers: %w", key, err)
	}
	return nil
}

// Resume lifts key's pause at once, on every replica, whatever set it (Pause, or a provider's 429).
func (q *Queue) Resume(ctx context.Context, key string) error {
	tag, err := q.pool.Exec(ctx, q.s(`UPDATE {s}.sluice_limit SET paused_until = NULL, updated_at = now() WHERE key = $1`), key)
	if err != nil {
		return fmt.Errorf("sluice: resume limit %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
	}
	if err := q.notify(ctx, q.pool, kindWork, ""); err != nil {
		return fmt.Errorf("sluice: resume limit %q: wake the claimers: %w", key, err)
	}
	return nil
}
