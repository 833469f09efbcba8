package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// maxLimitSteps bounds the changes LimitSteps reads per key: a chart has a few hundred points.
const maxLimitSteps = 1000

// LimitStep is a limit as it stood from At until the next step (the last one until now): as
// configured, and as admission applied it (Configured lowered to what the provider's headers had
// taught, throttle.EffectiveLimit). Before a limit was created both are the zero Limit (with Key set):
// no limit. It is a plain value; its JSON names are what the dashboard's api/status serves.
type LimitStep struct {
	At         time.Time      `json:"at"`
	Configured throttle.Limit `json:"configured"`
	Effective  throttle.Limit `json:"effective"`
}

// LimitSteps returns, for each of keys, the limit as it stood over time since since, oldest first:
// a step at since, then one at each recorded change (LimitHistory) after it, up to the last 1,000. It
// is what a chart of the key's use draws its limit from, so that yesterday's higher rate does not read
// as a breach of today's. The steps are worked back from the limit's row as it stands, read with its
// history in one snapshot; a key that does not exist has no steps.
func (q *Queue) LimitSteps(ctx context.Context, keys []string, since time.Time) (map[string][]LimitStep, error) {
	out := make(map[string][]LimitStep, len(keys))
	tx, err := q.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("sluice: limit steps: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, q.s(`SELECT `+limitColumns+` FROM {s}.sluice_limit WHERE key = ANY($1)`), keys)
	if err != nil {
		return nil, fmt.Errorf("sluice: limit steps: %w", err)
	}
	now, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*limitRow, error) { return scanLimit(row) })
	if err != nil {
		return nil, fmt.Errorf("sluice: limit steps: %w", err)
	}
	hist, err := q.limitHistory(ctx, tx, keys, since, maxLimitSteps)
	if err != nil {
		return nil, fmt.Errorf("sluice: limit steps: %w", err)
	}
	for _, r := range now {
		out[r.configured.Key] = limitSteps(r.configured, r.learned, hist[r.configured.Key], since)
	}
	return out, nil
}

// limitSteps works back from the limit as it stands (configured, and learned as stored) through its
// changes since since (oldest first): before each change, the figures its record says it had before.
func limitSteps(configured, learned throttle.Limit, changes []LimitRecord, since time.Time) []LimitStep {
	key := configured.Key
	step := func(at time.Time) LimitStep {
		return LimitStep{At: at, Configured: configured, Effective: throttle.EffectiveLimit(configured, learned)}
	}
	before := func(l *throttle.Limit) throttle.Limit {
		if l == nil {
			return throttle.Limit{Key: key}
		}
		return l.WithDefaults() // as admission reads it: a row written in SQL may leave a burst 0
	}
	out := make([]LimitStep, len(changes)+1)
	for i := len(changes) - 1; i >= 0; i-- {
		c := changes[i]
		out[i+1] = step(c.At)
		switch c.Kind {
		case ChangeLearned:
			learned = before(c.Before)
		default:
			configured = before(c.Before)
		}
	}
	out[0] = step(since)
	return out
}
