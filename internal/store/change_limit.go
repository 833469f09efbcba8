package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// ErrInvalidLimit is wrapped by ChangeLimit's error when the changed limit does not validate.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// ChangeLimit applies c to key's configuration (throttle.LimitChange.Apply: a rate changed without
// its burst gets its default burst back) under the limit row's lock, so that two changes at
// the same moment (two operators, the dashboard and the sluice command) both apply, and returns the
// limit stored. The result is validated first: an invalid one returns an error wrapping
// ErrInvalidLimit that names the field and value, and changes nothing; so does an OnSpent given for a
// limit left without allowances, which it would not change. An unknown key is created
// from the zero Limit when create is set, and is otherwise an error wrapping ErrUnknownLimit. Like
// UpsertLimits, it applies at the next admission on every replica, and the change is recorded in the
// limit history (LimitHistory) as made by who ctx names (WithChangedBy), else by the program.
func (q *Queue) ChangeLimit(ctx context.Context, key string, c throttle.LimitChange, create bool) (throttle.Limit, error) {
	if err := throttle.ValidateKey(key); err != nil {
		return throttle.Limit{}, fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	var out throttle.Limit
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		cur := throttle.Limit{Key: key}
		r, err := scanLimit(tx.QueryRow(ctx, q.s(`SELECT `+limitColumns+` FROM {s}.sluice_limit WHERE key = $1 FOR NO KEY UPDATE`), key))
		switch {
		case err == pgx.ErrNoRows && !create:
			return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
		case err == nil:
			cur = r.configured
		case err != pgx.ErrNoRows:
			return err
		}
		out = c.Apply(cur)
		out.Key = key
		if c.OnSpent != nil && len(out.Allowances) == 0 {
			// Apply sets OnSpent on each allowance: with none, it would be dropped without a word.
			return fmt.Errorf("%w: limit %q: OnSpent %q would apply to no allowance: the limit is left with none (give Allowances with it)",
				ErrInvalidLimit, key, *c.OnSpent)
		}
		if err := out.WithDefaults().Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
		}
		return q.UpsertLimitsTx(ctx, tx, out)
	})
	if err != nil {
		return throttle.Limit{}, err
	}
	return out.WithDefaults(), nil
}
