package pgqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// Observe applies what a provider's rate-limit headers say to key, at once for every replica: the
// provider's real rates are learned when lower than the configured ones (never higher, and a limit
// kind that was not configured is not added), the buckets are lowered to what the provider says
// remains, and a Retry-After pauses the key. Recovery then follows the (learned) refill rate. It
// returns ErrUnknownLimit for a key that does not exist.
func (q *Queue) Observe(ctx context.Context, key string, info throttle.RateLimitInfo) error {
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		// The releases completions left in the ledger are folded in first (lockAndTake): the
		// provider's remaining figures count what those calls gave back, and a later claim folding
		// them would count it again.
		rows := map[string]*limitRow{}
		_, now, folded, err := q.lockAndTake(ctx, tx, rows, `SELECT `+limitColumns+` FROM {s}.sluice_limit WHERE key = $2 FOR UPDATE`, key)
		if err != nil {
			return err
		}
		r := rows[key]
		if r == nil {
			return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
		}
		if folded {
			used := usage{}
			used.refunds(rows, now)
			if _, err := tx.Exec(ctx, q.s(usageUpsert(1)), used.args()...); err != nil {
				return err
			}
		}
		// Bring the buckets to now under the rates in force, then apply the headers with the
		// configured limit as the ceiling, and keep what they taught.
		eff, st := r.configured.Observe(r.limit.Refill(r.state, now), now, info)
		r.state, r.dirty = st, true
		if err := q.saveLimits(ctx, tx, rows); err != nil {
			return err
		}
		learned := throttle.LearnedLimit(r.configured, eff)
		_, err = tx.Exec(ctx, q.s(`UPDATE {s}.sluice_limit SET learned_requests_per_second = $2, learned_burst = $3,
			learned_tokens_per_minute = $4, learned_token_burst = $5, learned_at = $6,
			learned_input_tokens_per_minute = $7, learned_input_token_burst = $8,
			learned_output_tokens_per_minute = $9, learned_output_token_burst = $10 WHERE key = $1`), key,
			learnedColumn(learned.RequestsPerSecond), learnedColumn(learned.Burst),
			learnedColumn(learned.TokensPerMinute), learnedColumn(learned.TokenBurst), now,
			learnedColumn(learned.InputTokensPerMinute), learnedColumn(learned.InputTokenBurst),
			learnedColumn(learned.OutputTokensPerMinute), learnedColumn(learned.OutputTokenBurst))
		return err
	})
	if err != nil {
		return fmt.Errorf("sluice: observe provider headers for %q: %w", key, err)
	}
	return nil
}

// learnedColumn is a learned figure as stored: NULL when nothing was learned (zero), which reads back
// as zero.
func learnedColumn(v float64) any {
	if v == 0 {
		return nil
	}
	return v
}

// LimitStatus is a limit as configured and as admission applies it now: the part of a KeyStatus that
// comes from the limit's row alone.
type LimitStatus struct {
	// Configured is the limit as set by UpsertLimits or SQL; Effective is it lowered to what the
	// provider's headers taught (sluiceactivity.ReportHeaders).
	Configured throttle.Limit `json:"configured"`
	Effective  throttle.Limit `json:"effective"`
	// State is the admission state: buckets, in-flight figures (net of pending releases), the pause
	// (which may be past).
	State throttle.State `json:"state"`
}

// LimitStatus returns key's configured and effective limit and its admission state: the light read
// of Status, which reads the limit's row and its pending releases and counts no tickets, for what
// reads often (the plugin's gauges). An unknown key returns an error wrapping ErrUnknownLimit.
func (q *Queue) LimitStatus(ctx context.Context, key string) (LimitStatus, error) {
	// The state as the next claim will see it: the pending releases folded in.
	var (
		pending throttle.Released
		now     time.Time
	)
	r, err := scanLimit(prefixed{q.pool.QueryRow(ctx, q.s(`SELECT coalesce(p.count, 0)::int, coalesce(p.reserved, 0)::bigint,
			coalesce(p.refund, 0), coalesce(p.refund_output, 0), coalesce($2::timestamptz, clock_timestamp()), `+limitColumns+`
		FROM {s}.sluice_limit l LEFT JOIN (SELECT key AS pending_key, sum(count) AS count, sum(reserved) AS reserved,
				sum(refund) AS refund, sum(refund_output) AS refund_output
			FROM {s}.sluice_release WHERE key = $1 GROUP BY key) p ON p.pending_key = l.key
		WHERE l.key = $1`), key, q.nowArg()), []any{&pending.Count, &pending.Reserved, &pending.Refund, &pending.RefundOutput, &now}})
	if err == pgx.ErrNoRows {
		return LimitStatus{}, fmt.Errorf("%w: %q", ErrUnknownLimit, key)
	}
	if err != nil {
		return LimitStatus{}, fmt.Errorf("sluice: read limit %q: %w", key, err)
	}
	if pending != (throttle.Released{}) {
		r.state = r.limit.ReleaseMany(r.state, now.UTC(), pending)
	}
	return LimitStatus{Configured: r.configured, Effective: r.limit, State: r.state}, nil
}
