package pgqueue

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
	lock := "FOR UPDATE"
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

// querier runs a query in a transaction: a pgx.Tx, or a claim's claimTx.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// lockAndTake runs lock, a statement that locks limit rows (selecting limitColumns from sluice_limit,
// in key order), and in the same statement deletes from the ledger the releases completions appended
// for the rows it locked (see CompleteMany) and reads the clock. The rows it locked join held, with
// those releases folded in; a row held already (a transaction's own lock does not skip it) keeps the
// state the claim has decided so far, and only the new releases are folded into it. It returns the
// keys the statement locked, in key order, the instant, and whether any release was folded: the
// caller must then save the rows, since the releases are gone from the ledger. args are lock's, from
// $2 on; $1 is the injected instant.
//
// Only a holder of a limit row's lock takes its releases, so each is applied once; one committed after
// this statement's snapshot waits for the next. The clock is read after the locks are held and the
// releases taken, so that no decision uses an instant older than the state it reads (and
// Bucket.Refill ignores one that is).
func (q *Queue) lockAndTake(ctx context.Context, tx querier, held map[string]*limitRow, lock string, args ...any) (keys []string, now time.Time, folded bool, err error) {
	rs, err := tx.Query(ctx, q.s(`WITH held AS MATERIALIZED (`+lock+`
		), taken AS (
			DELETE FROM {s}.sluice_release r WHERE r.key IN (SELECT key FROM held)
			RETURNING r.key, r.count, r.reserved, r.refund, r.refund_output
		), sums AS MATERIALIZED (
			SELECT key, sum(count)::bigint AS count, sum(reserved)::bigint AS reserved, sum(refund)::float8 AS refund,
				sum(refund_output)::float8 AS refund_output
			FROM taken GROUP BY key
		), clock AS MATERIALIZED ( -- after every lock and the ledger's delete: it reads both to their end
			SELECT coalesce($1::timestamptz, clock_timestamp()) AS now
			FROM (SELECT count(*) FROM held) after_locks, (SELECT count(*) FROM sums) after_sums
		)
		SELECT held.*, s.key IS NOT NULL, coalesce(s.count, 0), coalesce(s.reserved, 0), coalesce(s.refund, 0), coalesce(s.refund_output, 0), c.now
		FROM held LEFT JOIN sums s ON s.key = held.key CROSS JOIN clock c ORDER BY held.key`), append([]any{q.nowArg()}, args...)...)
	if err != nil {
		return nil, now, false, err
	}
	defer rs.Close()
	sums := map[string]throttle.Released{}
	for rs.Next() {
		var (
			taken bool
			rel   throttle.Released
			count int64
		)
		r, err := scanLimit(rs, &taken, &count, &rel.Reserved, &rel.Refund, &rel.RefundOutput, &now)
		if err != nil {
			return nil, now, false, err
		}
		if _, ok := held[r.limit.Key]; !ok {
			held[r.limit.Key] = r
		}
		keys = append(keys, r.limit.Key)
		if taken {
			rel.Count = int(count)
			sums[r.limit.Key] = rel
		}
	}
	rs.Close() // before Err: closing reads what the round trip sent after the statement (claimTx)
	if err := rs.Err(); err != nil {
		return nil, now, false, err
	}
	now = now.UTC()
	return keys, now, foldReleases(held, sums, now), nil
}

// foldReleases applies the releases lockAndTake took to rows at now and reports whether there were
// any: the caller must then save the rows, since the releases are gone from the ledger.
func foldReleases(rows map[string]*limitRow, sums map[string]throttle.Released, now time.Time) bool {
	for k, sum := range sums {
		r := rows[k]
		r.state, r.dirty = r.limit.ReleaseMany(r.state, now, sum), true
		r.refunded += sum.Refund
		r.refundedOutput += sum.RefundOutput
	}
	return len(sums) > 0
}

// UpsertLimits creates the limits or, for keys that exist, replaces their configuration. The admission
// state (buckets, in-flight figures, pauses) of an existing key is kept, so a worker restarting with
// the same limits loses nothing and a changed limit applies at the next admission on every replica.
// Each limit is validated (after its defaults are filled in) before anything is written.
func (q *Queue) UpsertLimits(ctx context.Context, limits ...throttle.Limit) error {
	return q.UpsertLimitsTx(ctx, nil, limits...)
}

// UpsertLimitsTx is UpsertLimits inside tx (or on the pool when tx is nil).
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
// keys derived at run time (one per tenant) come into being. Each limit is validated first.
func (q *Queue) EnsureLimits(ctx context.Context, limits ...throttle.Limit) error {
	keys := make([]string, len(limits))
	vals := make([][]any, len(limits))
	for i, l := range limits {
		l = l.WithDefaults()
		if err := l.Validate(); err != nil {
			return fmt.Errorf("sluice: limits[%d]: %w", i, err)
		}
		keys[i] = l.Key
		vals[i] = limitConfigArgs(l)
	}
	for _, v := range vals {
		if _, err := q.pool.Exec(ctx, q.s(insertLimitSQL+` ON CONFLICT (key) DO NOTHING`), v...); err != nil {
			return fmt.Errorf("sluice: ensure limit %q: %w", v[0], err)
		}
	}
	return nil
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

// Pause stops admissions on key until until, on every replica; a later pause already in force is kept.
// It is what a provider's 429 with a Retry-After turns into.
func (q *Queue) Pause(ctx context.Context, key string, until time.Time) error {
	tag, err := q.pool.Exec(ctx, q.s(`UPDATE {s}.sluice_limit
		SET paused_until = greatest(paused_until, $2), updated_at = now() WHERE key = $1`), key, until)
	if err != nil {
		return fmt.Errorf("sluice: pause limit %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
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
