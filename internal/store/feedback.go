package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// Observe applies what a provider's rate-limit headers say to key, at once for every replica: the
// provider's real rates are learned when lower than the configured ones (never higher, and a limit
// kind that was not configured is not added), the buckets are lowered to what the provider says
// remains, and a Retry-After pauses the key. Recovery then follows the (learned) refill rate. It
// returns ErrUnknownLimit for a key that does not exist. A daily figure (throttle.RateLimitInfo's
// RequestsWindow or TokensWindow) lowers the amount of the key's allowance of that meter per day, and
// raises what it has counted to what the provider says is used, never the per-minute rates. A change of the learned rates is recorded in
// the limit history as kind ChangeLearned, by "header learning"; the buckets and pauses are state and
// are not recorded.
func (q *Queue) Observe(ctx context.Context, key string, info throttle.RateLimitInfo) error {
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		// The releases completions left in the ledger are folded in first (lockAndTake): the
		// provider's remaining figures count what those calls gave back, and a later claim folding
		// them would count it again.
		rows := map[string]*limitRow{}
		_, now, folded, err := q.lockAndTake(ctx, tx, rows, `SELECT `+limitColumns+` FROM {s}.sluice_limit WHERE key = $2 FOR NO KEY UPDATE`, key)
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
		if learned.Equal(r.learned) {
			// Most responses teach what the last one did: the row's learned figures stay as they are.
			_, err = tx.Exec(ctx, q.s(`UPDATE {s}.sluice_limit SET learned_at = $2 WHERE key = $1`), key, now)
			return err
		}
		if err := q.setChangedBy(ctx, tx, headerLearning); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, q.s(`UPDATE {s}.sluice_limit SET learned_requests_per_second = $2, learned_burst = $3,
			learned_tokens_per_minute = $4, learned_token_burst = $5, learned_at = $6,
			learned_input_tokens_per_minute = $7, learned_input_token_burst = $8,
			learned_output_tokens_per_minute = $9, learned_output_token_burst = $10, learned_allowances = $11 WHERE key = $1`), key,
			learnedColumn(learned.RequestsPerSecond), learnedColumn(learned.Burst),
			learnedColumn(learned.TokensPerMinute), learnedColumn(learned.TokenBurst), now,
			learnedColumn(learned.InputTokensPerMinute), learnedColumn(learned.InputTokenBurst),
			learnedColumn(learned.OutputTokensPerMinute), learnedColumn(learned.OutputTokenBurst), jsonOrNull(learned.Allowances))
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
